package proxy

import (
	"context"
	"encoding/binary"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/datastax/go-cassandra-native-protocol/datatype"
	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

func TestClientClassesMatch(t *testing.T) {
	tier0 := 0
	cfg := config.ClientsConfig{
		Classes: []config.ClientClass{
			{Name: "checkout", Tier: &tier0, Match: config.ClientMatch{Users: []string{"checkout_svc"}}},
			{Name: "reports", Match: config.ClientMatch{ApplicationNames: []string{"reports"}, Addresses: []string{"10.1.0.0/16", "192.168.1.7"}}},
			{Name: "by-id", Match: config.ClientMatch{ClientIDs: []string{"c1"}}},
			{Name: "gocql", Match: config.ClientMatch{DriverNames: []string{"gocql"}}},
		},
		Default: config.ClientClass{Name: "other"},
	}
	cc, err := newClientClasses(cfg, config.RequestUnitsConfig{}, nil, newClientMetrics(prometheus.NewRegistry()), 0)
	if err != nil {
		t.Fatal(err)
	}
	ip := netip.MustParseAddr
	for _, tc := range []struct {
		id   clientIdentity
		want string
	}{
		{clientIdentity{user: "checkout_svc", driver: "gocql"}, "checkout"}, // first match wins
		{clientIdentity{user: "other_svc"}, "other"},
		{clientIdentity{app: "reports", addr: ip("10.1.2.3")}, "reports"},
		{clientIdentity{app: "reports", addr: ip("10.2.0.1")}, "other"}, // lists are and-ed
		{clientIdentity{app: "reports", addr: ip("192.168.1.7")}, "reports"},
		{clientIdentity{app: "reports", addr: ip("192.168.1.8")}, "other"},
		{clientIdentity{id: "c1"}, "by-id"},
		{clientIdentity{id: "c2", driver: "gocql"}, "gocql"},
		{clientIdentity{}, "other"},
	} {
		if got := cc.match(&tc.id).name; got != tc.want {
			t.Errorf("%+v: class %s, want %s", tc.id, got, tc.want)
		}
	}
	if cc.classes[0].tier != 0 || cc.classes[1].tier != config.DefaultTier {
		t.Errorf("tiers %d, %d", cc.classes[0].tier, cc.classes[1].tier)
	}
}

func TestLearnUser(t *testing.T) {
	token := func(s string) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(s))), s...)
	}
	for _, tc := range []struct {
		body []byte
		want string
	}{
		{token("\x00alice\x00secret"), "alice"},
		{token("admin\x00bob\x00secret"), "bob"},
		// Read from the end, as the nodes read it.
		{token("\x00admin\x00guest\x00pw"), "guest"},
		{token("no zero bytes"), ""},
		{token("\x00only one"), ""},
		{[]byte{0, 0, 0, 99, 0}, ""}, // length past the body
		{[]byte{0xff, 0xff, 0xff, 0xff}, ""},
		{nil, ""},
	} {
		var s session
		s.learnUser(tc.body)
		if s.pending.user != tc.want {
			t.Errorf("%q: user %q, want %q", tc.body, s.pending.user, tc.want)
		}
	}
}

func TestRequestUnitsPrice(t *testing.T) {
	cc := &clientClasses{units: config.RequestUnitsConfig{Fixed: 1, PerRow: 0.5, PerKiB: 2, PerMs: 3}}
	rows := func(n int) []byte {
		msg := &message.RowsResult{Metadata: &message.RowsMetadata{ColumnCount: 1}, Data: message.RowSet{}}
		for range n {
			msg.Data = append(msg.Data, message.Row{{1}})
		}
		return msgFrame(t, 4, 1, msg)
	}
	void := msgFrame(t, 4, 1, &message.VoidResult{})
	for _, tc := range []struct {
		name    string
		size    int32
		answer  []byte
		latency time.Duration
		want    float64
	}{
		{"void, instant", 0, void, 0, 1 + 2*float64(len(void))/1024},
		{"ten rows", 0, rows(10), 0, 1 + 5 + 2*float64(len(rows(10)))/1024},
		{"a KiB asked, 2 ms", 1024, void, 2 * time.Millisecond, 1 + 2*float64(1024+len(void))/1024 + 6},
	} {
		h, err := frame.ParseHeader(tc.answer)
		if err != nil {
			t.Fatal(err)
		}
		req := request{size: tc.size}
		if got := cc.price(&req, tc.answer, h, int64(tc.latency)); got < tc.want-1e-9 || got > tc.want+1e-9 {
			t.Errorf("%s: %v RU, want %v", tc.name, got, tc.want)
		}
	}
}

