package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cqlguard/cqlguard/admin"
	"github.com/cqlguard/cqlguard/test/fakenode"
	"github.com/cqlguard/cqlguard/test/load"
)

var topAt = time.Date(2026, 3, 1, 12, 30, 45, 0, time.UTC)

// rejections builds a metricsSample's rejection counters from
// "keyspace.table op outcome" keys.
func rejections(kv map[string]float64) map[rejectionKey]float64 {
	m := map[rejectionKey]float64{}
	for k, v := range kv {
		var r rejectionKey
		var name string
		fmt.Sscan(k, &name, &r.op, &r.outcome)
		r.keyspace, r.table, _ = strings.Cut(name, ".")
		m[r] = v
	}
	return m
}

func TestRenderTop(t *testing.T) {
	t.Parallel()
	unreachable := fmt.Errorf("%w: dial tcp 127.0.0.1:9180: connect: connection refused", admin.ErrUnreachable)
	metrics := &metricsSample{connections: 12, inFlight: 3, upstream: 5000, haveUpstream: true,
		rejections: rejections(map[string]float64{"shop.carts read rejected": 900, "shop.orders write dry_run": 10})}
	hot := []admin.HotPartition{
		{Keyspace: "shop", Table: "carts", Op: "read", Token: -4069959284402364209, Key: `"alice"`, Rate: 1500, RateError: 0, Limit: 100},
		{Keyspace: "shop", Table: "orders", Op: "write", Token: 42, Key: "0x00", Rate: 120, RateError: 30, Limit: 100},
		{Keyspace: "shop", Table: "carts", Op: "write", Token: 7, Key: `"bob"`, Rate: 5.5, Limit: 0},
	}
	busy := &rates{upstream: 2500, haveUpstream: true, refusals: []refusalRate{
		{rejectionKey: rejectionKey{"shop", "carts", "read", "rejected"}, perSecond: 1400, total: 900},
		{rejectionKey: rejectionKey{"shop", "orders", "write", "dry_run"}, perSecond: 0, total: 10},
	}}
	many := make([]admin.HotPartition, 10)
	for i := range many {
		many[i] = admin.HotPartition{Keyspace: "ks", Table: "t", Op: "read", Token: int64(i), Rate: 50, Limit: 100}
	}
	manyRej := map[string]float64{}
	for i := range 5 {
		manyRej[fmt.Sprintf("ks.t%d read rejected", i)] = float64(i)
	}
	tests := []struct {
		name   string
		v      topView
		want   string // the whole frame, when set
		has    []string
		hasNot []string
		lines  int // at most, when set
	}{
		{
			name: "a proxy under a hot load",
			v: topView{Admin: "127.0.0.1:9180", Interval: time.Second, Interactive: true, Retrying: true, Rates: busy,
				Scrape: scrape{at: topAt, hot: hot, metrics: metrics}},
			want: `cqlguard top  127.0.0.1:9180  12:30:45  every 1s  (q quits)
connections 12  in flight 3  upstream 2500 req/s

Hot partitions (3)
TABLE        OP                    TOKEN  KEY      RATE/S  LIMIT  OF LIMIT
shop.carts   read   -4069959284402364209  "alice"    1500    100     1500%  OVER
shop.orders  write                    42  0x00        120    100      120%  over?
shop.carts   write                     7  "bob"      5.50      -         -

Refusals (2)
TABLE        OP     OUTCOME   PER S  TOTAL
shop.carts   read   rejected   1400    900
shop.orders  write  dry_run    0.00     10`,
		},
		{
			name: "before the first reading",
			v:    topView{Admin: "127.0.0.1:9180", Interval: time.Second},
			has:  []string{"Hot partitions: reading 127.0.0.1:9180 ...", "connections -", "Refusals: -"},
		},
		{
			name:   "the listener does not answer: one error, tried again",
			v:      topView{Admin: "127.0.0.1:9180", Interval: time.Second, Retrying: true, Scrape: scrape{at: topAt, hotErr: unreachable, metricsErr: unreachable}},
			has:    []string{"error: cannot reach the admin listener: dial tcp 127.0.0.1:9180: connect: connection refused (retrying)", "Hot partitions: -", "Refusals: -"},
			hasNot: []string{"Hot partitions: cannot"},
		},
		{
			name:   "-once does not say it retries",
			v:      topView{Admin: "127.0.0.1:9180", Interval: time.Second, Scrape: scrape{at: topAt, hotErr: unreachable, metricsErr: unreachable}},
			hasNot: []string{"retrying"},
		},
		{
			name: "/hot asks for a token",
			v: topView{Admin: "a:1", Interval: time.Second, Scrape: scrape{at: topAt, metrics: metrics,
				hotErr: errors.New("/hot asks for a bearer token: pass -token-file FILE")}},
			has:    []string{"Hot partitions: /hot asks for a bearer token: pass -token-file FILE", "connections 12  in flight 3  upstream - req/s", "shop.carts   read   rejected      -    900"},
			hasNot: []string{"error:"},
		},
		{
			name: "nothing counted yet, no refusals",
			v:    topView{Admin: "a:1", Interval: time.Second, Rates: &rates{}, Scrape: scrape{at: topAt, hot: []admin.HotPartition{}, metrics: &metricsSample{}}},
			has:  []string{"Hot partitions: none counted yet", "Refusals: none"},
		},
		{
			name:   "keys hidden by the proxy: no key column",
			v:      topView{Admin: "a:1", Interval: time.Second, Scrape: scrape{at: topAt, hot: many[:1]}},
			has:    []string{"TABLE  OP    TOKEN  RATE/S  LIMIT  OF LIMIT", "ks.t   read      0    50.0    100       50%"},
			hasNot: []string{"KEY"},
		},
		{
			name:  "a short terminal: both sections shortened",
			v:     topView{Admin: "a:1", Interval: time.Second, Height: 14, Scrape: scrape{at: topAt, hot: many, metrics: &metricsSample{rejections: rejections(manyRej)}}},
			has:   []string{"Hot partitions (4 of 10)", "Refusals (2 of 5)"},
			lines: 14,
		},
		{
			name:  "a terminal too short for anything",
			v:     topView{Admin: "a:1", Interval: time.Second, Height: 3, Scrape: scrape{at: topAt, hot: many}},
			lines: 3,
		},
		{
			name: "a narrow terminal: lines cut",
			v: topView{Admin: "127.0.0.1:9180", Interval: time.Second, Width: 30,
				Scrape: scrape{at: topAt, hot: []admin.HotPartition{{Keyspace: "k", Table: strings.Repeat("t", 60), Op: "read", Key: strings.Repeat("x", 100), KeyTruncated: true}}}},
			has: []string{"k." + strings.Repeat("t", 27) + "~"},
		},
		{
			name:   "control characters from the listener are not sent to the terminal",
			v:      topView{Admin: "a:1", Interval: time.Second, Scrape: scrape{at: topAt, hot: []admin.HotPartition{{Keyspace: "k\x1b[2J", Table: "t\u009b", Op: "read"}}}},
			has:    []string{`k\x1b[2J.t\u009b`},
			hasNot: []string{"\x1b", "\u009b"},
		},
		{
			name: "bidi controls from the listener are shown escaped",
			v: topView{Admin: "a:1", Interval: time.Second, Scrape: scrape{at: topAt,
				hot:     []admin.HotPartition{{Keyspace: "shop", Table: "carts\u202egpj.exe", Op: "read", Token: 1, Key: "\u2066alice\u2069", Rate: 1, Limit: 1}},
				metrics: &metricsSample{rejections: rejections(map[string]float64{"shop.\u202eorders read rejected": 1})}}},
			has:    []string{`shop.carts\u202egpj.exe`, `\u2066alice\u2069`, `shop.\u202eorders`},
			hasNot: []string{"\u202e", "\u2066", "\u2069"},
		},
		{
			name: "errors quoting the listener are shown escaped",
			v: topView{Admin: "a:1", Interval: time.Second, Scrape: scrape{at: topAt,
				hotErr: errors.New("/hot: 500 Internal Server Error: \x1b]0;owned\a\u202e"), metricsErr: errors.New("/metrics: line 1: \u2067x")}},
			has:    []string{`Hot partitions: /hot: 500 Internal Server Error: \x1b]0;owned\x07\u202e`, `error: /metrics: line 1: \u2067x`},
			hasNot: []string{"\x1b", "\a", "\u202e", "\u2067"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := renderTop(tt.v)
			if tt.want != "" && got != tt.want {
				t.Errorf("frame:\n%s\nwant:\n%s", got, tt.want)
			}
			for _, s := range tt.has {
				if !strings.Contains(got, s) {
					t.Errorf("frame lacks %q:\n%s", s, got)
				}
			}
			for _, s := range tt.hasNot {
				if strings.Contains(got, s) {
					t.Errorf("frame has %q:\n%s", s, got)
				}
			}
			lines := strings.Split(got, "\n")
			if tt.lines > 0 && len(lines) > tt.lines {
				t.Errorf("%d lines, want at most %d:\n%s", len(lines), tt.lines, got)
			}
			for _, l := range lines {
				if tt.v.Width > 0 && utf8.RuneCountInString(l) > tt.v.Width {
					t.Errorf("line %q is wider than %d", l, tt.v.Width)
				}
			}
		})
	}
}

