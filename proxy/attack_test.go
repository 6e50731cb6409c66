package proxy

import (
	"crypto/md5"
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/apache/cassandra-gocql-driver/v2/lz4"
	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cqlguard/cqlguard/classify"
	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/ratelimit"
	"github.com/cqlguard/cqlguard/schema"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

// Regression tests for what an attacker found: what one
// connection sends must not change how others are treated, and a
// connection's memory follows what it has in flight.

// startAttackProxy runs a proxy on a port of its own in front of upstream,
// with schema snap (nil: none), and returns it and its address.
func startAttackProxy(t *testing.T, upstream string, snap *schema.Snapshot, edit func(*config.Config)) (*Proxy, string) {
	t.Helper()
	cfg := config.Default()
	cfg.Admin.Listen = ""
	cfg.Listen, cfg.Upstreams = "127.0.0.1:0", []string{upstream}
	cfg.DialTimeout = config.Duration(time.Second)
	if edit != nil {
		edit(&cfg)
	}
	return serveProxy(t, cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{snap}))
}

// A second request on a stream id in flight is refused with a protocol
// error on that stream and never reaches the node; the first is answered
// once, and the id is free again after.
func TestStreamInFlightRefused(t *testing.T) {
	t.Parallel()
	node := startStubNode(t, "127.0.0.1:0")
	_, addr := startAttackProxy(t, node.ln.Addr().String(), nil, nil)
	c := dialStub(t, addr)
	c.write(stubQuery(5, "SELECT hold FROM ks.t"))
	node.waitHeld(t, 1)
	c.write(append(stubQuery(5, "SELECT hold FROM ks.t"), stubQuery(5, "SELECT * FROM ks.t")...))
	for range 2 {
		stream, code, msg, err := c.next()
		if err != nil || stream != 5 || code != frame.ErrCodeProtocol || !strings.Contains(msg, "in flight") {
			t.Fatalf("request on a stream in flight: stream %d, code %#x %q, %v; want a protocol error on stream 5", stream, code, msg, err)
		}
	}
	if n := node.heldNow(); n != 1 {
		t.Errorf("the node holds %d requests, want 1", n)
	}
	node.release(1)
	if stream, code, _, err := c.next(); err != nil || stream != 5 || code != 0 {
		t.Fatalf("the held request's answer: stream %d code %#x %v", stream, code, err)
	}
	c.write(stubQuery(5, "SELECT * FROM ks.t"))
	if stream, code, _, err := c.next(); err != nil || stream != 5 || code != 0 {
		t.Fatalf("stream 5 once free: stream %d code %#x %v", stream, code, err)
	}
}

// Two PREPAREs on one stream, in one write, cannot register the first
// statement's id with what the proxy learned of the second: an EXECUTE of a
// limited table would otherwise be taken for a system query, or a system
// query for a limited table's, for every connection.
func TestPreparedNotPoisonedByStreamReuse(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{})
	p, addr := startAttackProxy(t, node.Addr(), testSnapshot(t), nil)
	for _, pair := range [][2]string{
		{"SELECT v FROM ks.kv WHERE k = ?", "SELECT release_version FROM system.local WHERE key = 'local'"},
		{"SELECT * FROM system.peers", "UPDATE ks.kv SET v = ? WHERE k = ?"},
	} {
		c := dialBad(t, addr, 4, nil)
		var both []byte
		for _, q := range pair {
			both = append(both, msgFrame(t, 4, 9, &message.Prepare{Query: q})...)
		}
		c.write(both)
		for range 2 {
			if _, err := c.next(); err != nil {
				t.Fatal(err)
			}
		}
		for _, q := range pair {
			sum := md5.Sum([]byte(q))
			st := registered(t, p, sum[:])
			if st == nil {
				continue // refused, never prepared
			}
			internal := strings.Contains(q, "system.")
			if st.Internal != internal || !internal && string(st.Table) != "kv" {
				t.Errorf("%q registered as table %q, internal %v", q, st.Table, st.Internal)
			}
		}
	}
}

