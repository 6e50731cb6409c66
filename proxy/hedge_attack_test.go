package proxy

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
)

// Regression tests for what an attacker found where hedged reads
// (hedge.go) meet the proxy's other features.

// A request that must run on the session's first connection, on a stream
// a hedged read's copy still holds there, waits for the node to answer the
// copy: it is in flight all the same, and Shutdown answers it before it
// closes the connection.
func TestHedgedLeftoverWaitDrained(t *testing.T) {
	t.Parallel()
	lw := startLeftoverWait(t)
	s := onlySession(t, lw.p)
	done := shutdownInBackground(t, lw.p, lw.shutdown)
	// The session itself draining, with the scan waiting in it.
	waitUntil(t, "the session draining", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.draining
	})
	lw.up.release()
	lw.cl.wantResult(1)
	if !ranQuery(lw.up, scan) {
		t.Error("the scan did not run")
	}
	if err := <-done; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// A client that stops reading while its reads are due to be hedged harms
// only itself: the hedge timer's scan passes over its reads without
// waiting on its connection, hedging none of them (their answers would
// wait anyway), what the session keeps for them is bounded by what it has
// in flight, another client's reads, hedged too, are answered meanwhile,
// and once the client reads again it gets every answer once, a read both
// of whose copies were answered too.
func TestHedgedReadsClientNotReading(t *testing.T) {
	t.Parallel()
	const perConn = 64
	up, b, c := startLegNode(t), startLegNode(t), startLegNode(t)
	p, addr, _ := startLegsProxy(t, up.addr(), listRing{b.addr(), c.addr()}, func(cfg *config.Config) {
		cfg.Routing.HedgeAfter = config.Duration(time.Millisecond)
		cfg.MaxBufferedBytes = 64 << 10
		cfg.MaxInFlightPerConnection = perConn
	})
	a := dialStub(t, addr)
	warmLegs(t, p, a, b, c)
	s := onlySession(t, p)
	// The socket buffers between the proxy and the client hold less than
	// one large answer.
	const big = 256 << 10
	if err := a.c.(*net.TCPConn).SetReadBuffer(16 << 10); err != nil {
		t.Fatal(err)
	}
	if err := s.client.(*net.TCPConn).SetWriteBuffer(16 << 10); err != nil {
		t.Fatal(err)
	}
	other := dialStub(t, addr)
	prefer(p, b.addr(), c.addr())
	other.answered(readKV(1, "bench.kv", 1), 1)
	prefer(p, c.addr(), b.addr())
	other.answered(readKV(2, "bench.kv", 2), 2)

	// A read hedged before the client stops reading, both copies held.
	b.set(func(n *legNode) { n.hold = "held"; n.bigResult = big })
	c.set(func(n *legNode) { n.hold = "k = 5"; n.bigResult = big })
	prefer(p, b.addr(), c.addr())
	a.write(stubQuery(1, "SELECT held FROM bench.kv WHERE k = 5"))
	b.waitHeld(t, 1)
	c.waitHeld(t, 1)

	// The client stops reading: large answers it does not read fill its
	// writer.
	want := map[int16]bool{1: true}
	prefer(p, c.addr(), b.addr())
	for i := range 8 {
		stream := int16(100 + i)
		a.write(stubQuery(stream, fmt.Sprintf("SELECT big FROM bench.kv WHERE k = %d", 1000+i)))
		want[stream] = true
	}
	// A large answer written into socket buffers smaller than it is never
	// done until the client reads: the writer waits from now on.
	waitUntil(t, "the client's writer to wait", func() bool {
		return s.clientWaiting() && s.toClient.Held() >= big
	})

	// Reads due to be hedged meanwhile, and more than the connection may
	// have in flight.
	sent := testutil.ToFloat64(p.metrics.hedges)
	prefer(p, b.addr(), c.addr())
	var reads []byte
	for i := range perConn {
		stream := int16(200 + i)
		reads = append(reads, stubQuery(stream, fmt.Sprintf("SELECT held FROM bench.kv WHERE k = %d", 2000+i))...)
		want[stream] = true
	}
	a.write(reads)
	b.waitHeld(t, 2)
	waitUntil(t, "the hedge timer to pass over the reads due", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		due := false
		s.streams.each(func(_ int16, r request) { due = due || r.hedgeTo != nil })
		return !due && s.streams.inflight == perConn
	})
	if n := testutil.ToFloat64(p.metrics.hedges) - sent; n != 0 {
		t.Errorf("%v reads hedged for a client not reading", n)
	}
	s.mu.Lock()
	kept, inflight, leftovers := 0, s.streams.inflight, len(s.up.leftovers)
	s.streams.each(func(_ int16, r request) {
		if r.resend != nil {
			kept++
		}
	})
	for _, u := range s.legs {
		leftovers += len(u.leftovers)
	}
	s.mu.Unlock()
	if inflight > perConn || kept > inflight || leftovers > maxLeftovers {
		t.Errorf("%d requests in flight, %d copies kept, %d leftovers; want at most %d, %d, %d",
			inflight, kept, leftovers, perConn, inflight, maxLeftovers)
	}

	// Another client's read, hedged away from b, is answered meanwhile.
	prefer(p, b.addr(), c.addr())
	won := testutil.ToFloat64(p.metrics.hedgesWon)
	other.answered(stubQuery(3, "SELECT held FROM bench.kv WHERE k = 3000"), 3)
	if testutil.ToFloat64(p.metrics.hedgesWon) == won {
		t.Error("the other client's read was not hedged")
	}
	if !s.clientWaiting() {
		t.Fatal("the client read meanwhile: the test shows nothing")
	}

	// The client reads again, and the nodes answer what they held: on
	// goroutines of their own, as their writes wait for the proxy to read
	// them, which waits for the client.
	released := make(chan struct{})
	go func() {
		b.release()
		c.release()
		close(released)
	}()
	got := map[int16]int{}
	for range want {
		stream, op, msg, err := a.nextOp()
		if err != nil || op != frame.OpResult {
			t.Fatalf("want a RESULT, got %s %q on stream %d, %v", op, msg, stream, err)
		}
		got[stream]++
	}
	for stream := range want {
		if got[stream] != 1 {
			t.Errorf("stream %d answered %d times", stream, got[stream])
		}
	}
	<-released
	waitUntil(t, "no copies awaited", func() bool { return s.leftoversNow() == 0 })
	// Nothing more comes: the next answer is to the next request.
	prefer(p, c.addr(), b.addr())
	a.answered(readKV(4, "bench.kv", 4), 4)
	if n := testutil.ToFloat64(p.metrics.protocolErrors.WithLabelValues("stray_response")); n != 0 {
		t.Errorf("%v stray responses", n)
	}
}