// Text from the admin listener reaches the terminal with what would drive
// it, or hide or reorder what is around it, escaped, and everything else
// as it is.
func TestPrintable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"plain", "shop.carts", "shop.carts"},
		{"letters of any script, marks and symbols", "café 東京 Ωmega ✓ שלום", "café 東京 Ωmega ✓ שלום"},
		{"escape sequence", "\x1b[2J", `\x1b[2J`},
		{"newline, tab, carriage return", "a\nb\tc\r", `a\x0ab\x09c\x0d`},
		{"delete", "a\x7f", `a\x7f`},
		{"C1 control (CSI)", "\u009b2J", `\u009b2J`},
		{"right-to-left override", "txt\u202egpj.exe", `txt\u202egpj.exe`},
		{"every bidi embedding and override", "\u202a\u202b\u202c\u202d\u202e", `\u202a\u202b\u202c\u202d\u202e`},
		{"bidi isolates", "\u2066\u2067\u2068\u2069", `\u2066\u2067\u2068\u2069`},
		{"bidi marks", "\u200e\u200f\u061c", `\u200e\u200f\u061c`},
		{"zero-width space and joiner, byte order mark", "a\u200bb\u200dc\ufeff", `a\u200bb\u200dc\ufeff`},
		{"line and paragraph separators", "a\u2028b\u2029", `a\u2028b\u2029`},
		{"private use", "\ue000", `\ue000`},
		{"tag characters", "\U000e0041", `\U000e0041`},
		{"a byte that is not UTF-8", "a\xffb", `a\xffb`},
		{"a backslash stays", `a\u202e`, `a\u202e`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := printable(tt.in)
			if got != tt.want {
				t.Errorf("printable(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if again := printable(got); again != got {
				t.Errorf("escaped twice: %q, want %q", again, got)
			}
		})
	}
}