// Negative stream ids are the server's: a request on one is refused with a
// protocol error on that stream, and never reaches the node, whose answer
// (say, system.local's real address) the proxy would not rewrite.
func TestNegativeStreamRefused(t *testing.T) {
	t.Parallel()
	node := startStubNode(t, "127.0.0.1:0")
	node.mu.Lock()
	node.record = true
	node.mu.Unlock()
	_, addr := startAttackProxy(t, node.ln.Addr().String(), nil, nil)
	c := dialBad(t, addr, 4, nil)
	c.write(rawFrame(4, -1, frame.OpOptions, 0))
	c.write(msgFrame(t, 4, -2, &message.Query{Query: "SELECT * FROM system.local"}))
	c.write(msgFrame(t, 4, -32768, &message.Query{Query: "SELECT * FROM system.peers"}))
	for _, want := range []int16{-1, -2, -32768} {
		r, err := c.next()
		if err != nil || r.stream != want || r.opcode != frame.OpError || r.code != frame.ErrCodeProtocol {
			t.Fatalf("request on stream %d: %v %v; want a protocol error on it", want, r, err)
		}
	}
	node.mu.Lock()
	got := node.statements
	node.mu.Unlock()
	if len(got) != 0 {
		t.Errorf("the node received %q", got)
	}
}

// A connection that has used many stream ids, as drivers do by rotating
// through them, keeps little once idle, in every protocol version and
// compression: the stream table follows what is in flight, not which ids
// were used, and a v5 connection's segment writers and readers keep no LZ4
// state of their own.
func TestIdleAfterManyStreams(t *testing.T) {
	node := startStubNode(t, "127.0.0.1:0")
	p, addr := startAttackProxy(t, node.ln.Addr().String(), nil, nil)
	for _, tc := range []struct {
		name    string
		version uint8
		opts    map[string]string
	}{
		{"v4", 4, nil},
		{"v5", 5, nil},
		{"v5-lz4", 5, map[string]string{"COMPRESSION": "lz4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 50
			clients := make([]*badClient, n)
			for i := range clients {
				clients[i] = dialBad(t, addr, tc.version, tc.opts)
			}
			settle(t)
			before, _ := memUse()
			for _, c := range clients {
				c.c.SetDeadline(time.Now().Add(10 * time.Second))
				// 128 requests, one at a time, each on an id of another
				// 256, their text long enough for LZ4 to shrink.
				for i := range 128 {
					stream := int16(i<<8 | i)
					c.write(c.wire(msgFrame(t, tc.version, stream, &message.Query{Query: "SELECT * FROM ks.t WHERE k = 'rotating, rotating, rotating, rotating'"})))
					if r, err := c.next(); err != nil || r.stream != stream || r.opcode != frame.OpResult {
						t.Fatalf("stream %d: %v %v", stream, r, err)
					}
				}
			}
			time.Sleep(100 * time.Millisecond) // every session back to waiting
			after, _ := memUse()
			tickSessions(p)
			tickSessions(p)
			ticked, _ := memUse()
			per := (float64(after) - float64(before)) / n
			t.Logf("%s, per connection idle after 128 stream ids: %.0f B more heap than after STARTUP, %.0f B once the watchdog has ticked", tc.name, per, (float64(ticked)-float64(before))/n)
			// A table indexed by stream id kept about 800 KB; an LZ4
			// compressor taken by the first compressed segment and kept
			// would be 136 KiB for each segment writer.
			if per > 8<<10 {
				t.Errorf("a %s connection idle after using 128 stream ids holds %.0f B more heap, want under 8 KiB", tc.name, per)
			}
			for _, c := range clients {
				c.c.Close()
			}
		})
	}
}