// sessionsEnded waits until p has no session left: each has ended, its
// response paths with it (session.run).
func sessionsEnded(t *testing.T, p *Proxy) {
	t.Helper()
	waitUntil(t, "the sessions to end", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.sessions) == 0
	})
}

// wantNoTrace checks that s, ended, left no hedge timer set, and that the
// nodes count none of its requests in flight.
func wantNoTrace(t *testing.T, p *Proxy, s *session, nodes ...*legNode) {
	t.Helper()
	s.mu.Lock()
	armed := s.hedgeArmed
	stopped := s.hedgeTimer == nil || !s.hedgeTimer.Stop()
	s.mu.Unlock()
	if armed || !stopped {
		t.Errorf("the hedge timer of a session that ended is set (armed %t)", armed)
	}
	for _, n := range nodes {
		if in := p.loads.of(n.addr()).inflight.Load(); in != 0 {
			t.Errorf("node %s has %d requests in flight, want 0", n.addr(), in)
		}
	}
}

// A client that leaves while its request waits for a hedged read's copy
// on the session's first connection ends its session once the node
// answers the copy, or once upstream_timeout gives up on the node: the
// request path waiting does not read the client, which it finds gone
// after. The copy's answer reaches nobody, and the nodes count nothing of
// the session's in flight.
func TestHedgedLeftoverWaitClientLeaves(t *testing.T) {
	t.Parallel()
	for _, answered := range []bool{true, false} {
		t.Run(fmt.Sprintf("answered %t", answered), func(t *testing.T) {
			t.Parallel()
			lw := startLeftoverWait(t, func(cfg *config.Config) {
				if !answered {
					cfg.UpstreamTimeout = config.Duration(100 * time.Millisecond)
				}
			})
			s := onlySession(t, lw.p)
			lw.cl.c.Close()
			if answered {
				lw.up.release()
			}
			sessionsEnded(t, lw.p)
			wantNoTrace(t, lw.p, s, lw.up, lw.c)
			if n := testutil.ToFloat64(lw.p.metrics.protocolErrors.WithLabelValues("stray_response")); n != 0 {
				t.Errorf("%v stray responses", n)
			}
			if !answered {
				lw.up.release() // to a connection closed
			}
		})
	}
}

