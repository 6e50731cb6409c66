package proxy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/apache/cassandra-gocql-driver/v2/lz4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

// prefer has routing choose node over others, whatever it has seen of
// them: each of the others looks as slow as can be.
func prefer(p *Proxy, node string, others ...string) {
	now := p.elapsed()
	for _, o := range others {
		l := p.loads.of(o)
		l.latency.Store(1 << 60)
		l.service.Store(1 << 60)
		l.seen.Store(now)
	}
	l := p.loads.of(node)
	l.latency.Store(1000)
	l.service.Store(1000)
	l.seen.Store(now)
}

// hedgeAfter is a configuration edit that hedges reads after d.
func hedgeAfter(d time.Duration) func(*config.Config) {
	return func(cfg *config.Config) { cfg.Routing.HedgeAfter = config.Duration(d) }
}

// warmLegs opens the session's connections to b and c with a read
// routed to each, and waits until neither awaits a hedge's copy: the
// connection's first read waits for it to open, and may be hedged.
func warmLegs(t *testing.T, p *Proxy, cl *stubClient, b, c *legNode) {
	t.Helper()
	prefer(p, b.addr(), c.addr())
	cl.answered(readKV(1, "bench.kv", 1), 1)
	prefer(p, c.addr(), b.addr())
	cl.answered(readKV(2, "bench.kv", 2), 2)
	s := onlySession(t, p)
	waitUntil(t, "no copies awaited", func() bool { return s.leftoversNow() == 0 })
}

// leftovers returns how many hedged copies s's connections still await.
func (s *session) leftoversNow() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.up.leftovers)
	for _, u := range s.legs {
		n += len(u.leftovers)
	}
	return n
}

// ranQuery reports whether the node ran the QUERY text, in no keyspace.
func ranQuery(n *legNode, text string) bool {
	_, ran := n.count()
	return slices.Contains(ran, "|"+text)
}

// A read its replica holds is hedged to the other replica, whose answer
// the client gets; the copy the first replica answers later is dropped,
// and until then its stream, which the client may use again at once, runs
// elsewhere.
func TestHedgedReadAnsweredElsewhere(t *testing.T) {
	t.Parallel()
	up, b, c := startLegNode(t), startLegNode(t), startLegNode(t)
	p, addr, _ := startLegsProxy(t, up.addr(), listRing{b.addr(), c.addr()}, hedgeAfter(time.Millisecond))
	cl := dialStub(t, addr)
	// A connection to each replica, which a read is hedged to only once
	// open.
	warmLegs(t, p, cl, b, c)

	b.set(func(n *legNode) { n.hold = "k = 5" })
	prefer(p, b.addr(), c.addr())
	sent, won := testutil.ToFloat64(p.metrics.hedges), testutil.ToFloat64(p.metrics.hedgesWon)
	cl.answered(readKV(1, "bench.kv", 5), 1)
	b.waitHeld(t, 1)
	if !ranQuery(c, "SELECT v FROM bench.kv WHERE k = 5") {
		t.Error("the read was not hedged to the other replica")
	}
	sent, won = testutil.ToFloat64(p.metrics.hedges)-sent, testutil.ToFloat64(p.metrics.hedgesWon)-won
	if sent != 1 || won != 1 {
		t.Errorf("hedges sent %v, won %v; want 1, 1", sent, won)
	}
	// Stream 1 is busy on b until b answers: a read on it runs on c,
	// though b is preferred.
	cl.answered(readKV(1, "bench.kv", 6), 1)
	if ranQuery(b, "SELECT v FROM bench.kv WHERE k = 6") || !ranQuery(c, "SELECT v FROM bench.kv WHERE k = 6") {
		t.Error("a read on the stream b still held ran on b")
	}
	s := onlySession(t, p)
	if s.leftoversNow() != 1 {
		t.Fatalf("%d copies awaited, want 1", s.leftoversNow())
	}
	b.release()
	waitUntil(t, "b's copy answered", func() bool { return s.leftoversNow() == 0 })
	// b's answer reached nobody: the next answer the client gets is to
	// what it asks next.
	cl.answered(readKV(3, "bench.kv", 7), 3)
	if n := testutil.ToFloat64(p.metrics.protocolErrors.WithLabelValues("stray_response")); n != 0 {
		t.Errorf("%v stray responses", n)
	}
	for _, n := range []*legNode{b, c} {
		if in := p.loads.of(n.addr()).inflight.Load(); in != 0 {
			t.Errorf("node %s has %d requests in flight, want 0", n.addr(), in)
		}
	}
}

