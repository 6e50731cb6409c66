package proxy

import (
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/shed"
)

// Tests of where shedding and routing meet: shedding judges the node a
// request runs on, and learns each node's latency from the same answers
// routing does.

// shedRouted is a proxy that routes by a ring and sheds, on a clock of the
// test's: a request's latency is how far the test moved the clock while
// it was in flight, and the controllers move only when a test moves them
// (update_every is an hour).
type shedRouted struct {
	p     *Proxy
	addr  string
	clock *atomic.Int64
}

// startShedRouted serves a proxy in front of ups that routes by ring, with
// classes critical (tier 0) and batch (tier 5), and shedding on, then
// extra's lines, until the test ends.
func startShedRouted(t *testing.T, ups []string, ring Ring, extra string) *shedRouted {
	t.Helper()
	cfg := parseConfig(t, `listen: 127.0.0.1:0
upstreams: [`+strings.Join(ups, ", ")+`]
admin: {listen: ""}
dial_timeout: 2s
clients:
  classes:
    - {name: critical, tier: 0, match: {application_names: [critical]}}
    - {name: batch, tier: 5, match: {application_names: [batch]}}
shedding:
  enabled: true
  short_window: 100ms
  long_window: 2s
  min_samples: 1
  update_every: 1h
`+extra)
	clock := new(atomic.Int64)
	clock.Store(int64(time.Hour))
	p, err := New(cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{legsSnapshot(t)}), WithRing(ring),
		func(p *Proxy) { p.elapsed = clock.Load })
	if err != nil {
		t.Fatal(err)
	}
	return &shedRouted{p: p, addr: servedOn(t, p), clock: clock}
}

// advance moves the proxy's clock on by d.
func (sr *shedRouted) advance(d time.Duration) { sr.clock.Add(int64(d)) }

// overload has the controller of the node at addr, as the ring names it,
// shed tier 5 entirely, as after a confirmed overload: it is fed a slow
// reading on a timeline of its own, far past the proxy's clock, so that
// nothing the proxy does moves it back.
func (sr *shedRouted) overload(t *testing.T, addr string) {
	t.Helper()
	ctl := sr.p.shedding.node(addr).ctl
	slow := shed.Reading{Ratio: 0.1, Short: time.Second, OK: true}
	at := int64(1) << 60
	for i := 0; ctl.Fraction(5) < 1; i++ {
		if i > 1000 {
			t.Fatalf("tier 5 is %v shed after %d updates", ctl.Fraction(5), i)
		}
		ctl.Update(at, slow, false)
		at += int64(100 * time.Millisecond)
	}
	if f := ctl.Fraction(1); f > 1e-6 {
		t.Fatalf("tier 1 is %v shed too", f)
	}
}

// tokenRing places each partition whose token it lists on its nodes, and
// every other on rest.
type tokenRing struct {
	nodes map[int64][]string
	rest  []string
}

func (r tokenRing) Replicas(dst []string, keyspace string, token int64) []string {
	if n, ok := r.nodes[token]; ok {
		return append(dst, n...)
	}
	return append(dst, r.rest...)
}

// keyToken is the token of bench.kv's partition k.
func keyToken(k int) int64 { return tokenOf(binary.BigEndian.AppendUint64(nil, uint64(k))) }

// hostAddr is addr, an IP address and port, with localhost for its IP.
func hostAddr(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("localhost", port)
}

// shedOrNot sends f on c and reports whether it was shed: answered
// Overloaded naming node as the slow one. Any other error fails the test.
func shedOrNot(t *testing.T, c *stubClient, f []byte, node string) bool {
	t.Helper()
	h, _ := frame.ParseHeader(f)
	c.write(f)
	stream, op, msg, err := c.nextOp()
	switch {
	case err != nil || stream != h.Stream:
		t.Fatalf("answer on stream %d, %v; want stream %d", stream, err, h.Stream)
	case op == frame.OpResult:
		return false
	case strings.HasPrefix(msg, fmt.Sprintf("%#x ", frame.ErrCodeOverloaded)) && strings.Contains(msg, "while the node "+node+" is slow"):
		return true
	}
	t.Fatalf("answered %s %q on stream %d", op, msg, stream)
	return false
}