// A client that abandons a pipeline of reads, some of them hedged, both
// copies held, and others not due yet, leaves nothing behind: its session
// ends at once, without waiting for the nodes, writes it nothing more, sets
// no hedge timer, and the nodes count none of its reads in flight; what
// they answer later reaches nobody.
func TestHedgedPipelineAbandoned(t *testing.T) {
	t.Parallel()
	for _, after := range []time.Duration{time.Millisecond, time.Hour} {
		t.Run(fmt.Sprintf("hedge_after %s", after), func(t *testing.T) {
			t.Parallel()
			up, b, c := startLegNode(t), startLegNode(t), startLegNode(t)
			p, addr, _ := startLegsProxy(t, up.addr(), listRing{b.addr(), c.addr()}, hedgeAfter(after))
			cl := dialStub(t, addr)
			if after < time.Second {
				warmLegs(t, p, cl, b, c)
			} else {
				// Nothing is hedged an hour later: the legs open
				// without waiting for it.
				prefer(p, b.addr(), c.addr())
				cl.answered(readKV(1, "bench.kv", 1), 1)
				prefer(p, c.addr(), b.addr())
				cl.answered(readKV(2, "bench.kv", 2), 2)
			}
			s := onlySession(t, p)
			for _, n := range []*legNode{b, c} {
				n.set(func(n *legNode) { n.hold = "held" })
			}
			sent := testutil.ToFloat64(p.metrics.hedges)
			prefer(p, b.addr(), c.addr())
			const reads = 2 * hedgeBurst
			var pipeline []byte
			for i := range reads {
				pipeline = append(pipeline, stubQuery(int16(10+i), fmt.Sprintf("SELECT held FROM bench.kv WHERE k = %d", 100+i))...)
			}
			cl.write(pipeline)
			b.waitHeld(t, reads)
			if after < time.Second {
				c.waitHeld(t, 1) // a hedge
			}
			waitUntil(t, "the reads in flight", func() bool {
				s.mu.Lock()
				defer s.mu.Unlock()
				return s.streams.inflight == reads
			})
			hedged := testutil.ToFloat64(p.metrics.hedges) - sent
			s.mu.Lock()
			armed := s.hedgeArmed
			s.mu.Unlock()
			t.Logf("%v of %d reads hedged; hedge timer set: %t", hedged, reads, armed)

			// The client is done sending: the session ends, the nodes
			// holding every read.
			if err := cl.c.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			sessionsEnded(t, p)
			wantNoTrace(t, p, s, up, b, c)
			if stream, op, _, err := cl.nextOp(); err == nil {
				t.Errorf("a client that left got %s on stream %d", op, stream)
			}
			b.release()
			c.release()
			if n := testutil.ToFloat64(p.metrics.protocolErrors.WithLabelValues("stray_response")); n != 0 {
				t.Errorf("%v stray responses", n)
			}
		})
	}
}

// A session that closes while its request path still has hedgeable reads
// to forward, read from the client before (its first node lost, here,
// while it waited for room), sets no hedge timer for them: a timer set
// after the session stopped hedging would hold the session until it fired,
// hedge_after later.
func TestHedgeTimerNotSetAfterClose(t *testing.T) {
	t.Parallel()
	up, b, c := startLegNode(t), startLegNode(t), startLegNode(t)
	p, addr, _ := startLegsProxy(t, up.addr(), listRing{b.addr(), c.addr()}, func(cfg *config.Config) {
		cfg.Routing.HedgeAfter = config.Duration(time.Hour)
		cfg.MaxInFlightPerConnection = 2
	})
	cl := dialStub(t, addr)
	prefer(p, b.addr(), c.addr())
	cl.answered(readKV(1, "bench.kv", 1), 1)
	prefer(p, c.addr(), b.addr())
	cl.answered(readKV(2, "bench.kv", 2), 2)
	s := onlySession(t, p)

	b.set(func(n *legNode) { n.hold = "held" })
	prefer(p, b.addr(), c.addr())
	var pipeline []byte
	for i := range 8 {
		pipeline = append(pipeline, stubQuery(int16(10+i), fmt.Sprintf("SELECT held FROM bench.kv WHERE k = %d", 100+i))...)
	}
	cl.write(pipeline)
	b.waitHeld(t, 2)
	waitUntil(t, "the request path to wait for room", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.full
	})
	up.drop()
	sessionsEnded(t, p)
	wantNoTrace(t, p, s, up, b, c)
	b.release()
}

// A request that waits for a hedged read's copy to free its stream on the
// session's first connection does not hold back the requests read before
// it: here a read for another node, in the same write as the waiting scan,
// is answered while the scan still waits.
func TestHedgedLeftoverWaitForwardsWhatCameBefore(t *testing.T) {
	t.Parallel()
	lw := startLeftoverWaitBehind(t, readKV(2, "bench.kv", 7))
	lw.cl.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	lw.cl.wantResult(2)
	lw.up.release()
	lw.cl.wantResult(1)
}