func TestRateBetween(t *testing.T) {
	t.Parallel()
	sample := func(upstream float64, rej map[string]float64) *metricsSample {
		return &metricsSample{upstream: upstream, haveUpstream: true, rejections: rejections(rej)}
	}
	key := func(s string) rejectionKey {
		for k := range rejections(map[string]float64{s: 0}) {
			return k
		}
		panic(s)
	}
	tests := []struct {
		name      string
		prev, cur *metricsSample
		dt        time.Duration
		wantNil   bool
		upstream  float64
		refusals  []refusalRate
	}{
		{name: "no earlier reading", cur: sample(10, nil), dt: time.Second, wantNil: true},
		{name: "no time between", prev: sample(10, nil), cur: sample(20, nil), dt: 0, wantNil: true},
		{
			name: "differences over the time between",
			prev: sample(1000, map[string]float64{"a.t read rejected": 100, "a.t write rejected": 50}),
			cur:  sample(3000, map[string]float64{"a.t read rejected": 500, "a.t write rejected": 60}),
			dt:   2 * time.Second, upstream: 1000,
			refusals: []refusalRate{
				{rejectionKey: key("a.t read rejected"), perSecond: 200, total: 500},
				{rejectionKey: key("a.t write rejected"), perSecond: 5, total: 60},
			},
		},
		{
			name:     "a label set new since the last reading counts from 0",
			prev:     sample(0, nil),
			cur:      sample(0, map[string]float64{"a.t read dry_run": 30}),
			dt:       500 * time.Millisecond,
			refusals: []refusalRate{{rejectionKey: key("a.t read dry_run"), perSecond: 60, total: 30}},
		},
		{
			name: "a restarted proxy's counters count from 0",
			prev: sample(9000, map[string]float64{"a.t read rejected": 800}),
			cur:  sample(400, map[string]float64{"a.t read rejected": 20}),
			dt:   time.Second, upstream: 400,
			refusals: []refusalRate{{rejectionKey: key("a.t read rejected"), perSecond: 20, total: 20}},
		},
		{
			name: "equal rates in the order of their names",
			prev: sample(0, map[string]float64{"b.t read rejected": 0, "a.t read rejected": 0, "a.s write rejected": 0}),
			cur:  sample(0, map[string]float64{"b.t read rejected": 10, "a.t read rejected": 10, "a.s write rejected": 0}),
			dt:   time.Second,
			refusals: []refusalRate{
				{rejectionKey: key("a.t read rejected"), perSecond: 10, total: 10},
				{rejectionKey: key("b.t read rejected"), perSecond: 10, total: 10},
				{rejectionKey: key("a.s write rejected"), perSecond: 0, total: 0},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := rateBetween(tt.prev, topAt, tt.cur, topAt.Add(tt.dt))
			if tt.wantNil {
				if r != nil {
					t.Fatalf("rates %+v, want none", r)
				}
				return
			}
			if r == nil {
				t.Fatal("no rates")
			}
			if !r.haveUpstream || r.upstream != tt.upstream {
				t.Errorf("upstream %v/s, want %v/s", r.upstream, tt.upstream)
			}
			if fmt.Sprint(r.refusals) != fmt.Sprint(tt.refusals) {
				t.Errorf("refusals %v, want %v", r.refusals, tt.refusals)
			}
		})
	}
}

