package proxy

import (
	"bytes"
	"context"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/schema"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

// safeBuffer is a bytes.Buffer for a logger written from several
// goroutines.
type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// metricValue returns the value of a counter or gauge.
func metricValue(t testing.TB, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetCounter().GetValue() + d.GetGauge().GetValue()
}

// configFile is the name the reload tests give their configuration file.
const configFile = "cqlguard.yaml"

// parseConfig parses text as the configuration file configFile.
func parseConfig(t *testing.T, text string) config.Config {
	t.Helper()
	cfg, err := config.Parse(configFile, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// reload parses text as the configuration file configFile and has p apply
// it, or record that it did not load, as cmd/cqlguard does on SIGHUP.
func reload(p *Proxy, text string) error {
	cfg, err := config.Parse(configFile, []byte(text))
	if err != nil {
		p.ReloadFailed(configFile, err)
		return err
	}
	return p.Reload(cfg)
}

// newReloadProxy returns a proxy, not serving, configured from text, and
// its log.
func newReloadProxy(t *testing.T, text string) (*Proxy, *safeBuffer) {
	t.Helper()
	logs := &safeBuffer{}
	p, err := New(parseConfig(t, text), zerolog.New(logs), prometheus.NewRegistry(), WithSchema(staticSchema{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Shutdown(context.Background()) })
	return p, logs
}

// carts is the table the reload tests look up.
var carts = &schema.Table{Keyspace: "shop", Name: "carts"}

func limitsFile(reads int) string {
	return "limits:\n  keyspaces:\n    shop:\n      tables:\n        carts: {max_reads_per_second: " + strconv.Itoa(reads) + "}\n"
}

func TestReload(t *testing.T) {
	p, logs := newReloadProxy(t, limitsFile(100))
	if r, _ := p.settings.Load().limits.forTable(carts); r != 100 {
		t.Fatalf("initial reads limit %d, want 100", r)
	}
	limiter := p.settings.Load().limiter
	started := metricValue(t, p.reload.lastSuccess)
	if started == 0 {
		t.Error("last success timestamp not set at start")
	}

	// A good file: new limits, same limiter (its settings did not change).
	if err := reload(p, limitsFile(7)+"  dry_run: true\n"); err != nil {
		t.Fatal(err)
	}
	l := p.settings.Load().limits
	if r, _ := l.forTable(carts); r != 7 || !l.dryRun {
		t.Fatalf("after reload: reads %d, dry run %v; want 7, true", r, l.dryRun)
	}
	if p.settings.Load().limiter != limiter {
		t.Error("limiter replaced though its settings did not change")
	}
	if got := metricValue(t, p.reload.success); got != 1 {
		t.Errorf("success count %v, want 1", got)
	}

	// A bad file: an error naming file and line, and nothing changes.
	err := reload(p, limitsFile(1)+"  dry_rn: true\n")
	if err == nil || !strings.Contains(err.Error(), configFile+":6:") {
		t.Fatalf("error %v, want one naming %s:6", err, configFile)
	}
	if p.settings.Load().limits != l {
		t.Error("a bad file changed the limits")
	}
	if got := metricValue(t, p.reload.failure); got != 1 {
		t.Errorf("failure count %v, want 1", got)
	}
	if !strings.Contains(logs.String(), configFile+":6:") || !strings.Contains(logs.String(), "dry_rn") {
		t.Errorf("the failure was not logged with its file, line and cause: %s", logs)
	}

	// A file that is invalid as a whole (not only its limits) changes
	// nothing either.
	if err := reload(p, limitsFile(1)+"mode: mesh\n"); err == nil || p.settings.Load().limits != l {
		t.Errorf("invalid mode: err %v, limits changed %v", err, p.settings.Load().limits != l)
	}
	// Nor does a configuration that is not valid however it was made.
	bad := parseConfig(t, limitsFile(1))
	bad.Limits.Algorithm = "leaky"
	if err := p.Reload(bad); err == nil || p.settings.Load().limits != l {
		t.Errorf("invalid limits: err %v", err)
	}
	if got := metricValue(t, p.reload.failure); got != 3 {
		t.Errorf("failure count %v, want 3", got)
	}
}

func TestReloadReplacesLimiter(t *testing.T) {
	p, logs := newReloadProxy(t, "limits: {algorithm: token-bucket, burst: 1}\n")
	tests := []struct {
		text    string
		replace bool
	}{
		{"limits: {algorithm: token-bucket, burst: 1, dry_run: true}\n", false},
		{"limits: {algorithm: token-bucket, burst: 2}\n", true},
		{"limits: {algorithm: scylla, burst: 2}\n", true},
		{"limits: {algorithm: scylla, burst: 5}\n", false}, // scylla has no burst
		{"limits: {algorithm: scylla, burst: 5, memory: 8MiB}\n", true},
	}
	for _, tt := range tests {
		before := p.settings.Load().limiter
		if err := reload(p, tt.text); err != nil {
			t.Fatal(err)
		}
		if replaced := p.settings.Load().limiter != before; replaced != tt.replace {
			t.Errorf("%q: limiter replaced %v, want %v", tt.text, replaced, tt.replace)
		}
	}
	if !strings.Contains(logs.String(), "rate limiter replaced") {
		t.Errorf("replacing the limiter was not logged: %s", logs)
	}
}

func TestReloadLogsRestartOnlySettings(t *testing.T) {
	p, logs := newReloadProxy(t, "listen: 127.0.0.1:19999\n")
	text := "listen: 127.0.0.1:19998\nschema: {refresh: 1m}\nlimits: {dry_run: true}\n"
	if err := reload(p, text); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"key":"listen"`, `"key":"schema.refresh"`} {
		if !strings.Contains(logs.String(), key) {
			t.Errorf("log does not mention %s: %s", key, logs)
		}
	}
	if strings.Contains(logs.String(), `"key":"limits`) {
		t.Errorf("a reloadable setting was logged as ignored: %s", logs)
	}
	// Reported once, not at every reload.
	n := strings.Count(logs.String(), `"key":"listen"`)
	if err := reload(p, text); err != nil {
		t.Fatal(err)
	}
	if strings.Count(logs.String(), `"key":"listen"`) != n {
		t.Error("an unchanged restart-only setting was logged again")
	}
}

func TestRestartOnlyChanges(t *testing.T) {
	a := config.Default()
	b := config.Default()
	b.Upstreams = []string{"10.0.0.1:9042"}
	b.Admin.Listen = ""
	b.Log.Level = "debug"
	b.Limits.DryRun = true
	b.Limits.Memory = 1 << 30
	got := restartOnlyChanges(a, b)
	want := []string{"upstreams", "admin.listen", "log.level"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// The request path reads the limits while reloads swap them.
func TestReloadConcurrentReads(t *testing.T) {
	p, _ := newReloadProxy(t, limitsFile(1))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if r, _ := p.settings.Load().limits.forTable(carts); r == 0 {
				t.Error("limits unset during a reload")
				return
			}
			p.settings.Load().limiter.Allow(1, 0, 1)
		}
	}()
	for i := range 20 {
		text := limitsFile(i + 1)
		if i%5 == 0 {
			text += "  algorithm: token-bucket\n"
		}
		if err := reload(p, text); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	wg.Wait()
}

// A reload that fails at any step, whatever the steps before it would have
// changed, changes nothing: not the limits, the limiter, the classes and
// their budgets' rates, the hot reads' tables, the TLS certificate, nor the
// coordination running.
func TestReloadFailsWhole(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	cert, key := ca.issue(t, "cqlguard", 2)
	writeFile(t, filepath.Join(dir, "server.pem"), cert)
	writeFile(t, filepath.Join(dir, "server.key"), key)
	writeFile(t, filepath.Join(dir, "garbage.pem"), []byte("not a certificate"))
	writeFile(t, filepath.Join(dir, "redis.pw"), []byte("secret"))
	// file is a configuration in which every reloadable section differs
	// with n, and bad, if set, replaces one section's value.
	file := func(n int, bad map[string]string) string {
		v := map[string]string{
			"reads":    strconv.Itoa(100 * n),
			"units":    strconv.Itoa(1000 * n),
			"ttl":      strconv.Itoa(n) + "s",
			"cert":     filepath.Join(dir, "server.pem"),
			"password": filepath.Join(dir, "redis.pw"),
			"interval": strconv.Itoa(100*n) + "ms",
			"users":    "[batch]",
		}
		maps.Copy(v, bad)
		return `limits:
  keyspaces:
    shop:
      tables:
        carts: {max_reads_per_second: ` + v["reads"] + `}
clients:
  classes:
    - name: batch
      match: {users: ` + v["users"] + `}
      max_units_per_second: ` + v["units"] + `
hot_reads:
  keyspaces:
    shop:
      tables:
        carts: {cache_ttl: ` + v["ttl"] + `}
tls: {cert_file: ` + v["cert"] + `, key_file: ` + filepath.Join(dir, "server.key") + `}
coordination:
  addresses: [127.0.0.1:1]
  password_file: ` + v["password"] + `
  sync_interval: ` + v["interval"] + `
`
	}
	p, _ := newReloadProxy(t, file(1, nil))
	if err := reload(p, file(2, nil)); err != nil {
		t.Fatalf("a good reload failed: %v", err)
	}
	batch := func() *clientClass { return p.settings.Load().clients.classes[0] }
	budget := batch().budget
	before, last, coord := p.settings.Load(), p.reload.last, p.trackedPartitions()
	for _, tc := range []struct {
		step string
		bad  map[string]string
	}{
		{"limits", map[string]string{"reads": "-1"}},
		{"classes", map[string]string{"users": "[batch]\n      match: {addresses: [not-an-address]}"}},
		{"tls", map[string]string{"cert": filepath.Join(dir, "garbage.pem")}},
		{"coordination", map[string]string{"password": filepath.Join(dir, "missing.pw")}},
	} {
		t.Run(tc.step, func(t *testing.T) {
			if err := reload(p, file(3, tc.bad)); err == nil {
				t.Fatal("the reload succeeded")
			}
			if p.settings.Load() != before {
				t.Error("the settings changed")
			}
			if r, _ := p.settings.Load().limits.forTable(carts); r != 200 {
				t.Errorf("reads limit %d, want 200", r)
			}
			// The class's budget is shared with the classes a reload
			// builds: its rate is set only when they are applied. Full,
			// it holds a second of its rate.
			if got := budget.Balance(p.elapsed() + int64(time.Hour)); got != 2000 {
				t.Errorf("the budget of 2,000 units a second holds %v when full: its rate changed", got)
			}
			if !reflect.DeepEqual(p.reload.last, last) {
				t.Error("the configuration recorded as running changed")
			}
			if p.trackedPartitions() != coord {
				t.Error("coordination was restarted")
			}
			if p.reporter.cfg.SyncInterval != last.Coordination.SyncInterval {
				t.Errorf("coordination runs with sync_interval %v, want %v", p.reporter.cfg.SyncInterval, last.Coordination.SyncInterval)
			}
		})
	}
}

// A request in flight across a reload is charged what the configuration it
// was admitted under prices it at, when it is answered, and the next
// request what the new one does: no request is priced by a mix.
func TestReloadMidFlightKeepsTheRequestsSettings(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{Keyspace: "ks", Table: "kv", SlowQuery: "k = 2", SlowFor: 300 * time.Millisecond})
	file := func(fixed int) string {
		return "listen: 127.0.0.1:0\nupstreams: [" + node.Addr() + "]\nadmin: {listen: \"\"}\n" +
			"request_units: {fixed: " + strconv.Itoa(fixed) + ", per_row: 0, per_kib: 0, per_ms: 0}\n"
	}
	p, addr := serveProxy(t, parseConfig(t, file(1)), testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{testSnapshot(t)}))
	units := p.clientMetrics.units.WithLabelValues(p.settings.Load().clients.classes[0].name)
	c := dialRaw(t, addr, 4)
	c.startup(nil)
	query := func(stream int16, q string) {
		c.send(stream, &message.Query{Query: q, Options: &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne}})
	}
	query(1, "SELECT * FROM ks.kv WHERE k = 2")
	for node.SlowRequests() == 0 {
		time.Sleep(time.Millisecond) // until the node holds it
	}
	if err := reload(p, file(100)); err != nil {
		t.Fatal(err)
	}
	if got := c.recv(); got.Header.OpCode != primitive.OpCodeResult {
		t.Fatalf("the slow read was answered %v", got.Body.Message)
	}
	if got := metricValue(t, units); got != 1 {
		t.Errorf("the read admitted before the reload was charged %v units, want 1", got)
	}
	query(2, "SELECT * FROM ks.kv WHERE k = 1")
	c.recv()
	if got := metricValue(t, units); got != 101 {
		t.Errorf("after a read admitted after the reload, %v units, want 101", got)
	}
}

// A hot read that joined another's flight before a reload, and is
// forwarded on its own after it (its leader left), is decided and charged
// under the settings it joined with, like any request in flight across a
// reload: not the new limit, which the new settings' first read used up,
// nor the new prices, nor a mix of the two.
func TestReloadJoinedHotReadKeepsItsSettings(t *testing.T) {
	t.Parallel()
	const rows = 3
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{Keyspace: "ks", Table: "kv", Rows: rows, SlowQuery: "k = 1", SlowFor: 2 * time.Second})
	base := "listen: 127.0.0.1:0\nupstreams: [" + node.Addr() + "]\nadmin: {listen: \"\"}\n"
	// Before: every read of ks.kv coalesced, no limit, 1 unit a request
	// and 10 a row. After: no hot reads, one read a second, 100 and 1,000.
	before := base + "request_units: {fixed: 1, per_row: 10, per_kib: 0, per_ms: 0}\n" +
		"hot_reads: {keyspaces: {ks: {tables: {kv: {coalesce: true, hot_rate: 0}}}}}\n"
	after := base + "request_units: {fixed: 100, per_row: 1000, per_kib: 0, per_ms: 0}\n" +
		"limits: {algorithm: token-bucket, keyspaces: {ks: {tables: {kv: {max_reads_per_second: 1}}}}}\n"
	p, addr := serveProxy(t, parseConfig(t, before), testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{testSnapshot(t)}))
	units := p.clientMetrics.units.WithLabelValues(p.settings.Load().clients.classes[0].name)
	client := func() *rawClient {
		c := dialRaw(t, addr, 4)
		c.startup(nil)
		c.c.SetDeadline(time.Now().Add(10 * time.Second))
		return c
	}
	leader, joined, next := client(), client(), client()
	const read = "SELECT * FROM ks.kv WHERE k = 1" // slow on the node
	leader.send(1, &message.Query{Query: read, Options: readOne})
	waitUntil(t, "the leader's read at the node", func() bool { return node.SlowRequests() == 1 })
	joined.send(1, &message.Query{Query: read, Options: readOne})
	waitUntil(t, "the second read joined", func() bool { return p.hotServed(t, "coalesced") == 1 })

	if err := reload(p, after); err != nil {
		t.Fatal(err)
	}
	// The same partition, not slow: under the new settings it is charged
	// the new prices, and takes the partition's one read of this second.
	next.read(1, "SELECT * FROM ks.kv WHERE k=1")
	if got, want := metricValue(t, units), float64(100+1000*rows); got != want {
		t.Fatalf("a read after the reload was charged %v units, want %v", got, want)
	}

	// The leader leaves: its read is charged as sent (1, under the old
	// settings), and the joined read is forwarded on its own connection.
	leader.c.Close()
	if fr := joined.recv(); fr.Header.OpCode != primitive.OpCodeResult {
		t.Fatalf("the joined read, forwarded after the reload, was answered %v", fr.Body.Message)
	}
	want := float64(100+1000*rows) + 1 + float64(1+10*rows)
	for deadline := time.Now().Add(5 * time.Second); metricValue(t, units) < want && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if got := metricValue(t, units); got != want {
		t.Errorf("with the leader's and the joined read's charges, %v units, want %v: %v for the joined read", got, want, float64(1+10*rows))
	}
}
