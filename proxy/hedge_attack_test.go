package proxy

import "testing"

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