// With three nodes, one of them slow, a request is shed only when the node
// it runs on is the slow one: a request routed to a healthy replica is not
// shed for its connection's first node being slow, nor for another node;
// a request without a partition runs on its connection's first node and is
// judged there. However the upstreams are named: by address, or by a host
// name, where the ring names the same nodes by address.
func TestShedJudgesTheNodeARequestRunsOn(t *testing.T) {
	t.Parallel()
	for _, named := range []string{"address", "host name"} {
		t.Run(named, func(t *testing.T) {
			t.Parallel()
			a, b, c := startLegNode(t), startLegNode(t), startLegNode(t)
			// Keys 1, 2 and 3 live on a, b and c alone.
			ring := tokenRing{nodes: map[int64][]string{
				keyToken(1): {a.addr()}, keyToken(2): {b.addr()}, keyToken(3): {c.addr()},
			}}
			ups := []string{a.addr(), b.addr()}
			if named == "host name" {
				ups = []string{hostAddr(t, a.addr()), hostAddr(t, b.addr())}
			}
			sr := startShedRouted(t, ups, ring, "")
			// Connections spread over the upstreams: one begins with a,
			// one with b.
			first := map[string]*stubClient{}
			var known []*session
			for len(first) < 2 {
				cl := dialApp(t, sr.addr, "batch")
				s := newestSession(t, sr.p, known...)
				known = append(known, s)
				first[s.up.at] = cl
			}
			crit := dialApp(t, sr.addr, "critical")
			slow := b.addr()
			sr.overload(t, slow)
			for _, tc := range []struct {
				name  string
				first string // the connection's first node
				f     []byte
				shed  bool
			}{
				{"first node slow, read routed to a healthy one", b.addr(), readKV(1, "bench.kv", 1), false},
				{"first node slow, read routed to another healthy one", b.addr(), readKV(2, "bench.kv", 3), false},
				{"first node slow, read routed to it", b.addr(), readKV(3, "bench.kv", 2), true},
				{"first node slow, a scan there", b.addr(), stubQuery(4, "SELECT v FROM bench.kv"), true},
				{"another node slow, read routed to the first", a.addr(), readKV(1, "bench.kv", 1), false},
				{"another node slow, read routed to a third", a.addr(), readKV(2, "bench.kv", 3), false},
				{"another node slow, read routed to it", a.addr(), readKV(3, "bench.kv", 2), true},
				{"another node slow, a scan on the first", a.addr(), stubQuery(4, "SELECT v FROM bench.kv"), false},
			} {
				if got := shedOrNot(t, first[tc.first], tc.f, slow); got != tc.shed {
					t.Errorf("%s: shed %v, want %v", tc.name, got, tc.shed)
				}
			}
			if shedOrNot(t, crit, readKV(1, "bench.kv", 2), slow) {
				t.Error("a tier 0 read shed")
			}
			// Routing and shedding know each node by one name, the ring's:
			// what the connections' first nodes ran counts there too.
			var names []string
			for addr := range *sr.p.loads.m.Load() {
				names = append(names, addr)
			}
			sr.p.shedding.mu.Lock()
			for addr := range sr.p.shedding.nodes {
				names = append(names, addr)
			}
			sr.p.shedding.mu.Unlock()
			for _, addr := range names {
				if addr != a.addr() && addr != b.addr() && addr != c.addr() {
					t.Errorf("routing or shedding knows a node as %s", addr)
				}
			}
		})
	}
}

// nodeLatency returns what routing and shedding learned of the latency
// of the node at addr to tier: routing's peak-sensitive latency, and
// shedding's short-term quantile of the tier (0 before any answer).
func (sr *shedRouted) nodeLatency(addr string, tier int) (routing, shedding time.Duration) {
	routing = time.Duration(sr.p.loads.of(addr).latency.Load())
	if l := sr.p.shedding.node(addr).latency[tier].Load(); l != nil {
		shedding, _, _ = l.Quantiles(sr.clock.Load())
	}
	return routing, shedding
}