// A read hedged away from the session's first connection leaves its copy
// there: a request on its stream that must run there (it has no replica)
// waits for the node's answer to the copy rather than share the stream
// with it.
func TestHedgedReadLeftoverOnFirstConnection(t *testing.T) {
	t.Parallel()
	lw := startLeftoverWait(t)
	p, up, cl := lw.p, lw.up, lw.cl
	if won := testutil.ToFloat64(p.metrics.hedgesWon); won != 1 {
		t.Fatalf("hedges won %v, want 1", won)
	}
	if ranQuery(up, scan) {
		t.Fatal("the scan was sent on the stream the node still held")
	}
	up.release()
	cl.wantResult(1)
	if !ranQuery(up, scan) {
		t.Error("the scan did not run")
	}
	cl.answered(readKV(2, "bench.kv", 7), 2)
}

// A hedged read whose copy is lost with its connection is answered by the
// other copy: the node that ran the first being lost costs the client
// nothing, and neither does the hedge's.
func TestHedgedReadConnectionLost(t *testing.T) {
	t.Parallel()
	for _, lose := range []string{"first", "hedge"} {
		t.Run(lose, func(t *testing.T) {
			t.Parallel()
			up, b, c := startLegNode(t), startLegNode(t), startLegNode(t)
			p, addr, _ := startLegsProxy(t, up.addr(), listRing{b.addr(), c.addr()}, hedgeAfter(time.Millisecond))
			cl := dialStub(t, addr)
			warmLegs(t, p, cl, b, c)

			for _, n := range []*legNode{b, c} {
				n.set(func(n *legNode) { n.hold = "k = 5" })
			}
			prefer(p, b.addr(), c.addr())
			cl.write(readKV(1, "bench.kv", 5))
			b.waitHeld(t, 1)
			c.waitHeld(t, 1)
			lost, kept := b, c
			if lose == "hedge" {
				lost, kept = c, b
			}
			s := onlySession(t, p)
			lost.drop()
			waitUntil(t, "the connection lost", func() bool { return s.legsNow() == 1 })
			kept.release()
			cl.wantResult(1)
			cl.answered(readKV(2, "bench.kv", 7), 2)
		})
	}
}

// Hedging stops at the connection's budget: with one held read after
// another, the first hedgeBurst are hedged, and the rest refused.
func TestHedgeBudget(t *testing.T) {
	t.Parallel()
	up, b, c := startLegNode(t), startLegNode(t), startLegNode(t)
	p, addr, _ := startLegsProxy(t, up.addr(), listRing{b.addr(), c.addr()}, func(cfg *config.Config) {
		cfg.Routing.HedgeAfter = config.Duration(time.Millisecond)
		cfg.Routing.HedgeBudget = 0.01
	})
	cl := dialStub(t, addr)
	warmLegs(t, p, cl, b, c)

	// A read of the warm-up may have been hedged: a connection's first
	// request waits for it to open.
	b.set(func(n *legNode) { n.hold = "k = 5" })
	var held []int16
	for i := 0; len(held) < 3; i++ {
		if i > 2*hedgeBurst {
			t.Fatalf("%d reads hedged, none refused", i)
		}
		prefer(p, b.addr(), c.addr())
		stream := int16(10 + i)
		decided := testutil.ToFloat64(p.metrics.hedges) + testutil.ToFloat64(p.metrics.hedgesRefused)
		sent := testutil.ToFloat64(p.metrics.hedges)
		cl.write(readKV(stream, "bench.kv", 5))
		waitUntil(t, "the read hedged or refused", func() bool {
			return testutil.ToFloat64(p.metrics.hedges)+testutil.ToFloat64(p.metrics.hedgesRefused) > decided
		})
		if testutil.ToFloat64(p.metrics.hedges) > sent {
			cl.wantResult(stream) // c answers
			continue
		}
		if len(held) == 0 {
			if sent := testutil.ToFloat64(p.metrics.hedges); sent != hedgeBurst {
				t.Errorf("refused after %v hedges, want %d", sent, hedgeBurst)
			}
		}
		held = append(held, stream)
	}
	b.release()
	var got []int16
	for range held {
		stream, op, msg, err := cl.nextOp()
		if err != nil || op != frame.OpResult {
			t.Fatalf("want a RESULT, got %s %q, %v", op, msg, err)
		}
		got = append(got, stream)
	}
	slices.Sort(got)
	if !slices.Equal(got, held) {
		t.Errorf("answers on streams %v after the release, want %v", got, held)
	}
}