// A view follows readings: rates from the second good reading of /metrics
// on, and across a failed one from the last good one.
func TestTopViewUpdate(t *testing.T) {
	t.Parallel()
	var v topView
	m := func(n float64) *metricsSample {
		return &metricsSample{rejections: rejections(map[string]float64{"a.t read rejected": n})}
	}
	v.update(scrape{at: topAt, metrics: m(10)})
	if v.Rates != nil {
		t.Fatalf("rates after one reading: %+v", v.Rates)
	}
	v.update(scrape{at: topAt.Add(time.Second), metricsErr: admin.ErrUnreachable})
	if v.Rates != nil {
		t.Fatalf("rates after a failed reading: %+v", v.Rates)
	}
	v.update(scrape{at: topAt.Add(2 * time.Second), metrics: m(30)})
	if v.Rates == nil || len(v.Rates.refusals) != 1 || v.Rates.refusals[0].perSecond != 10 {
		t.Fatalf("rates %+v, want 10/s over the two seconds since the last good reading", v.Rates)
	}
}

// metricsText is what /metrics answers, in part.
const metricsText = `# HELP cqlguard_client_connections Client connections open now.
# TYPE cqlguard_client_connections gauge
cqlguard_client_connections 7
# HELP cqlguard_requests_in_flight Requests forwarded upstream and not answered yet.
# TYPE cqlguard_requests_in_flight gauge
cqlguard_requests_in_flight 2
# HELP cqlguard_upstream_request_duration_seconds Time.
# TYPE cqlguard_upstream_request_duration_seconds histogram
cqlguard_upstream_request_duration_seconds_bucket{le="0.001"} 10
cqlguard_upstream_request_duration_seconds_bucket{le="+Inf"} 12345
cqlguard_upstream_request_duration_seconds_sum 1.5
cqlguard_upstream_request_duration_seconds_count 12345
# HELP cqlguard_rate_limit_rejections_total Requests over a partition's limit.
# TYPE cqlguard_rate_limit_rejections_total counter
cqlguard_rate_limit_rejections_total{keyspace="shop",op="read",outcome="rejected",table="carts"} 42
cqlguard_rate_limit_rejections_total{keyspace="shop",op="write",outcome="dry_run",table="orders"} 3
`