// A class's budget in debt refuses its requests, with Config_error naming
// the class, until it is repaid; other classes go on; a reload moves a
// connection to another class on its next request.
func TestClientBudgets(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{Keyspace: "ks", Table: "kv"})
	var clock atomic.Int64
	clock.Store(int64(time.Hour))
	text := func(app string) string {
		return `listen: 127.0.0.1:0
upstreams: [` + node.Addr() + `]
admin: {listen: ""}
clients:
  classes:
    - name: batch
      match: {application_names: [` + app + `]}
      max_units_per_second: 10
request_units: {fixed: 4, per_row: 0, per_kib: 0, per_ms: 0}
`
	}
	cfg := parseConfig(t, text("scanner"))
	reg := prometheus.NewRegistry()
	p, err := New(cfg, testLogger(), reg, WithSchema(staticSchema{testSnapshot(t)}))
	if err != nil {
		t.Fatal(err)
	}
	p.elapsed = clock.Load
	// New made the budgets on the real clock: make them again on the test's.
	if err := p.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	addr := servedOn(t, p)

	batch := dialRaw(t, addr, 4)
	batch.startup(map[string]string{"APPLICATION_NAME": "scanner"})
	other := dialRaw(t, addr, 4)
	other.startup(map[string]string{"APPLICATION_NAME": "web"})
	query := &message.Query{Query: "SELECT * FROM ks.kv WHERE k = 1", Options: &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne}}
	ask := func(c *rawClient, stream int16) (int32, string) {
		c.send(stream, query)
		fr := c.recv()
		if e, ok := fr.Body.Message.(message.Error); ok {
			return int32(e.GetErrorCode()), e.GetErrorMessage()
		}
		return 0, ""
	}
	// 10 RU a second, a burst of 10: three requests of 4 RU each go
	// through, the third into debt; the fourth is refused.
	for i := range 3 {
		if code, msg := ask(batch, int16(1+i)); code != 0 {
			t.Fatalf("request %d refused: %s", i+1, msg)
		}
	}
	code, msg := ask(batch, 4)
	if code != frame.ErrCodeConfig || !strings.Contains(msg, "client class batch") || !strings.Contains(msg, "max_units_per_second") {
		t.Fatalf("in debt: %#x %q, want Config_error naming the class and the setting", code, msg)
	}
	if code, msg := ask(other, 1); code != 0 {
		t.Fatalf("another class refused: %s", msg)
	}
	// /hot names the class of the partition's last read.
	if hot := p.Hot(); len(hot) != 1 || hot[0].Class != "default" {
		t.Errorf("/hot: %+v, want the partition with class default", hot)
	}
	// A reload that keeps the class keeps its budget, debt and all.
	if err := p.Reload(parseConfig(t, text("scanner"))); err != nil {
		t.Fatal(err)
	}
	if code, _ := ask(batch, 30); code != frame.ErrCodeConfig {
		t.Errorf("a reload forgave the class's debt: %#x", code)
	}
	// 2 RU of debt, repaid at 10 RU a second.
	clock.Add(int64(300 * time.Millisecond))
	if code, msg := ask(batch, 5); code != 0 {
		t.Fatalf("refused after the debt was repaid: %s", msg)
	}
	if got := metricValue(t, p.clientMetrics.refusals.WithLabelValues("batch", "rejected")); got != 2 {
		t.Errorf("refusals %v, want 2", got)
	}
	if got := metricValue(t, p.clientMetrics.units.WithLabelValues("batch")); got != 16 {
		t.Errorf("units %v, want 16", got)
	}
	if got := metricValue(t, p.clientMetrics.conns.WithLabelValues("default")); got != 1 {
		t.Errorf("default class connections %v, want 1", got)
	}

	// The class now matches the other application: each connection moves
	// on its next request.
	if err := p.Reload(parseConfig(t, text("web"))); err != nil {
		t.Fatal(err)
	}
	clock.Add(int64(time.Hour))
	for i := range 4 {
		if code, msg := ask(batch, int16(10+i)); code != 0 {
			t.Fatalf("the old batch connection, now in the default class, refused: %s", msg)
		}
	}
	for i := range 3 {
		ask(other, int16(10+i))
	}
	if code, _ := ask(other, 20); code != frame.ErrCodeConfig {
		t.Errorf("the web connection, now in class batch, was not refused past its budget")
	}
	if got := metricValue(t, p.clientMetrics.conns.WithLabelValues("batch")); got != 1 {
		t.Errorf("batch class connections %v, want 1", got)
	}

	// In a dry run a class in debt is let through, and counted.
	if err := p.Reload(parseConfig(t, text("web")+"limits: {dry_run: true}\n")); err != nil {
		t.Fatal(err)
	}
	if code, msg := ask(other, 21); code != 0 {
		t.Errorf("refused in a dry run: %s", msg)
	}
	if got := metricValue(t, p.clientMetrics.refusals.WithLabelValues("batch", "dry_run")); got != 1 {
		t.Errorf("dry run refusals %v, want 1", got)
	}
}

