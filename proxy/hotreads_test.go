package proxy

import (
	"bytes"
	"sync"
	"testing"
	"time"

	pframe "github.com/datastax/go-cassandra-native-protocol/frame"
	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

// hotProxy runs a proxy in front of node that serves the hot reads of
// ks.kv as table says (every read is hot).
func hotProxy(t *testing.T, node *fakenode.Node, table config.HotReadsTable, edit func(*config.Config)) *Proxy {
	t.Helper()
	zero := config.OpsPerSecond(0)
	table.HotRate = &zero
	cfg := config.Default()
	cfg.Admin.Listen, cfg.Listen, cfg.Upstreams = "", "127.0.0.1:0", []string{node.Addr()}
	cfg.HotReads.Keyspaces = map[string]config.HotReadsKeyspace{"ks": {Tables: map[string]config.HotReadsTable{"kv": table}}}
	if edit != nil {
		edit(&cfg)
	}
	p, addr := serveProxy(t, cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{testSnapshot(t)}))
	p.cfg.Listen = addr
	return p
}

func (p *Proxy) hotServed(t *testing.T, outcome string) float64 {
	t.Helper()
	return metricValue(t, p.hotReads.served.WithLabelValues("ks", "kv", outcome))
}

// read sends a QUERY at consistency ONE and returns its answer's body.
func (c *rawClient) read(stream int16, q string) []byte {
	c.t.Helper()
	c.send(stream, &message.Query{Query: q, Options: &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne}})
	return c.answerBody(stream)
}

// answerBody receives the next frame, which must be the RESULT on stream,
// and returns its encoded message.
func (c *rawClient) answerBody(stream int16) []byte {
	c.t.Helper()
	fr := c.recv()
	if fr.Header.OpCode != primitive.OpCodeResult || fr.Header.StreamId != stream {
		c.t.Fatalf("want a RESULT on stream %d, got %v on %d: %v", stream, fr.Header.OpCode, fr.Header.StreamId, fr.Body.Message)
	}
	var b bytes.Buffer
	if err := pframe.NewCodec().EncodeFrame(fr, &b); err != nil {
		c.t.Fatal(err)
	}
	return b.Bytes()[9:]
}

func TestHotReadsCoalesce(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{Keyspace: "ks", Table: "kv", SlowQuery: "k = 1", SlowFor: 300 * time.Millisecond})
	p := hotProxy(t, node, config.HotReadsTable{Coalesce: true}, nil)
	const clients = 8
	cs := make([]*rawClient, clients)
	for i := range cs {
		cs[i] = dialRaw(t, p.cfg.Listen, 4)
		cs[i].startup(nil)
	}
	answers := make([][]byte, clients)
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { answers[i] = c.read(int16(10+i), "SELECT * FROM ks.kv WHERE k = 1") })
	}
	wg.Wait()
	for i, a := range answers[1:] {
		if !bytes.Equal(a, answers[0]) {
			t.Errorf("client %d's answer differs:\n%x\n%x", i+1, a, answers[0])
		}
	}
	// The first read leads; the others join it while the node holds it.
	if n := node.SlowRequests(); n != 1 {
		t.Errorf("the node saw %d reads for %d identical ones in flight together, want 1", n, clients)
	}
	if got := p.hotServed(t, "coalesced"); got != clients-1 {
		t.Errorf("coalesced %v, want %d", got, clients-1)
	}
	if got := p.hotServed(t, "forwarded"); got != 1 {
		t.Errorf("forwarded %v, want 1", got)
	}
}