// A compressed body's claimed length does not size a buffer that outlives
// it: six bytes claiming 16 MiB are refused before anything is set aside,
// and a body that claims what it could decode to, but does not, leaves no
// buffer behind. Both are forwarded for the node to answer.
func TestIdleAfterCompressedClaims(t *testing.T) {
	node := startStubNode(t, "127.0.0.1:0")
	_, addr := startAttackProxy(t, node.ln.Addr().String(), nil, nil)
	bodies := map[string][]byte{
		"six bytes claiming 16 MiB": {0x00, 0xff, 0xff, 0xff, 0, 0},
		// A frame under 64 KiB, which the proxy's own reader keeps.
		"60 KiB claiming 8 MiB": append(binary.BigEndian.AppendUint32(nil, 8<<20), make([]byte, 60<<10)...),
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			const n = 10
			clients := make([]*badClient, n)
			for i := range clients {
				clients[i] = dialBad(t, addr, 4, map[string]string{"COMPRESSION": "lz4"})
			}
			settle(t)
			before, _ := memUse()
			for _, c := range clients {
				f := frame.AppendHeader(nil, frame.Header{Version: 4, Flags: frame.FlagCompression, Stream: 3, Opcode: frame.OpQuery, Length: len(body)})
				c.write(append(f, body...))
				if r, err := c.next(); err != nil || r.stream != 3 {
					t.Fatalf("compressed claim: %v %v", r, err)
				}
			}
			time.Sleep(100 * time.Millisecond) // every session back to waiting
			after, _ := memUse()
			per := (float64(after) - float64(before)) / n
			t.Logf("per connection idle after %s: %.0f B more heap", name, per)
			// A frame of 60 KiB leaves buffers of up to 64 KiB each in the
			// proxy's reader and writer and in the stub's reader; what the
			// claim sized was 8 or 16 MiB.
			if per > 1<<20 {
				t.Errorf("a connection idle after %s holds %.0f B more heap, want under 1 MiB", name, per)
			}
			for _, c := range clients {
				c.c.Close()
			}
		})
	}
}

// Large PREPAREs are bounded by max_prepared_bytes: statements with IN
// lists of literals many times larger in memory than on the wire no longer
// pile up until max_prepared_statements.
func TestLargePreparesBounded(t *testing.T) {
	// The stub node keeps nothing of what it prepares.
	node := startStubNode(t, "127.0.0.1:0")
	const bound = 4 << 20
	p, addr := startAttackProxy(t, node.ln.Addr().String(), testSnapshot(t), func(c *config.Config) {
		c.MaxFrameBytes = 2 << 20
		c.MaxPreparedBytes = bound
	})
	c := dialBad(t, addr, 4, nil)
	c.c.SetDeadline(time.Now().Add(60 * time.Second))
	settle(t)
	before, _ := memUse()
	for i := range 10 {
		var b strings.Builder
		fmt.Fprintf(&b, "SELECT v FROM ks.kv WHERE k IN (%d", i)
		for b.Len() < 256<<10 {
			b.WriteString(",1,2,3,4,5,6,7,8,9")
		}
		b.WriteString(")")
		c.write(msgFrame(t, 4, int16(i), &message.Prepare{Query: b.String()}))
		if r, err := c.next(); err != nil || r.opcode != frame.OpResult {
			t.Fatalf("PREPARE %d: %v %v", i, r, err)
		}
	}
	time.Sleep(100 * time.Millisecond) // the session back to waiting
	after, _ := memUse()
	grew := float64(after) - float64(before)
	t.Logf("10 PREPAREs of 256 KiB IN lists: %d statements held, %d B estimated, heap %.1f MiB more", p.prepared.Len(), p.prepared.Size(), grew/(1<<20))
	if p.prepared.Size() > bound {
		t.Errorf("registry holds %d bytes, bound %d", p.prepared.Size(), bound)
	}
	if grew > 2*bound {
		t.Errorf("heap grew %.1f MiB with max_prepared_bytes %d MiB", grew/(1<<20), bound>>20)
	}
}