// What the proxy waits for before it sends a routed request to its
// replica, the connection there opened and logged in, the session's
// keyspace taken there, the statement prepared there, is not the node's
// latency in answering the request: neither routing nor shedding learns
// it as such. (Each is a round trip or more to the node, and a login
// with a password hash many: every new client connection's first
// requests to each node, or a node's first after it returned, would
// make it look slow.)
func TestRoutedLatencyIsTheNodes(t *testing.T) {
	t.Parallel()
	const stmt = "SELECT v FROM bench.kv WHERE k = 7"
	for _, tc := range []struct {
		name string
		// prepare readies the session for the request, and holds what
		// the proxy will ask b before sending it; send sends it.
		prepare func(t *testing.T, cl *stubClient, b *legNode) (send []byte)
	}{
		{"connection opened", func(t *testing.T, cl *stubClient, b *legNode) []byte {
			b.set(func(n *legNode) { n.holdStartup = true })
			return readKV(3, "bench.kv", 1)
		}},
		{"keyspace taken", func(t *testing.T, cl *stubClient, b *legNode) []byte {
			cl.answered(readKV(1, "bench.kv", 1), 1) // opens the connection to b
			cl.answered(stubQuery(2, "USE other"), 2)
			b.set(func(n *legNode) { n.hold = "USE" })
			return readKV(3, "kv", 1)
		}},
		{"statement prepared", func(t *testing.T, cl *stubClient, b *legNode) []byte {
			cl.answered(readKV(1, "bench.kv", 1), 1)
			id := cl.prepared(2, stmt)
			b.set(func(n *legNode) { n.hold = "k = 7" })
			return executeFrame(3, id)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, b := startLegNode(t), startLegNode(t)
			sr := startShedRouted(t, []string{a.addr()}, fixedRing{b.addr()}, "")
			cl := dialApp(t, sr.addr, "batch")
			cl.write(tc.prepare(t, cl, b))
			b.waitHeld(t, 1)
			sr.advance(time.Second) // how long b takes to answer what the proxy asked
			b.release()
			cl.wantResult(3)
			routing, shedding := sr.nodeLatency(b.addr(), 5)
			if routing >= time.Second || shedding >= time.Second {
				t.Errorf("b's latency %v to routing, %v to shedding; it answered the request at once", routing, shedding)
			}
		})
	}
}

// A request that waits on the session's first connection for its stream
// to be free there, a hedged read's other copy still awaited on it, is
// timed from when it is sent: the node answered it at once.
func TestLeftoverWaitIsNotTheNodes(t *testing.T) {
	t.Parallel()
	up, c := startLegNode(t), startLegNode(t)
	sr := startShedRouted(t, []string{up.addr()}, listRing{up.addr(), c.addr()}, "routing: {hedge_after: 1ms}\n")
	cl := dialApp(t, sr.addr, "batch")
	prefer(sr.p, c.addr(), up.addr())
	cl.answered(readKV(1, "bench.kv", 1), 1) // opens the connection to c
	up.set(func(n *legNode) { n.hold = "k = 5" })
	prefer(sr.p, up.addr(), c.addr())
	cl.write(readKV(1, "bench.kv", 5))
	up.waitHeld(t, 1)
	sr.advance(10 * time.Millisecond) // past hedge_after: c answers the hedge
	cl.wantResult(1)
	cl.write(stubQuery(1, scan))
	s := onlySession(t, sr.p)
	waitUntil(t, "the scan waiting", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.leftoverWait
	})
	sr.advance(time.Second)
	up.release()
	cl.wantResult(1)
	// The leftover's own second is up's, and routing's and shedding's
	// to learn (hedge.go); the histogram has only the client's answers.
	var d dto.Metric
	if err := sr.p.metrics.upstreamLatency.Write(&d); err != nil {
		t.Fatal(err)
	}
	if sum := d.GetHistogram().GetSampleSum(); sum >= 0.5 {
		t.Errorf("the client's answers timed at %v s in all; want about 0: the scan was answered at once", sum)
	}
}

