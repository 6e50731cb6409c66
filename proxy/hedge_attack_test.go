package proxy

import (
	"context"
	"testing"
	"time"
)

// Regression tests for what an attacker found where hedged reads
// (hedge.go) meet the proxy's other features.

// A request that must run on the session's first connection, on a stream
// a hedged read's copy still holds there, waits for the node to answer the
// copy: it is in flight all the same, and Shutdown answers it before it
// closes the connection.
func TestHedgedLeftoverWaitDrained(t *testing.T) {
	t.Parallel()
	up, c := startLegNode(t), startLegNode(t)
	p, addr, shutdown := startLegsProxy(t, up.addr(), listRing{up.addr(), c.addr()}, hedgeAfter(time.Millisecond))
	cl := dialStub(t, addr)
	cl.c.SetDeadline(time.Now().Add(10 * time.Second))
	prefer(p, c.addr(), up.addr())
	cl.answered(readKV(1, "bench.kv", 1), 1) // opens the connection to c

	up.set(func(n *legNode) { n.hold = "k = 5" })
	prefer(p, up.addr(), c.addr())
	cl.answered(readKV(1, "bench.kv", 5), 1) // c's answer: up holds its copy
	up.waitHeld(t, 1)
	const scan = "SELECT v FROM bench.kv"
	cl.write(stubQuery(1, scan))
	s := onlySession(t, p)
	waitUntil(t, "the scan waiting", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.leftoverWait
	})

	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- shutdown(ctx)
	}()
	waitUntil(t, "draining", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.draining
	})
	up.release()
	cl.wantResult(1)
	if !ranQuery(up, scan) {
		t.Error("the scan did not run")
	}
	if err := <-done; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}
