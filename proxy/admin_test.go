package proxy

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cqlguard/cqlguard/admin"
	"github.com/cqlguard/cqlguard/classify"
	"github.com/cqlguard/cqlguard/config"
)

// /hot lists the busiest partitions, busiest first, with their table, op,
// key and limit, and the limiter's table statistics are exported.
func TestHotPartitions(t *testing.T) {
	cfg := config.Default()
	cfg.Admin.Listen = ""
	cfg.Upstreams = []string{"127.0.0.1:1"}
	cfg.Admin.ShowKeys = true
	limit := config.OpsPerSecond(1000)
	cfg.Limits.Keyspaces = map[string]config.KeyspaceLimits{"ks": {Tables: map[string]config.RateLimits{"kv": {MaxWritesPerSecond: &limit}}}}
	reg := prometheus.NewRegistry()
	snap := testSnapshot(t)
	p, err := New(cfg, testLogger(), reg, WithSchema(staticSchema{snap}))
	if err != nil {
		t.Fatal(err)
	}
	p.elapsed = func() int64 { return 1e9 }
	s := &session{p: p, up: &upstream{}}
	kv, tab := snap.Table([]byte("ks"), []byte("kv")), snap.Table([]byte("Ks"), []byte("Tab"))
	request := func(op classify.Op, parts ...classify.Partition) *classify.Classification {
		return &classify.Classification{Op: op, Pinned: true, Partitions: parts}
	}
	for range 30 {
		s.decide(request(classify.OpWrite, classify.Partition{Table: kv, Token: tokenOf(intBytes(7)), Key: intBytes(7)}), false, p.settings.Load(), p.clock())
	}
	for range 20 {
		big := []byte{0, 0, 0, 0, 0, 0, 0, 42}
		s.decide(request(classify.OpRead, classify.Partition{Table: tab, Token: tokenOf(big), Key: big}), false, p.settings.Load(), p.clock())
	}
	s.decide(request(classify.OpRead, classify.Partition{Table: kv, Token: tokenOf(intBytes(1)), Key: intBytes(1)}), false, p.settings.Load(), p.clock())
	// Internal and unpinned requests are not counted.
	s.decide(&classify.Classification{Op: classify.OpRead, Pinned: false}, false, p.settings.Load(), p.clock())

	hot := p.Hot()
	if len(hot) != 3 {
		t.Fatalf("Hot() = %+v, want 3 partitions", hot)
	}
	want := []struct {
		ks, table, op, key string
		limit              uint32
	}{{"ks", "kv", "write", "7", 1000}, {"Ks", "Tab", "read", "42", 0}, {"ks", "kv", "read", "1", 0}}
	for i, w := range want {
		h := hot[i]
		if h.Keyspace != w.ks || h.Table != w.table || h.Op != w.op || h.Key != w.key || h.Limit != w.limit || !(h.Rate > 0) {
			t.Errorf("hot[%d] = %+v, want %s.%s %s key %s limit %d", i, h, w.ks, w.table, w.op, w.key, w.limit)
		}
	}

	rec := httptest.NewRecorder()
	adminHandler(t, p, reg).ServeHTTP(rec, httptest.NewRequest("GET", "/hot?n=1", nil))
	var got []admin.HotPartition
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != http.StatusOK || len(got) != 1 || got[0].Key != "7" {
		t.Errorf("GET /hot?n=1: %d %s (%v)", rec.Code, rec.Body, err)
	}
	rec = httptest.NewRecorder()
	adminHandler(t, p, reg).ServeHTTP(rec, httptest.NewRequest("GET", "/hot?n=x", nil))
	if rec.Code != http.StatusBadRequest {
		t.Errorf("GET /hot?n=x: %d, want 400", rec.Code)
	}

	// One write was counted against a limit, none failed to find a slot.
	n, err := testutil.GatherAndCount(reg, "cqlguard_rate_limiter_capacity_entries", "cqlguard_rate_limiter_entries",
		"cqlguard_rate_limiter_evictions_total", "cqlguard_rate_limiter_failed_allocations_total")
	if err != nil || n != 4 {
		t.Errorf("limiter metrics: %d series, %v", n, err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP cqlguard_rate_limiter_entries Partition counters in use now: occupancy is this over the capacity.
# TYPE cqlguard_rate_limiter_entries gauge
cqlguard_rate_limiter_entries 1
`), "cqlguard_rate_limiter_entries"); err != nil {
		t.Error(err)
	}
}

func TestHotOff(t *testing.T) {
	cfg := config.Default()
	cfg.Admin.Listen, cfg.Admin.HotPartitions = "", 0
	cfg.Upstreams = []string{"127.0.0.1:1"}
	p, err := New(cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{testSnapshot(t)}))
	if err != nil {
		t.Fatal(err)
	}
	if p.Hot() != nil {
		t.Error("Hot() with tracking off is not nil")
	}
	rec := httptest.NewRecorder()
	adminHandler(t, p, prometheus.NewRegistry()).ServeHTTP(rec, httptest.NewRequest("GET", "/hot", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("GET /hot with tracking off: %d", rec.Code)
	}
}

// The admin surface shows no user data by default, asks for a bearer token
// for /hot when one is set and for nothing else, and changes nothing: every
// method but GET and HEAD is refused.
func TestAdminSurface(t *testing.T) {
	dir := t.TempDir()
	tokenFile := dir + "/token"
	writeFile(t, tokenFile, []byte("s3cret\n"))
	cases := []struct {
		name          string
		edit          func(*config.AdminConfig)
		method, path  string
		authorization string
		want          int
		wantKey       bool
	}{
		{"keys redacted by default", nil, "GET", "/hot", "", http.StatusOK, false},
		{"keys shown when asked", func(c *config.AdminConfig) { c.ShowKeys = true }, "GET", "/hot", "", http.StatusOK, true},
		{"token missing", func(c *config.AdminConfig) { c.TokenFile = tokenFile }, "GET", "/hot", "", http.StatusUnauthorized, false},
		{"token wrong", func(c *config.AdminConfig) { c.TokenFile = tokenFile }, "GET", "/hot", "Bearer s3cre", http.StatusUnauthorized, false},
		{"token right", func(c *config.AdminConfig) { c.TokenFile = tokenFile }, "GET", "/hot", "Bearer s3cret", http.StatusOK, false},
		{"metrics open with a token set", func(c *config.AdminConfig) { c.TokenFile = tokenFile }, "GET", "/metrics", "", http.StatusOK, false},
		{"healthz open with a token set", func(c *config.AdminConfig) { c.TokenFile = tokenFile }, "HEAD", "/healthz", "", http.StatusOK, false},
		{"no profiles by default", nil, "GET", "/debug/pprof/", "", http.StatusNotFound, false},
		{"profiles when asked", func(c *config.AdminConfig) { c.Profiling = true }, "GET", "/debug/pprof/", "", http.StatusOK, false},
		{"profiles behind the token", func(c *config.AdminConfig) { c.Profiling, c.TokenFile = true, tokenFile }, "GET", "/debug/pprof/heap", "", http.StatusUnauthorized, false},
		{"profiles with the token", func(c *config.AdminConfig) { c.Profiling, c.TokenFile = true, tokenFile }, "GET", "/debug/pprof/goroutine", "Bearer s3cret", http.StatusOK, false},
		{"POST /hot", nil, "POST", "/hot", "", http.StatusMethodNotAllowed, false},
		{"DELETE /metrics", nil, "DELETE", "/metrics", "", http.StatusMethodNotAllowed, false},
		{"PUT /healthz", nil, "PUT", "/healthz", "", http.StatusMethodNotAllowed, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := config.Default()
			cfg.Admin.Listen = ""
			cfg.Upstreams = []string{"127.0.0.1:1"}
			if tc.edit != nil {
				tc.edit(&cfg.Admin)
			}
			reg := prometheus.NewRegistry()
			snap := testSnapshot(t)
			p, err := New(cfg, testLogger(), reg, WithSchema(staticSchema{snap}))
			if err != nil {
				t.Fatal(err)
			}
			s := &session{p: p, up: &upstream{}}
			kv := snap.Table([]byte("ks"), []byte("kv"))
			s.decide(&classify.Classification{Op: classify.OpWrite, Pinned: true, Partitions: []classify.Partition{{Table: kv, Token: tokenOf(intBytes(7)), Key: intBytes(7)}}}, false, p.settings.Load(), p.clock())
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(tc.method, tc.path, nil)
			if tc.authorization != "" {
				req.Header.Set("Authorization", tc.authorization)
			}
			adminHandler(t, p, reg).ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Fatalf("%s %s: %d %s, want %d", tc.method, tc.path, rec.Code, rec.Body, tc.want)
			}
			if tc.want == http.StatusMethodNotAllowed && rec.Header().Get("Allow") != "GET, HEAD" {
				t.Errorf("405 with Allow %q", rec.Header().Get("Allow"))
			}
			if tc.path != "/hot" || rec.Code != http.StatusOK {
				return
			}
			var got []admin.HotPartition
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || len(got) != 1 {
				t.Fatalf("/hot: %s (%v)", rec.Body, err)
			}
			if shown := got[0].Key != "" || strings.Contains(rec.Body.String(), `"key"`); shown != tc.wantKey {
				t.Errorf("/hot shows the key: %v, want %v: %s", shown, tc.wantKey, rec.Body)
			}
			if got[0].Token != tokenOf(intBytes(7)) {
				t.Errorf("/hot token %d", got[0].Token)
			}
		})
	}
}

// A token named both by a file and by a variable stops the proxy from
// starting; a token that cannot be read stops the admin listener
// (package admin).
func TestAdminTokenTwice(t *testing.T) {
	cfg := config.Default()
	cfg.Admin.Listen = ""
	cfg.Upstreams = []string{"127.0.0.1:1"}
	cfg.Admin.TokenFile, cfg.Admin.TokenEnv = "x", "y"
	_, err := New(cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{}))
	if err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("%v, want an error with %q", err, "not both")
	}
}

// adminHandler is the admin listener's handler over p, serving the
// metrics of g, as cqlguard wires them.
func adminHandler(t testing.TB, p *Proxy, g prometheus.Gatherer) http.Handler {
	t.Helper()
	h, err := admin.NewHandler(p.cfg.Admin, p, g, p.log)
	if err != nil {
		t.Fatal(err)
	}
	return h
}