func TestHotReadsCache(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{Keyspace: "ks", Table: "kv"})
	p := hotProxy(t, node, config.HotReadsTable{CacheTTL: config.Duration(10 * time.Second)}, nil)
	c := dialRaw(t, p.cfg.Listen, 4)
	c.startup(nil)
	other := dialRaw(t, p.cfg.Listen, 4)
	other.startup(nil)

	// What the proxy answered from another read's answer; every other
	// read reached the node.
	shared := func() float64 { return p.hotServed(t, "cached") + p.hotServed(t, "coalesced") }
	first := c.read(1, "SELECT * FROM ks.kv WHERE k = 1")
	for i := range 5 {
		if got := c.read(int16(2+i), "SELECT * FROM ks.kv WHERE k = 1"); !bytes.Equal(got, first) {
			t.Fatalf("cached answer %x, want %x", got, first)
		}
		if got := other.read(int16(2+i), "SELECT * FROM ks.kv WHERE k = 1"); !bytes.Equal(got, first) {
			t.Fatalf("cached answer on another connection %x, want %x", got, first)
		}
	}
	if got := p.hotServed(t, "cached"); got != 10 {
		t.Errorf("cached %v, want 10", got)
	}
	waitUntil(t, "the node to count the first read", func() bool { return node.Requests() > 0 })
	if hot := p.Hot(); len(hot) != 1 || hot[0].Served != "cache" || hot[0].Table != "kv" || hot[0].Op != "read" {
		t.Errorf("/hot shows %+v, want ks.kv's partition served from the cache", hot)
	}

	// Reads that differ from the cached one in anything that may change
	// the answer are not served from its answer; nor are those at SERIAL,
	// with tracing or with a custom payload, even the second time.
	v5 := dialRaw(t, p.cfg.Listen, 5)
	v5.startup(nil)
	used := dialRaw(t, p.cfg.Listen, 4)
	used.startup(nil)
	used.send(1, &message.Query{Query: "USE ks", Options: &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne}})
	used.answerBody(1)
	one := primitive.ConsistencyLevelOne
	opts := func(edit func(*message.QueryOptions)) *message.QueryOptions {
		o := &message.QueryOptions{Consistency: one}
		edit(o)
		return o
	}
	const q1 = "SELECT * FROM ks.kv WHERE k = 1"
	for i, d := range []struct {
		name   string
		conn   *rawClient
		q      string
		opts   *message.QueryOptions
		frame  func(*pframe.Frame)
		raw    func([]byte)
		repeat bool
	}{
		{name: "another partition", q: "SELECT * FROM ks.kv WHERE k = 2"},
		{name: "another statement", q: "SELECT v FROM ks.kv WHERE k = 1"},
		{name: "consistency", opts: opts(func(o *message.QueryOptions) { o.Consistency = primitive.ConsistencyLevelQuorum })},
		{name: "page size", opts: opts(func(o *message.QueryOptions) { o.PageSize = 10 })},
		{name: "paging state", opts: opts(func(o *message.QueryOptions) { o.PageSize, o.PagingState = 10, []byte{1, 2, 3} })},
		{name: "serial consistency", opts: opts(func(o *message.QueryOptions) {
			s := primitive.ConsistencyLevelLocalSerial
			o.SerialConsistency = &s
		})},
		{name: "a timestamp where the cached read had none", opts: opts(func(o *message.QueryOptions) { ts := int64(42); o.DefaultTimestamp = &ts })},
		{name: "values", q: "SELECT * FROM ks.kv WHERE k = ?", opts: opts(func(o *message.QueryOptions) {
			o.PositionalValues = []*primitive.Value{primitive.NewValue([]byte{0, 0, 0, 1})}
		})},
		{name: "skip metadata", opts: opts(func(o *message.QueryOptions) { o.SkipMetadata = true })},
		{name: "protocol version", conn: v5},
		{name: "per-query keyspace", conn: v5, q: "SELECT * FROM kv WHERE k = 1", opts: opts(func(o *message.QueryOptions) { o.Keyspace = "ks" })},
		{name: "connection keyspace", conn: used, q: "SELECT * FROM kv WHERE k = 1"},
		{name: "at SERIAL", opts: opts(func(o *message.QueryOptions) { o.Consistency = primitive.ConsistencyLevelSerial }), repeat: true},
		// The oracle's codec counts a tracing id in a request it does not
		// write: the flag is set on the encoded frame.
		{name: "tracing", raw: func(b []byte) { b[1] |= frame.FlagTracing }, repeat: true},
		{name: "custom payload", frame: func(f *pframe.Frame) { f.SetCustomPayload(map[string][]byte{"k": {1}}) }, repeat: true},
	} {
		conn, q, o := c, q1, d.opts
		if d.conn != nil {
			conn = d.conn
		}
		if d.q != "" {
			q = d.q
		}
		if o == nil {
			o = opts(func(*message.QueryOptions) {})
		}
		for n := range 2 {
			if n == 1 && !d.repeat {
				break
			}
			before := shared()
			stream := int16(100 + 2*i + n)
			f := pframe.NewFrame(conn.v, stream, &message.Query{Query: q, Options: o})
			if d.frame != nil {
				d.frame(f)
			}
			var edits []func([]byte)
			if d.raw != nil {
				edits = append(edits, d.raw)
			}
			conn.sendFrame(f, edits...)
			conn.answerBody(stream)
			if got := shared(); got != before {
				t.Errorf("%s (read %d): served from another read's answer", d.name, n+1)
			}
		}
	}

	// Drivers time every request; reads that differ only in that share.
	for i, ts := range []int64{1, 2, 3} {
		before := shared()
		c.send(int16(150+i), &message.Query{Query: "SELECT * FROM ks.kv WHERE k = 3", Options: opts(func(o *message.QueryOptions) { o.DefaultTimestamp = &ts })})
		c.answerBody(int16(150 + i))
		if got := shared(); i > 0 && got != before+1 {
			t.Errorf("a read that differs only in its timestamp was not served from the cache")
		}
	}

	// A write to the partition, acknowledged, is seen by the next read,
	n := shared()
	c.send(200, &message.Query{Query: "INSERT INTO ks.kv (k, v) VALUES (1, 0x01)", Options: &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne}})
	c.answerBody(200)
	other.read(201, "SELECT * FROM ks.kv WHERE k = 1")
	if got := shared(); got != n {
		t.Errorf("the first read after a write was served from an answer before it")
	}
	// and the answer after it is cached again.
	c.read(202, "SELECT * FROM ks.kv WHERE k = 1")
	if got := shared(); got != n+1 {
		t.Errorf("the second read after a write was not served from the cache")
	}
}