// The copy of a hedged read answered second is its node's answer, however
// late: shedding learns its latency as routing does, so that a node whose
// slow answers are hedged away does not look to shedding as fast as the
// answers it gave first.
func TestLeftoverLatencyIsLearned(t *testing.T) {
	t.Parallel()
	for _, late := range []string{"first copy", "hedge"} {
		t.Run(late, func(t *testing.T) {
			t.Parallel()
			up, b, c := startLegNode(t), startLegNode(t), startLegNode(t)
			sr := startShedRouted(t, []string{up.addr()}, listRing{b.addr(), c.addr()}, "routing: {hedge_after: 1ms}\n")
			cl := dialApp(t, sr.addr, "batch")
			warmLegs(t, sr.p, cl, b, c)
			for _, n := range []*legNode{b, c} {
				n.set(func(n *legNode) { n.hold = "k = 5" })
			}
			prefer(sr.p, b.addr(), c.addr())
			cl.write(readKV(1, "bench.kv", 5))
			b.waitHeld(t, 1)
			sr.advance(10 * time.Millisecond) // past hedge_after: hedged to c
			c.waitHeld(t, 1)
			first, second := c, b
			if late == "hedge" {
				first, second = b, c
			}
			first.release()
			cl.wantResult(1)
			sr.advance(time.Second)
			second.release()
			s := onlySession(t, sr.p)
			waitUntil(t, "the copy answered second", func() bool { return s.leftoversNow() == 0 })
			routing, shedding := sr.nodeLatency(second.addr(), 5)
			// Shedding's quantiles are within 1/64 of the latency.
			if routing < 900*time.Millisecond || shedding < 900*time.Millisecond {
				t.Errorf("the node that answered a copy a second late: latency %v to routing, %v to shedding; want both about 1s", routing, shedding)
			}
		})
	}
}

// A request whose chosen replica sheds its tier runs on another replica
// that does not, rather than being shed: shedding refuses it only when
// every replica that could run it is shedding its tier. Routing may well
// choose the slow one: it tries a node again by its best latency once it
// has not answered for half a second, and a request shed there reaches
// it no more than it teaches routing anything, so that every request of
// the tier would be chosen there, and shed, while another replica was
// idle.
func TestShedRoutesAroundASheddingReplica(t *testing.T) {
	t.Parallel()
	up, b, c := startLegNode(t), startLegNode(t), startLegNode(t)
	sr := startShedRouted(t, []string{up.addr()}, listRing{b.addr(), c.addr()}, "")
	cl := dialApp(t, sr.addr, "batch")
	warmLegs(t, sr.p, cl, b, c)
	crit := dialApp(t, sr.addr, "critical")
	sr.overload(t, b.addr())
	prefer(sr.p, b.addr(), c.addr())
	for k := 10; k < 15; k++ {
		if shedOrNot(t, cl, readKV(int16(k), "bench.kv", k), b.addr()) {
			t.Fatalf("read %d shed, though its replica c sheds nothing", k)
		}
		if q := fmt.Sprintf("SELECT v FROM bench.kv WHERE k = %d", k); !ranQuery(c, q) || ranQuery(b, q) {
			t.Errorf("read %d did not run on c alone", k)
		}
	}
	// A tier that is not shed goes where routing sends it.
	crit.answered(readKV(1, "bench.kv", 20), 1)
	if !ranQuery(b, "SELECT v FROM bench.kv WHERE k = 20") {
		t.Error("a tier 0 read did not run on the replica routing chose")
	}
	// Both replicas shedding the tier: it is shed, by the one routing chose.
	sr.overload(t, c.addr())
	if !shedOrNot(t, cl, readKV(1, "bench.kv", 21), b.addr()) {
		t.Error("a read of a tier both replicas shed was not shed")
	}
}

// A read is not hedged to a replica that is shedding its tier: the copy
// would be a request of that tier to that node, which shedding refuses.
// A tier it does not shed is hedged there as before.
func TestHedgeNotToASheddingReplica(t *testing.T) {
	t.Parallel()
	up, b, c := startLegNode(t), startLegNode(t), startLegNode(t)
	sr := startShedRouted(t, []string{up.addr()}, listRing{b.addr(), c.addr()}, "routing: {hedge_after: 1ms}\n")
	var known []*session
	for i, tc := range []struct {
		app   string
		hedge bool
	}{{"batch", false}, {"critical", true}} {
		cl := dialApp(t, sr.addr, tc.app)
		s := newestSession(t, sr.p, known...)
		known = append(known, s)
		// Connections to both replicas, then b shedding tier 5 and c
		// holding the read.
		prefer(sr.p, b.addr(), c.addr())
		cl.answered(readKV(1, "bench.kv", 1), 1)
		prefer(sr.p, c.addr(), b.addr())
		cl.answered(readKV(2, "bench.kv", 2), 2)
		sr.overload(t, b.addr())
		c.set(func(n *legNode) { n.hold = "k = 5" })
		cl.write(readKV(3, "bench.kv", 5))
		c.waitHeld(t, i+1)
		s.mu.Lock()
		r := s.streams.lookup(3)
		hedgeTo := r != nil && r.hedgeTo != nil && r.hedgeTo.at == b.addr()
		s.mu.Unlock()
		if hedgeTo != tc.hedge {
			t.Errorf("%s: read hedged to b, which sheds tier 5: %v, want %v", tc.app, hedgeTo, tc.hedge)
		}
		c.release()
		cl.wantResult(3)
	}
}