// The client reads a listener as the proxy's admin handler answers: the
// token, /hot's JSON and errors, and /metrics through the text parser.
func TestAdminClient(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("/hot", func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("Authorization") {
		case "Bearer secret":
		case "Bearer off":
			http.Error(w, "hot partition tracking is off (admin.hot_partitions: 0)", http.StatusNotFound)
			return
		default:
			http.Error(w, "a bearer token is needed", http.StatusUnauthorized)
			return
		}
		if r.URL.Query().Get("n") != "5" {
			http.Error(w, "n: want 5", http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, `[{"keyspace":"shop","table":"carts","op":"read","token":-3,"key":"\"alice\"","rate":1500.5,"rate_error":2,"limit":100}]`)
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, metricsText) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	tests := []struct {
		token, hotErr string
		hot           int
	}{
		{token: "secret", hot: 1},
		{token: "", hotErr: "/hot asks for a bearer token: pass -token-file"},
		{token: "wrong", hotErr: "/hot refused the bearer token"},
		{token: "off", hotErr: "/hot: 404 Not Found: hot partition tracking is off (admin.hot_partitions: 0)"},
	}
	for _, tt := range tests {
		t.Run("token "+tt.token, func(t *testing.T) {
			t.Parallel()
			c := &admin.Client{BaseURL: srv.URL, Token: tt.token, HTTP: srv.Client()}
			s := scrapeAdmin(t.Context(), c, 5)
			if s.metricsErr != nil {
				t.Fatal(s.metricsErr)
			}
			want := &metricsSample{connections: 7, inFlight: 2, upstream: 12345, haveUpstream: true,
				rejections: rejections(map[string]float64{"shop.carts read rejected": 42, "shop.orders write dry_run": 3})}
			if fmt.Sprint(s.metrics) != fmt.Sprint(want) {
				t.Errorf("metrics %+v, want %+v", s.metrics, want)
			}
			if tt.hotErr != "" {
				if s.hotErr == nil || !strings.Contains(s.hotErr.Error(), tt.hotErr) {
					t.Errorf("/hot error %v, want %q", s.hotErr, tt.hotErr)
				}
				return
			}
			if s.hotErr != nil {
				t.Fatal(s.hotErr)
			}
			want0 := admin.HotPartition{Keyspace: "shop", Table: "carts", Op: "read", Token: -3, Key: `"alice"`, Rate: 1500.5, RateError: 2, Limit: 100}
			if len(s.hot) != tt.hot || s.hot[0] != want0 {
				t.Errorf("hot %+v, want [%+v]", s.hot, want0)
			}
		})
	}

	t.Run("no listener", func(t *testing.T) {
		t.Parallel()
		c := &admin.Client{BaseURL: "http://" + portZeroAddr(t), HTTP: &http.Client{Timeout: 5 * time.Second}}
		s := scrapeAdmin(t.Context(), c, 5)
		if !errors.Is(s.metricsErr, admin.ErrUnreachable) || !errors.Is(s.hotErr, admin.ErrUnreachable) || s.metricsErr.Error() != s.hotErr.Error() {
			t.Errorf("errors %v and %v, want one unreachable error", s.metricsErr, s.hotErr)
		}
	})
}

func TestAdminURL(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"127.0.0.1:9180":        "http://127.0.0.1:9180",
		":9180":                 "http://127.0.0.1:9180",
		"0.0.0.0:9180":          "http://127.0.0.1:9180",
		"[::]:9180":             "http://127.0.0.1:9180",
		"[::1]:9180":            "http://[::1]:9180",
		"proxy-1:9180":          "http://proxy-1:9180",
		"https://proxy-1:9443/": "https://proxy-1:9443",
	} {
		if got := adminURL(addr); got != want {
			t.Errorf("adminURL(%q) = %q, want %q", addr, got, want)
		}
	}
}

