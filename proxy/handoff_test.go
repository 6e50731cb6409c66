package proxy

import (
	"testing"
)

// A response path that leaves its write to the client to another (handoff.go)
// never makes its answers wait on that other path's node: here one node
// answers while the other stops part way through an answer, both at once,
// and the first node's answer reaches the client while the second's is
// still incomplete, round after round.
func TestHandOffNodeMidFrame(t *testing.T) {
	t.Parallel()
	up, b, c := startLegNode(t), startLegNode(t), startLegNode(t)
	_, addr, _ := startLegsProxy(t, up.addr(), splitRing{low: b.addr(), high: c.addr()}, nil)
	low, high := keyOn(true), keyOn(false)
	for round := range 40 {
		cl := dialStub(t, addr)
		// Open the connections to both nodes.
		cl.answered(readKV(1, "bench.kv", low), 1)
		cl.answered(readKV(2, "bench.kv", high), 2)
		b.set(func(n *legNode) { n.hold = "WHERE k =" })
		c.set(func(n *legNode) { n.hold = "WHERE k =" })
		cl.write(append(readKV(3, "bench.kv", low), readKV(4, "bench.kv", high)...))
		b.waitHeld(t, round+1)
		c.waitHeld(t, round+1)
		b.set(func(n *legNode) { n.split = true })
		c.release()
		b.release()
		// c's answer, while b's is half written.
		cl.wantResult(4)
		b.finish()
		cl.wantResult(3)
		cl.c.Close()
	}
}