// Through a driver, in each protocol version and compression: reads whose
// replica is slow are answered by another, and what the slow replica
// answers later is dropped, its streams reused meanwhile.
func TestHedgedReadsDriver(t *testing.T) {
	t.Parallel()
	nodes := startNodes(t, 3, fakenode.Options{})
	cfg := config.Default()
	cfg.Admin.Listen = ""
	cfg.Listen, cfg.Upstreams = "127.0.0.1:0", []string{nodes[0].Addr()}
	cfg.DialTimeout = config.Duration(time.Second)
	cfg.Routing.HedgeAfter = config.Duration(time.Millisecond)
	cfg.Routing.HedgeBudget = 1
	slow, fast := nodes[1].Addr(), nodes[2].Addr()
	p, addr := serveProxy(t, cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{benchSnapshot(t)}), WithRing(listRing{slow, fast}))
	for _, tc := range []struct {
		proto int
		comp  gocql.Compressor
	}{{4, nil}, {4, lz4.LZ4Compressor{}}, {5, nil}, {5, lz4.LZ4Compressor{}}} {
		t.Run(fmt.Sprintf("v%d-lz4=%t", tc.proto, tc.comp != nil), func(t *testing.T) {
			cluster := gocql.NewCluster(addr)
			cluster.ProtoVersion = tc.proto
			cluster.Compressor = tc.comp
			cluster.NumConns = 1
			s, err := cluster.CreateSession()
			if err != nil {
				t.Fatalf("CreateSession: %v", err)
			}
			defer s.Close()
			read := func(k int) {
				t.Helper()
				if err := s.Query("SELECT v FROM bench.kv WHERE k = ?", k).Exec(); err != nil {
					t.Fatalf("read of %d: %v", k, err)
				}
			}
			// Prepared on both replicas.
			prefer(p, slow, fast)
			read(1)
			prefer(p, fast, slow)
			read(2)
			sent, won := testutil.ToFloat64(p.metrics.hedges), testutil.ToFloat64(p.metrics.hedgesWon)
			nodes[1].SetDelay(50 * time.Millisecond)
			const reads = 10
			for k := range reads {
				prefer(p, slow, fast)
				read(k)
			}
			nodes[1].SetDelay(0)
			sent, won = testutil.ToFloat64(p.metrics.hedges)-sent, testutil.ToFloat64(p.metrics.hedgesWon)-won
			if sent < 1 || won != sent {
				t.Errorf("hedges sent %v, won %v: want at least one, all won", sent, won)
			}
			waitUntil(t, "the slow node's answers", func() bool {
				return p.loads.of(slow).inflight.Load() == 0 && p.loads.of(fast).inflight.Load() == 0
			})
		})
	}
	if n := testutil.ToFloat64(p.metrics.protocolErrors.WithLabelValues("stray_response")); n != 0 {
		t.Errorf("%v stray responses", n)
	}
}

// The configuration refuses a negative hedge_after and a budget outside
// (0, 1].
func TestHedgeConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		yaml, want string
	}{
		{"routing: {hedge_after: -1ms}", "hedge_after"},
		{"routing: {hedge_budget: 0}", "hedge_budget"},
		{"routing: {hedge_budget: 1.5}", "hedge_budget"},
	} {
		_, err := config.Parse("cqlguard.yaml", []byte("upstreams: [127.0.0.1:9042]\n"+tc.yaml+"\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %s", tc.yaml, err, tc.want)
		}
	}
}

// leftoverWait is a proxy whose client's scan, on stream 1, waits on the
// session's first connection (up) for the node to answer a hedged read's
// copy there: read on stream 1, held by up, hedged to c, answered by c.
type leftoverWait struct {
	p        *Proxy
	shutdown func(context.Context) error
	up, c    *legNode
	cl       *stubClient
}

// scan is the request leftoverWait's client waits with: it has no
// partition, so it runs on up.
const scan = "SELECT v FROM bench.kv"

func startLeftoverWait(t *testing.T, edits ...func(*config.Config)) leftoverWait {
	t.Helper()
	return startLeftoverWaitBehind(t, nil, edits...)
}

// startLeftoverWaitBehind is startLeftoverWait whose client sends before,
// a request routed to c, in the same write as the scan, ahead of it.
func startLeftoverWaitBehind(t *testing.T, before []byte, edits ...func(*config.Config)) leftoverWait {
	t.Helper()
	up, c := startLegNode(t), startLegNode(t)
	p, addr, shutdown := startLegsProxy(t, up.addr(), listRing{up.addr(), c.addr()}, func(cfg *config.Config) {
		hedgeAfter(time.Millisecond)(cfg)
		for _, edit := range edits {
			edit(cfg)
		}
	})
	cl := dialStub(t, addr)
	prefer(p, c.addr(), up.addr())
	cl.answered(readKV(1, "bench.kv", 1), 1) // opens the connection to c

	up.set(func(n *legNode) { n.hold = "k = 5" })
	prefer(p, up.addr(), c.addr())
	cl.answered(readKV(1, "bench.kv", 5), 1) // c's answer: up holds its copy
	up.waitHeld(t, 1)
	if before != nil {
		prefer(p, c.addr(), up.addr())
	}
	cl.write(append(before, stubQuery(1, scan)...))
	s := onlySession(t, p)
	waitUntil(t, "the scan waiting", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.leftoverWait
	})
	return leftoverWait{p, shutdown, up, c, cl}
}