// A client that stops reading its answers, its reads spread over two
// replicas, makes neither look slow: the answers that waited in the
// replicas' sockets for it are not timed as the nodes' latency, by routing
// nor by shedding, so that its neighbours of its tier are not shed for it;
// nor are the answers to the requests in flight meanwhile that the node
// sends only once the client reads again (a node answers in turn, and
// waits for room in its socket as the proxy does: here, one it holds until
// then), however soon the response path has caught up by then.
func TestNotReadingIsNotTheReplicasSlowing(t *testing.T) {
	t.Parallel()
	up, b, c := startLegNode(t), startLegNode(t), startLegNode(t)
	for _, n := range []*legNode{b, c} {
		n.set(func(n *legNode) { n.bigResult = 256 << 10 })
	}
	b.set(func(n *legNode) { n.hold = "held" })
	sr := startShedRouted(t, []string{up.addr()}, splitRing{b.addr(), c.addr()}, "max_buffered_bytes: 1048576\n")
	cl := dialApp(t, sr.addr, "batch")
	s := onlySession(t, sr.p)
	const reads = 64 // 16 MiB of answers
	pipeline := stubQuery(reads, fmt.Sprintf("SELECT big FROM bench.kv WHERE k = %d -- held", keyOn(true)))
	for i := range reads - 1 {
		pipeline = append(pipeline, stubQuery(int16(1+i), fmt.Sprintf("SELECT big FROM bench.kv WHERE k = %d", i))...)
	}
	cl.write(pipeline)
	b.waitHeld(t, 1)
	waitUntil(t, "the client's answers waiting for it", func() bool { return s.clientWaits.Load() > 0 })
	sr.advance(time.Second) // how long the client holds its answers
	for range reads - 1 {
		if _, h, err := cl.r.Next(); err != nil || h.Opcode != frame.OpResult {
			t.Fatalf("answer %s, %v", h.Opcode, err)
		}
	}
	waitUntil(t, "both replicas' answers read", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, u := range s.legs {
			if !u.waiting.Load() {
				return false
			}
		}
		return len(s.legs) == 2
	})
	b.release()
	cl.wantResult(reads)
	for _, n := range []*legNode{b, c} {
		if _, ran := n.count(); len(ran) == 0 {
			t.Fatalf("node %s ran no read", n.addr())
		}
		routing, shedding := sr.nodeLatency(n.addr(), 5)
		if routing >= 500*time.Millisecond || shedding >= 500*time.Millisecond {
			t.Errorf("node %s: latency %v to routing, %v to shedding, after a client held its answers for 1 s", n.addr(), routing, shedding)
		}
	}
}