// Drivers rotate stream ids: gocql sessions that ran thousands of queries
// each, many at once, simple and prepared, plain and LZ4, in protocol v4
// and v5, leave each idle connection through the proxy costing what an
// idle connection costs. The proxy's share is what the same load costs
// over direct connections to the node subtracted from what it costs
// through the proxy.
func TestIdleAfterDriverLoad(t *testing.T) {
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{})
	p, addr := startAttackProxy(t, node.Addr(), testSnapshot(t), nil)
	const sessions, workers, queries = 6, 16, 125
	// load runs the load through host, each session's workers running
	// queries each, and returns the heap it left with every session idle
	// and open, and once the proxy's watchdog has ticked, and how many
	// connections the proxy has.
	load := func(host string, proto int, comp gocql.Compressor, sessions, workers int) (idle, ticked float64, conns int) {
		t.Helper()
		settle(t)
		before, _ := memUse()
		var open []*gocql.Session
		for range sessions {
			cluster := gocql.NewCluster(host)
			cluster.ProtoVersion = proto
			cluster.NumConns = 2
			cluster.Compressor = comp
			cluster.Timeout = 10 * time.Second
			s, err := cluster.CreateSession()
			if err != nil {
				t.Fatalf("CreateSession through %s: %v", host, err)
			}
			open = append(open, s)
		}
		var wg sync.WaitGroup
		errs := make(chan error, sessions*workers)
		for _, s := range open {
			for w := range workers {
				wg.Go(func() {
					for i := range queries {
						var err error
						if i%2 == 0 {
							err = s.Query("SELECT v FROM ks.kv WHERE k = ?", fmt.Sprint(w*queries+i)).Exec() // the fake node takes text
						} else {
							err = s.Query(fmt.Sprintf("SELECT v FROM ks.kv WHERE k = %d", i)).Exec()
						}
						if err != nil {
							errs <- err
							return
						}
					}
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("query through %s: %v", host, err)
		}
		time.Sleep(200 * time.Millisecond) // every session back to waiting
		after, _ := memUse()
		tickSessions(p)
		tickSessions(p)
		afterTick, _ := memUse()
		conns = int(p.conns.Load())
		for _, s := range open {
			s.Close()
		}
		return float64(after) - float64(before), float64(afterTick) - float64(before), conns
	}
	// What the first load sets up once, in the driver and the node (100
	// KB), and what the proxy keeps of each statement gocql prepares, for
	// all connections, is no connection's: a load of each first.
	load(node.Addr(), 4, nil, sessions, workers)
	load(addr, 4, nil, 1, 1)
	for _, tc := range []struct {
		name  string
		proto int
		comp  gocql.Compressor
	}{
		{"v4", 4, nil},
		{"v4-lz4", 4, lz4.LZ4Compressor{}},
		{"v5", 5, nil},
		{"v5-lz4", 5, lz4.LZ4Compressor{}},
	} {
		direct, directTicked, _ := load(node.Addr(), tc.proto, tc.comp, sessions, workers)
		proxied, proxiedTicked, conns := load(addr, tc.proto, tc.comp, sessions, workers)
		per, perTicked := (proxied-direct)/float64(conns), (proxiedTicked-directTicked)/float64(conns)
		t.Logf("%s: %d sessions × %d queries, %d connections through the proxy; each idle connection costs the proxy %.0f B of heap, %.0f B once the watchdog has ticked (whole heap: direct %.0f B, through the proxy %.0f B)",
			tc.name, sessions, workers*queries, conns, per, perTicked, direct, proxied)
		// The figure moves by a few KB between runs with what the
		// driver keeps; a v5 connection cost 313 KB when each segment
		// writer had an LZ4 compressor of its own.
		if per > 32<<10 {
			t.Errorf("%s: an idle connection after driver load costs the proxy %.0f B of heap, want under 32 KiB", tc.name, per)
		}
	}
}

// A client that resets its connection with requests in flight is the
// client's ending, not the upstream's: nothing is counted as upstream_lost
// and nothing is logged as a warning, however the two paths notice it. The
// request path is held at max_in_flight_per_connection, so the response
// path, writing the answers, is the one to find the client gone.
func TestClientResetIsNotUpstreamLost(t *testing.T) {
	var log logLines
	node := startStubNode(t, "127.0.0.1:0")
	b := startBadInputProxy(t, &log, "127.0.0.1:0", node.ln.Addr().String(), func(c *config.Config) {
		c.MaxInFlightPerConnection = 2
		c.MaxFrameBytes = 1 << 20
	})
	for range 20 {
		c := dialStub(t, b.addr)
		node.mu.Lock()
		got := node.got
		node.mu.Unlock()
		c.write(append(append(stubQuery(1, "SELECT hold FROM ks.t"), stubQuery(2, "SELECT hold FROM ks.t")...), stubQuery(3, "SELECT hold FROM ks.t")...))
		node.waitHeld(t, got+2)
		c.c.(*net.TCPConn).SetLinger(0)
		c.c.Close() // a reset, with three requests in flight or waiting
		node.release(3)
	}
	// Every session ends before its metrics are read.
	for deadline := time.Now().Add(5 * time.Second); b.p.conns.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if got := b.reasons(t); got["upstream_lost"] != 0 || got["upstream_stalled"] != 0 {
		t.Errorf("protocol errors %v after clients reset, want no upstream_lost", got)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	for line := range strings.Lines(log.b.String()) {
		if strings.Contains(line, `"level":"warn"`) || strings.Contains(line, `"side":"upstream"`) && strings.Contains(line, `"level":"info"`) {
			t.Errorf("logged %s", line)
		}
	}
}

// The limiter's decision counters never go back, though a reload that
// changes the algorithm replaces the limiter: an alert on their rate must
// not see a reset that is not one.
func TestLimiterCountersSurviveReload(t *testing.T) {
	cfg := parseConfig(t, "limits: {algorithm: token-bucket, burst: 1}\n")
	reg := prometheus.NewRegistry()
	p, err := New(cfg, testLogger(), reg, WithSchema(staticSchema{}))
	if err != nil {
		t.Fatal(err)
	}
	decisions := func() (accepted, rejected float64) {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "cqlguard_rate_limiter_decisions_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				switch m.GetLabel()[0].GetValue() {
				case "accepted":
					accepted = m.GetCounter().GetValue()
				case "rejected":
					rejected = m.GetCounter().GetValue()
				}
			}
		}
		return accepted, rejected
	}
	now := p.clock()
	var wantAccepted, wantRejected float64
	for i, text := range []string{"limits: {algorithm: scylla}\n", "limits: {algorithm: token-bucket, burst: 2}\n"} {
		for range 5 {
			if p.settings.Load().limiter.AllowAt(now, 42, 1, 1) == ratelimit.Reject {
				wantRejected++
			} else {
				wantAccepted++
			}
		}
		if err := reload(p, text); err != nil {
			t.Fatal(err)
		}
		if a, r := decisions(); a != wantAccepted || r != wantRejected {
			t.Errorf("after reload %d: decisions accepted %v rejected %v, want %v and %v", i+1, a, r, wantAccepted, wantRejected)
		}
	}
}