// servedOn serves p on a loopback port until the test ends, and returns
// the address.
func servedOn(t *testing.T, p *Proxy) string {
	t.Helper()
	ln := listen(t, "127.0.0.1:0")
	go p.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.Shutdown(ctx)
	})
	return ln.Addr().String()
}

// A partition's budget in request units refuses its reads while it is in
// debt, with the partition limits' error; other partitions go on.
func TestPartitionUnits(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{Keyspace: "ks", Table: "kv"})
	var clock atomic.Int64
	clock.Store(int64(time.Hour))
	cfg := parseConfig(t, `listen: 127.0.0.1:0
upstreams: [`+node.Addr()+`]
admin: {listen: ""}
limits:
  keyspaces:
    ks:
      tables:
        kv: {max_read_units_per_second: 10}
request_units: {fixed: 4, per_row: 0, per_kib: 0, per_ms: 0}
`)
	p, err := New(cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{testSnapshot(t)}))
	if err != nil {
		t.Fatal(err)
	}
	p.elapsed = clock.Load
	c := dialRaw(t, servedOn(t, p), 4)
	c.startup(nil)
	ask := func(stream int16, key string) (int32, string) {
		c.send(stream, &message.Query{Query: "SELECT * FROM ks.kv WHERE k = " + key, Options: &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne}})
		if e, ok := c.recv().Body.Message.(message.Error); ok {
			return int32(e.GetErrorCode()), e.GetErrorMessage()
		}
		return 0, ""
	}
	for i := range 3 {
		if code, msg := ask(int16(1+i), "1"); code != 0 {
			t.Fatalf("read %d refused: %s", i+1, msg)
		}
	}
	if code, msg := ask(4, "1"); code != frame.ErrCodeConfig || !strings.Contains(msg, "ks.kv") {
		t.Fatalf("a partition in debt: %#x %q, want the partition limits' refusal", code, msg)
	}
	if code, msg := ask(5, "2"); code != 0 {
		t.Fatalf("another partition refused: %s", msg)
	}
	clock.Add(int64(300 * time.Millisecond))
	if code, msg := ask(6, "1"); code != 0 {
		t.Fatalf("refused after its debt was repaid: %s", msg)
	}
}

func BenchmarkRequestUnitsPrice(b *testing.B) {
	cc := &clientClasses{units: config.RequestUnitsConfig{Fixed: 1, PerRow: 0.1, PerKiB: 0.25, PerMs: 1}}
	msg := &message.RowsResult{Metadata: &message.RowsMetadata{ColumnCount: 2, Columns: []*message.ColumnMetadata{
		{Keyspace: "ks", Table: "kv", Name: "k", Type: datatype.Int}, {Keyspace: "ks", Table: "kv", Name: "v", Type: datatype.Blob}}},
		Data: message.RowSet{{{0, 0, 0, 1}, make([]byte, 64)}}}
	f := msgFrame(b, 4, 1, msg)
	h, _ := frame.ParseHeader(f)
	req := request{size: 40}
	b.ReportAllocs()
	var sum float64
	for range b.N {
		sum += cc.price(&req, f, h, 500_000)
	}
	_ = sum
}