// A replica lost while it sheds a tier: the requests routed elsewhere
// meanwhile are judged there, and not shed; once it is back, its shedding
// is where it was (it falls only as its controller's updates say), the
// tier it sheds goes on running on the other replica, and its connections
// opened again, a slow login included, do not make it look slow.
func TestShedReplicaLostAndBack(t *testing.T) {
	t.Parallel()
	up, b, c := startLegNode(t), startLegNode(t), startLegNode(t)
	sr := startShedRouted(t, []string{up.addr()}, listRing{b.addr(), c.addr()}, "")
	cl := dialApp(t, sr.addr, "batch")
	warmLegs(t, sr.p, cl, b, c)
	s := onlySession(t, sr.p)
	crit := dialApp(t, sr.addr, "critical")
	sr.overload(t, b.addr())
	before := sr.p.shedding.node(b.addr()).ctl.Pressure()

	b.drop()
	waitUntil(t, "b lost", func() bool { return s.legsNow() == 1 })
	prefer(sr.p, b.addr(), c.addr())
	for k := 10; k < 13; k++ {
		crit.answered(readKV(int16(k), "bench.kv", k), int16(k))
		if shedOrNot(t, cl, readKV(int16(k), "bench.kv", k), b.addr()) {
			t.Errorf("read %d shed while b, which sheds its tier, was lost", k)
		}
		if q := fmt.Sprintf("SELECT v FROM bench.kv WHERE k = %d", k); ranQuery(b, q) || !ranQuery(c, q) {
			t.Errorf("read %d did not run on c alone", k)
		}
	}

	// Back, after the time a node that could not be reached is avoided:
	// a tier 0 read opens a connection to it again, whose login takes a
	// second.
	sr.advance(time.Duration(nodeRetry) + time.Millisecond)
	prefer(sr.p, b.addr(), c.addr())
	b.set(func(n *legNode) { n.holdStartup = true })
	crit.write(readKV(1, "bench.kv", 20))
	b.waitHeld(t, 1)
	sr.advance(time.Second)
	b.release()
	crit.wantResult(1)
	if !ranQuery(b, "SELECT v FROM bench.kv WHERE k = 20") {
		t.Fatal("the tier 0 read did not run on b once it was back")
	}
	if routing, shedding := sr.nodeLatency(b.addr(), 0); routing >= time.Second || shedding >= time.Second {
		t.Errorf("b back: latency %v to routing, %v to shedding; it answered at once", routing, shedding)
	}
	if p := sr.p.shedding.node(b.addr()).ctl.Pressure(); p != before {
		t.Errorf("b's shedding pressure %v once back, %v before it was lost", p, before)
	}
	if shedOrNot(t, cl, readKV(2, "bench.kv", 21), b.addr()) || !ranQuery(c, "SELECT v FROM bench.kv WHERE k = 21") {
		t.Error("a batch read did not run on c while b, back, sheds its tier")
	}
}

// Hot reads served from the cache, or by joining an identical read in
// flight, never reached a node: they teach neither routing nor shedding
// anything of its latency. A slow node whose answers many reads share does
// not look to either as fast as the reads served meanwhile.
func TestHotReadsAreNotTheNodes(t *testing.T) {
	t.Parallel()
	up, b := startLegNode(t), startLegNode(t)
	sr := startShedRouted(t, []string{up.addr()}, fixedRing{b.addr()}, `hot_reads:
  max_wait: 1m
  keyspaces:
    bench:
      tables:
        kv: {coalesce: true, cache_ttl: 10s, hot_rate: 0}
`)
	served := func(outcome string) float64 {
		return metricValue(t, sr.p.hotReads.served.WithLabelValues("bench", "kv", outcome))
	}
	lead, follow := dialApp(t, sr.addr, "batch"), dialApp(t, sr.addr, "batch")
	b.set(func(n *legNode) { n.hold = "k = 5" })
	lead.write(readKV(1, "bench.kv", 5))
	b.waitHeld(t, 1)
	follow.write(readKV(1, "bench.kv", 5))
	waitUntil(t, "the second read joined the first", func() bool { return served("coalesced") == 1 })
	sr.advance(time.Second) // how long b takes to answer
	b.release()
	lead.wantResult(1)
	follow.wantResult(1)
	for i := range 20 {
		follow.answered(readKV(int16(2+i), "bench.kv", 5), int16(2+i))
	}
	if n := served("cached"); n != 20 {
		t.Fatalf("%v reads served from the cache, want 20", n)
	}
	if _, ran := b.count(); len(ran) != 1 {
		t.Fatalf("b ran %d reads, want 1", len(ran))
	}
	// One answer of b's, a second late: a quantile over it and twenty-one
	// reads served at once would be theirs.
	if routing, shedding := sr.nodeLatency(b.addr(), 5); routing < 900*time.Millisecond || shedding < 900*time.Millisecond {
		t.Errorf("b answered its one read a second late: latency %v to routing, %v to shedding", routing, shedding)
	}
}