// Every frame the proxy writes itself is counted like one it forwards:
// cqlguard_frames_total{direction="response",opcode="ERROR"} counted none
// of the proxy's refusals.
func TestProxyAnswersCounted(t *testing.T) {
	var log logLines
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{})
	b := startBadInputProxy(t, &log, "127.0.0.1:0", node.Addr(), nil)
	c := dialBad(t, b.addr, 4, nil)
	unknown := make([]byte, 16)
	for i := range 3 {
		c.write(msgFrame(t, 4, int16(i), &message.Execute{QueryId: unknown, Options: &message.QueryOptions{}}))
		if r, err := c.next(); err != nil || r.code != frame.ErrCodeUnprepared {
			t.Fatalf("EXECUTE of an unknown statement: %v %v", r, err)
		}
	}
	c.write(msgFrame(t, 4, -1, &message.Options{}))
	if r, err := c.next(); err != nil || r.code != frame.ErrCodeProtocol {
		t.Fatalf("OPTIONS on stream -1: %v %v", r, err)
	}
	if got := testutil.ToFloat64(b.p.metrics.frames[dirResponse][frame.OpError]); got != 4 {
		t.Errorf("cqlguard_frames_total{direction=\"response\",opcode=\"ERROR\"} = %v, want 4", got)
	}
}

// Version negotiation is not an error: a driver asking for a version the
// proxy does not speak (cqlsh asks for 66, then 65) is told so and counted
// apart, and only a first byte no driver sends counts as a protocol error.
func TestVersionNegotiationNotAnError(t *testing.T) {
	var log logLines
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{})
	b := startBadInputProxy(t, &log, "127.0.0.1:0", node.Addr(), nil)
	for _, v := range []byte{66, 65, 6} {
		c := dialBad(t, b.addr, 0, nil)
		c.write([]byte{v, 0, 0, 0, byte(frame.OpOptions), 0, 0, 0, 0})
		if r, err := c.next(); err != nil || r.code != frame.ErrCodeProtocol {
			t.Fatalf("version %d: %v %v", v, r, err)
		}
	}
	if got := testutil.ToFloat64(b.p.metrics.versionRefusals); got != 3 {
		t.Errorf("cqlguard_protocol_version_refusals_total = %v, want 3", got)
	}
	if got := b.reasons(t); got["unsupported_version"] != 0 {
		t.Errorf("protocol errors %v for version negotiation", got)
	}
}

