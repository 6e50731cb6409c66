package proxy

import "testing"

// A response path that leaves its write to the client to another (handoff.go)
// never makes its answers wait on that other path's node: here one node
// answers while the other stops part way through an answer, both at once,
// and the first node's answer reaches the client while the second's is
// still incomplete, round after round.
func TestHandOffNodeMidFrame(t *testing.T) {
	t.Parallel()
	b, c, addr := handOffNodes(t)
	for round := range 40 {
		cl := heldPair(t, addr, b, c, round)
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

// handOffNodes starts three nodes and a proxy in front of the first whose
// ring puts the partitions of keyOn(true) on b and the others on c, and
// returns b, c and the proxy's address.
func handOffNodes(t *testing.T) (b, c *legNode, addr string) {
	t.Helper()
	up, b, c := startLegNode(t), startLegNode(t), startLegNode(t)
	_, addr, _ = startLegsProxy(t, up.addr(), splitRing{low: b.addr(), high: c.addr()}, nil)
	return b, c, addr
}

// heldPair dials the proxy at addr, opens its connections to b and c, and
// sends a read to each at once, b's on stream 3 and c's on 4, which both
// nodes hold: the round'th each holds.
func heldPair(t *testing.T, addr string, b, c *legNode, round int) *stubClient {
	t.Helper()
	low, high := keyOn(true), keyOn(false)
	cl := dialStub(t, addr)
	cl.answered(readKV(1, "bench.kv", low), 1)
	cl.answered(readKV(2, "bench.kv", high), 2)
	b.set(func(n *legNode) { n.hold = "WHERE k =" })
	c.set(func(n *legNode) { n.hold = "WHERE k =" })
	cl.write(append(readKV(3, "bench.kv", low), readKV(4, "bench.kv", high)...))
	b.waitHeld(t, round+1)
	c.waitHeld(t, round+1)
	return cl
}