func TestHotReadsLeaderLeaves(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{Keyspace: "ks", Table: "kv", SlowQuery: "k = 1", SlowFor: 300 * time.Millisecond})
	p := hotProxy(t, node, config.HotReadsTable{Coalesce: true}, nil)
	leader := dialRaw(t, p.cfg.Listen, 4)
	leader.startup(nil)
	waiter := dialRaw(t, p.cfg.Listen, 4)
	waiter.startup(nil)
	leader.send(1, &message.Query{Query: "SELECT * FROM ks.kv WHERE k = 1", Options: &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne}})
	waitUntil(t, "the leader's read in flight", func() bool { return p.hotServed(t, "forwarded") == 1 })
	waiter.send(2, &message.Query{Query: "SELECT * FROM ks.kv WHERE k = 1", Options: &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne}})
	waitUntil(t, "the second read joined", func() bool { return p.hotServed(t, "coalesced") == 1 })
	leader.c.Close()
	// The waiting read is forwarded on its own connection and answered.
	waiter.c.SetDeadline(time.Now().Add(5 * time.Second))
	waiter.answerBody(2)
	if got := metricValue(t, p.hotReads.reissued); got != 1 {
		t.Errorf("reissued %v, want 1", got)
	}
}

func TestHotReadsMaxWait(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{Keyspace: "ks", Table: "kv", SlowQuery: "k = 1", SlowFor: time.Second})
	p := hotProxy(t, node, config.HotReadsTable{Coalesce: true}, func(c *config.Config) {
		c.HotReads.MaxWait = config.Duration(50 * time.Millisecond)
	})
	leader := dialRaw(t, p.cfg.Listen, 4)
	leader.startup(nil)
	waiter := dialRaw(t, p.cfg.Listen, 4)
	waiter.startup(nil)
	leader.send(1, &message.Query{Query: "SELECT * FROM ks.kv WHERE k = 1", Options: &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne}})
	waitUntil(t, "the leader's read in flight", func() bool { return p.hotServed(t, "forwarded") == 1 })
	waiter.send(2, &message.Query{Query: "SELECT * FROM ks.kv WHERE k = 1", Options: &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne}})
	// Past max_wait the waiting read goes to the node on its own.
	waitUntil(t, "the waiting read reissued", func() bool { return metricValue(t, p.hotReads.reissued) == 1 })
	waiter.c.SetDeadline(time.Now().Add(5 * time.Second))
	waiter.answerBody(2)
	leader.c.SetDeadline(time.Now().Add(5 * time.Second))
	leader.answerBody(1)
}