// The connection's keyspace is the one the upstream's last Set_keyspace
// named: a USE the node refuses (Cassandra keeps the keyspace it had)
// cannot take later unqualified statements out of their table's limits.
func TestFailedUseKeepsKeyspace(t *testing.T) {
	addr, pinnedToKs := kvInKsProxy(t)
	c := dialStub(t, addr)
	for i, q := range []string{"USE ks", "SELECT v FROM kv WHERE k = 1", "USE refuse", "SELECT v FROM kv WHERE k = 1"} {
		c.write(stubQuery(int16(i), q))
		if _, code, msg, err := c.next(); err != nil || (code != 0) != (q == "USE refuse") {
			t.Fatalf("%q: %#x %q %v", q, code, msg, err)
		}
	}
	if pinned := pinnedToKs(); len(pinned) != 2 || !pinned[0] || !pinned[1] {
		t.Errorf("SELECT from kv pinned to ks.kv after USE ks, and after a refused USE: %v, want [true true]", pinned)
	}
}

// kvInKsProxy serves a proxy in front of a stub node, and returns its
// address and a function that says, for each request on a table kv it has
// classified, whether it was pinned to ks.kv.
func kvInKsProxy(t *testing.T) (string, func() []bool) {
	t.Helper()
	node := startStubNode(t, "127.0.0.1:0")
	var mu sync.Mutex
	var pinned []bool
	observe := func(c *classify.Classification) {
		if string(c.Table) == "kv" {
			mu.Lock()
			pinned = append(pinned, c.Pinned && string(c.Partitions[0].Table.Keyspace) == "ks")
			mu.Unlock()
		}
	}
	cfg := config.Default()
	cfg.Admin.Listen = ""
	cfg.Listen, cfg.Upstreams = "127.0.0.1:0", []string{node.ln.Addr().String()}
	_, addr := serveProxy(t, cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{testSnapshot(t)}), WithObserver(observe))
	return addr, func() []bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(pinned)
	}
}

// A request touching many partitions of a limited table has each of them
// counted, up to limits.max_partitions_per_request; past it, it is refused
// with an Invalid error naming the setting (it used to go through
// uncounted). Tables without a limit are not affected.
func TestManyPartitionsCountedOrRefused(t *testing.T) {
	var log logLines
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{})
	limit := config.OpsPerSecond(1000000)
	b := startBadInputProxy(t, &log, "127.0.0.1:0", node.Addr(), func(c *config.Config) {
		c.MaxFrameBytes = 1 << 20
		c.Limits.Keyspaces = map[string]config.KeyspaceLimits{"ks": {Tables: map[string]config.RateLimits{"kv": {MaxReadsPerSecond: &limit}}}}
	}, WithSchema(staticSchema{testSnapshot(t)}))
	c := dialBad(t, b.addr, 4, nil)
	query := func(stream int16, text string) clientAnswer {
		t.Helper()
		c.write(msgFrame(t, 4, stream, &message.Query{Query: text, Options: &message.QueryOptions{}}))
		r, err := c.next()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := query(1, inList("ks.kv", 1024)); r.opcode != frame.OpResult {
		t.Fatalf("IN of 1024 keys: %v", r)
	}
	if st := b.p.settings.Load().limiter.Stats(); st.Accepted != 1024 {
		t.Errorf("IN of 1024 keys: %d partitions counted, want 1024", st.Accepted)
	}
	if r := query(2, inList("ks.kv", 5000)); r.code != frame.ErrCodeInvalid || !strings.Contains(r.msg, "limits.max_partitions_per_request") {
		t.Errorf("IN of 5000 keys of a limited table: %v, want Invalid naming limits.max_partitions_per_request", r)
	}
	if r := query(3, strings.Replace(inList(`"Ks"."Tab"`, 5000), "k IN", `"Key" IN`, 1)); r.opcode != frame.OpResult {
		t.Errorf("IN of 5000 keys of a table without limits: %v, want it forwarded", r)
	}
	if got := testutil.ToFloat64(b.p.metrics.rejections.WithLabelValues("ks", "kv", "read", "too_many_partitions")); got != 1 {
		t.Errorf("rejections{outcome=too_many_partitions} = %v, want 1", got)
	}
}