// parseTop takes the admin address from -admin, else the environment,
// else the file, and the token from -token-file, else the file. It sets
// the environment, so it does not run in parallel.
func TestParseTop(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string { return writeFile(t, dir, name, text) }
	tokenFile := write("token", "from-file\n")
	cfg := write("cqlguard.yaml", "admin: {listen: '127.0.0.5:9999', token_file: "+tokenFile+"}\n")
	off := write("off.yaml", "admin: {listen: ''}\n")
	flagToken := write("flag-token", "from-flag\n")
	tests := []struct {
		name       string
		args       []string
		env        string // CQLGUARD_ADMIN_LISTEN
		admin, tok string
		err        string
	}{
		{name: "defaults", admin: "127.0.0.1:9180"},
		{name: "the environment", env: "127.0.0.6:1", admin: "127.0.0.6:1"},
		{name: "the file", args: []string{"-config", cfg}, admin: "127.0.0.5:9999", tok: "from-file"},
		{name: "the environment over the file", args: []string{"-config", cfg}, env: "127.0.0.6:1", admin: "127.0.0.6:1", tok: "from-file"},
		{name: "flags over both", args: []string{"-config", cfg, "-admin", "127.0.0.7:2", "-token-file", flagToken}, env: "127.0.0.6:1", admin: "127.0.0.7:2", tok: "from-flag"},
		{name: "a file without the listener", args: []string{"-config", off}, err: "the admin listener is off"},
		{name: "a missing token file", args: []string{"-token-file", filepath.Join(dir, "none")}, err: "-token-file"},
		{name: "-n 0", args: []string{"-n", "0"}, err: "-n 0"},
		{name: "-interval 0", args: []string{"-interval", "0s"}, err: "must be positive"},
		{name: "a stray argument", args: []string{"x"}, err: `unexpected argument "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("CQLGUARD_ADMIN_LISTEN", tt.env)
			t.Setenv("CQLGUARD_CONFIG", "")
			o, err := parseTop(tt.args)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.admin != tt.admin || o.token != tt.tok {
				t.Errorf("admin %q, token %q; want %q, %q", o.admin, o.token, tt.admin, tt.tok)
			}
		})
	}
}

func TestTerminalFrame(t *testing.T) {
	t.Parallel()
	got := terminalFrame("a\nbc")
	want := "\x1b[Ha\x1b[K\r\nbc\x1b[K\x1b[J"
	if got != want {
		t.Errorf("terminalFrame = %q, want %q", got, want)
	}
}

// TestTopUnderTmux runs cqlguard top in a terminal, a detached tmux
// session, against a cqlguard process in front of the fake node while a
// hot partition is read at ten times its limit: the view shows the
// partition with its rate over its limit, and the table's refusals, and
// q ends it with status 0.
func TestTopUnderTmux(t *testing.T) {
	t.Parallel()
	tmuxPath, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("tmux is not installed")
	}
	bin := buildCqlguard(t)
	node, err := fakenode.Start("127.0.0.1:0", fakenode.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Close)

	const limit = 100
	dir := t.TempDir()
	listen, admin := portZeroAddr(t), portZeroAddr(t)
	cfg := filepath.Join(dir, "cqlguard.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `listen: %s
upstreams: [%s]
admin: {listen: "%s", hot_partitions: 100, show_keys: true}
log: {level: warn}
limits:
  keyspaces: {bench: {tables: {kv: {max_reads_per_second: %d}}}}
`, listen, node.Addr(), admin, limit), 0o600); err != nil {
		t.Fatal(err)
	}
	var proxyLog bytes.Buffer
	proxyCmd := exec.Command(bin, "-config", cfg, "-watch-config=false")
	proxyCmd.Stdout, proxyCmd.Stderr = &proxyLog, &proxyLog
	if err := proxyCmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		proxyCmd.Process.Signal(syscall.SIGTERM)
		proxyCmd.Wait()
		if t.Failed() {
			t.Logf("cqlguard logged:\n%s", proxyLog.String())
		}
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get("http://" + admin + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("cqlguard not ready after 20 s")
		}
	}

	// One partition, key 0, read at ten times its limit until the test ends.
	spec := load.DefaultSpec()
	spec.Addr, spec.Conns, spec.Concurrency, spec.Rate = listen, 1, 16, 10*limit
	spec.Keys, spec.Dist, spec.HotKeys, spec.HotFraction, spec.OptIn = 1000, load.Hot, 1, 1, true
	ctx, cancel := context.WithCancel(context.Background())
	loaded := make(chan error, 1)
	go func() {
		_, err := load.Run(ctx, []load.Spec{spec}, load.Options{Duration: 5 * time.Minute})
		loaded <- err
	}()
	t.Cleanup(func() { cancel(); <-loaded })

	// A private tmux server, so that nothing else's sessions are touched.
	socket := fmt.Sprintf("cqlguard-top-%d-%d", os.Getpid(), time.Now().UnixNano())
	tmux := func(args ...string) (string, error) {
		cmd := exec.Command(tmuxPath, append([]string{"-L", socket, "-f", "/dev/null"}, args...)...)
		cmd.Env = append(os.Environ(), "TMUX=")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	status := filepath.Join(dir, "status")
	shell := fmt.Sprintf("%s top -admin %s -interval 250ms; echo $? > %s", quote(bin), admin, quote(status))
	if out, err := tmux("new-session", "-d", "-s", "top", "-x", "160", "-y", "40", shell); err != nil {
		t.Fatalf("tmux new-session: %v\n%s", err, out)
	}
	// The server leaves its socket behind when it exits.
	socketPath, err := tmux("display-message", "-p", "-t", "top", "#{socket_path}")
	if err != nil {
		t.Fatalf("tmux display-message: %v\n%s", err, socketPath)
	}
	t.Cleanup(func() {
		tmux("kill-server")
		os.Remove(strings.TrimSpace(socketPath))
	})

	// The hot partition's row: table, op, token, key 0, rate, limit, share
	// of the limit, and the mark of a partition surely over it.
	row := regexp.MustCompile(`bench\.kv\s+read\s+-?\d+\s+0\s+(\d+(?:\.\d+)?)\s+` + strconv.Itoa(limit) + `\s+\d+%\s+OVER`)
	refusals := regexp.MustCompile(`bench\.kv\s+read\s+rejected\s+(\d+(?:\.\d+)?)\s+\d+`)
	var screen string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		screen, err = tmux("capture-pane", "-p", "-t", "top")
		if err != nil {
			t.Fatalf("tmux capture-pane: %v\n%s", err, screen)
		}
		m, r := row.FindStringSubmatch(screen), refusals.FindStringSubmatch(screen)
		if m != nil && r != nil {
			rate, _ := strconv.ParseFloat(m[1], 64)
			refused, _ := strconv.ParseFloat(r[1], 64)
			if rate > 2*limit && refused > 0 && strings.Contains(screen, "(q quits)") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hot partition never showed over its limit, with its refusals:\n%s", screen)
		}
	}
	t.Logf("the view:\n%s", screen)

	if out, err := tmux("send-keys", "-t", "top", "q"); err != nil {
		t.Fatalf("tmux send-keys: %v\n%s", err, out)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if b, err := os.ReadFile(status); err == nil && strings.TrimSpace(string(b)) != "" {
			if s := strings.TrimSpace(string(b)); s != "0" {
				t.Fatalf("cqlguard top exited with status %s", s)
			}
			break
		}
		if time.Now().After(deadline) {
			screen, _ = tmux("capture-pane", "-p", "-t", "top")
			t.Fatalf("cqlguard top still running 10 s after q:\n%s", screen)
		}
	}
}

// quote quotes s for sh.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