// Only reads that reach the upstream count against the partition's limit:
// reads that join one in flight are answered with its answer, and a read
// that would lead a flight past the limit is refused.
func TestHotReadsUnderALimit(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{Keyspace: "ks", Table: "kv", SlowQuery: "k = 1", SlowFor: 300 * time.Millisecond})
	p := hotProxy(t, node, config.HotReadsTable{Coalesce: true}, func(c *config.Config) {
		one := config.OpsPerSecond(1)
		c.Limits.Algorithm = "token-bucket"
		c.Limits.Keyspaces = map[string]config.KeyspaceLimits{"ks": {Tables: map[string]config.RateLimits{"kv": {MaxReadsPerSecond: &one}}}}
	})
	const clients = 4
	cs := make([]*rawClient, clients)
	for i := range cs {
		cs[i] = dialRaw(t, p.cfg.Listen, 4)
		cs[i].startup(nil)
	}
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { c.read(int16(10+i), "SELECT * FROM ks.kv WHERE k = 1") })
	}
	wg.Wait()
	if got := p.hotServed(t, "forwarded"); got != 1 {
		t.Errorf("forwarded %v, want 1: the one read the limit admits", got)
	}
	if got := p.hotServed(t, "coalesced"); got != clients-1 {
		t.Errorf("coalesced %v, want %d", got, clients-1)
	}
	// The next read would reach the upstream: the limit refuses it.
	cs[0].send(20, &message.Query{Query: "SELECT * FROM ks.kv WHERE k = 1", Options: &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne}})
	if fr := cs[0].recv(); fr.Header.OpCode != primitive.OpCodeError {
		t.Errorf("a read past the limit answered with %v", fr.Body.Message)
	}
	if got := p.hotServed(t, "refused"); got != 1 {
		t.Errorf("refused %v, want 1", got)
	}
}

// A write whose connection ends before its answer may have been applied:
// it invalidates what is cached, as an answered write would.
func TestHotReadsWriteWithoutAnswer(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{Keyspace: "ks", Table: "kv", ResetQuery: "0xdead"})
	p := hotProxy(t, node, config.HotReadsTable{CacheTTL: config.Duration(10 * time.Second)}, nil)
	reader := dialRaw(t, p.cfg.Listen, 4)
	reader.startup(nil)
	reader.read(1, "SELECT * FROM ks.kv WHERE k = 1")
	reader.read(2, "SELECT * FROM ks.kv WHERE k = 1")
	if got := p.hotServed(t, "cached"); got != 1 {
		t.Fatalf("cached %v, want 1", got)
	}
	writer := dialRaw(t, p.cfg.Listen, 4)
	writer.startup(nil)
	writer.send(1, &message.Query{Query: "INSERT INTO ks.kv (k, v) VALUES (1, 0xdead)", Options: &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne}})
	if fr := writer.recv(); fr.Header.OpCode != primitive.OpCodeError {
		t.Fatalf("the write whose connection was lost answered %v", fr.Body.Message)
	}
	reader.read(3, "SELECT * FROM ks.kv WHERE k = 1")
	if got := p.hotServed(t, "cached"); got != 1 {
		t.Errorf("a read after a write that may have been applied was served from the cache")
	}
}
