package proxy

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
)

// Regression tests for handing off the write to the client (handoff.go)
// while the client does not read its answers.

// stallNodes are three nodes and a proxy in front of the first whose ring
// puts each third of the token range on one of them, and a key of
// bench.kv on each; each node pads its answers to the reads naming "big"
// with answerPad bytes.
type stallNodes struct {
	p     *Proxy
	addr  string
	nodes [3]*legNode
	keys  [3]int
}

// answerPad pads stallNodes' answers to the reads naming "big", and
// stallBuffered is their proxy's max_buffered_bytes.
const (
	answerPad     = 16 << 10
	stallBuffered = 64 << 10
)

func startStallNodes(t *testing.T) *stallNodes {
	t.Helper()
	sn := &stallNodes{}
	for i := range sn.nodes {
		sn.nodes[i] = startLegNode(t)
		sn.nodes[i].set(func(n *legNode) { n.bigResult = answerPad })
	}
	ring := thirdsRing{sn.nodes[0].addr(), sn.nodes[1].addr(), sn.nodes[2].addr()}
	sn.p, sn.addr, _ = startLegsProxy(t, ring[0], ring, func(cfg *config.Config) {
		cfg.MaxBufferedBytes = stallBuffered
	})
	for i := range sn.keys {
		for k := 0; ; k++ {
			if ring.nodeOf(tokenOf(binary.BigEndian.AppendUint64(nil, uint64(k)))) == i {
				sn.keys[i] = k
				break
			}
		}
	}
	return sn
}

// dial dials the proxy and has the client read a key of each node: the
// session has its connections to all three.
func (sn *stallNodes) dial(t *testing.T) *stubClient {
	t.Helper()
	c := dialStub(t, sn.addr)
	var reads []byte
	for i, k := range sn.keys {
		reads = append(reads, readKV(int16(1+i), "bench.kv", k)...)
	}
	c.write(reads)
	got := map[int16]bool{}
	for range sn.keys {
		stream, op, msg, err := c.nextOp()
		if err != nil || op != frame.OpResult || got[stream] {
			t.Fatalf("want a RESULT to each read, got %s %q on stream %d, %v", op, msg, stream, err)
		}
		got[stream] = true
	}
	return c
}

// session returns the session of the client dialled last, the one not
// among known, once it has its connections to the other two nodes.
func (sn *stallNodes) session(t *testing.T, known ...*session) *session {
	t.Helper()
	s := newestSession(t, sn.p, known...)
	waitUntil(t, "the connections to the other nodes", func() bool { return s.legsNow() == 2 })
	return s
}

// pipeline has c send perNode reads to each node, which each node holds,
// stream 100+3i+j being the i'th to node j, and returns the streams each
// node answers, in the order it answers them.
func (sn *stallNodes) pipeline(t *testing.T, c *stubClient, perNode int) [3][]int16 {
	t.Helper()
	var streams [3][]int16
	var reads []byte
	var held [3]int
	for j, n := range sn.nodes {
		n.set(func(n *legNode) { held[j], n.hold = n.got, "big" })
	}
	for i := range perNode {
		for j, k := range sn.keys {
			stream := int16(100 + 3*i + j)
			reads = append(reads, stubQuery(stream, fmt.Sprintf("SELECT big FROM bench.kv WHERE k = %d", k))...)
			streams[j] = append(streams[j], stream)
		}
	}
	c.write(reads)
	for j, n := range sn.nodes {
		n.waitHeld(t, held[j]+perNode)
	}
	return streams
}

// release has the three nodes answer what they hold at once, each on a
// goroutine of its own: their writes wait for the proxy to read them,
// which waits for the client. The channel is closed once all have.
func (sn *stallNodes) release() <-chan struct{} {
	done := make(chan struct{})
	left := make(chan struct{}, len(sn.nodes))
	for _, n := range sn.nodes {
		go func() {
			n.release()
			left <- struct{}{}
		}()
	}
	go func() {
		for range sn.nodes {
			<-left
		}
		close(done)
	}()
	return done
}

// answeredNow has c read a key of each node and wants each answered.
func (sn *stallNodes) answeredNow(t *testing.T, c *stubClient, stream int16) {
	t.Helper()
	for j, k := range sn.keys {
		c.answered(readKV(stream+int16(j), "bench.kv", k), stream+int16(j))
	}
}

// wantHeldBounded checks that what s's writer holds for its client is
// within what max_buffered_bytes allows: a batch being written and the
// next queued, each at most the bound.
func wantHeldBounded(t *testing.T, s *session) {
	t.Helper()
	if held := s.toClient.Held(); held > 2*stallBuffered {
		t.Errorf("the writer of a client that does not read holds %d bytes, bound %d", held, stallBuffered)
	}
}

// A client that stops reading while its answers come from three nodes at
// once, their response paths handing their writes to one another, harms
// only itself: its writer holds no more than max_buffered_bytes allows, a
// small part of the answers in flight, another client's reads on the
// same nodes are answered meanwhile, and once it reads again it gets
// every answer once, each node's in the order the node gave them.
func TestHandOffClientStopsReading(t *testing.T) {
	t.Parallel()
	sn := startStallNodes(t)
	a := sn.dial(t)
	sa := sn.session(t)
	other := sn.dial(t)
	so := sn.session(t, sa)
	stopReading(t, a, sa)

	const perNode = 16 // 768 KiB of answers in flight
	streams := sn.pipeline(t, a, perNode)
	released := sn.release()
	waitUntil(t, "the client's writer to wait", sa.clientWaiting)
	wantHeldBounded(t, sa)

	// The other client, its reads to all three nodes in one write, and
	// one at a time, is answered throughout.
	for round := range 10 {
		var reads []byte
		for j, k := range sn.keys {
			reads = append(reads, readKV(int16(10+j), "bench.kv", k)...)
		}
		other.write(reads)
		got := map[int16]bool{}
		for range sn.keys {
			stream, op, msg, err := other.nextOp()
			if err != nil || op != frame.OpResult || stream < 10 || stream > 12 || got[stream] {
				t.Fatalf("round %d: want a RESULT to each read, got %s %q on stream %d, %v", round, op, msg, stream, err)
			}
			got[stream] = true
		}
		sn.answeredNow(t, other, 20)
		wantHeldBounded(t, sa)
	}
	if !sa.clientWaiting() {
		t.Fatal("the client read meanwhile: the test shows nothing")
	}

	// The client reads again.
	node := map[int16]int{}
	for j, ss := range streams {
		for _, stream := range ss {
			node[stream] = j
		}
	}
	var got [3][]int16
	for range 3 * perNode {
		stream, op, msg, err := a.nextOp()
		if err != nil || op != frame.OpResult {
			t.Fatalf("want a RESULT, got %s %q on stream %d, %v", op, msg, stream, err)
		}
		j, ok := node[stream]
		if !ok {
			t.Fatalf("an answer on stream %d, which has no request", stream)
		}
		got[j] = append(got[j], stream)
	}
	for j := range streams {
		if fmt.Sprint(got[j]) != fmt.Sprint(streams[j]) {
			t.Errorf("node %d's answers on streams %v, want %v: each once, in the order it gave them", j, got[j], streams[j])
		}
	}
	<-released
	// Nothing more comes: the next answers are to what it asks next.
	sn.answeredNow(t, a, 1)
	a.c.Close()
	other.c.Close()
	sessionsEnded(t, sn.p)
	for _, s := range []*session{sa, so} {
		wantNoTrace(t, sn.p, s, sn.nodes[:]...)
	}
	wantNothingHeld(t, sn.p)
}

// A client that leaves while its answers come from three nodes at once,
// their response paths handing their writes to one another, and does not
// read them, ends its session: as the answers begin to come, or once its
// writer waits for it. Nothing is left of it, and another client's reads
// are answered after each.
func TestHandOffClientLeaves(t *testing.T) {
	t.Parallel()
	sn := startStallNodes(t)
	other := sn.dial(t)
	so := sn.session(t)
	for round := range 8 {
		a := sn.dial(t)
		sa := sn.session(t, so)
		stopReading(t, a, sa)
		sn.pipeline(t, a, 16)
		released := sn.release()
		if round%2 == 1 {
			waitUntil(t, "the client's writer to wait", sa.clientWaiting)
		}
		a.c.Close()
		waitUntil(t, "the session to end", func() bool {
			sn.p.mu.Lock()
			defer sn.p.mu.Unlock()
			_, ok := sn.p.sessions[sa]
			return !ok
		})
		<-released
		wantNoTrace(t, sn.p, sa)
		sn.answeredNow(t, other, 10)
	}
	other.c.Close()
	sessionsEnded(t, sn.p)
	wantNoTrace(t, sn.p, so, sn.nodes[:]...)
	wantNothingHeld(t, sn.p)
}

// wantNothingHeld checks that p, whose sessions have all ended, holds
// nothing of its shared bounds: max_in_flight, max_buffered_bytes_total
// and max_frame_bytes_total.
func wantNothingHeld(t *testing.T, p *Proxy) {
	t.Helper()
	if n := p.inflight.Taken(); n != 0 {
		t.Errorf("%d slots of max_in_flight taken", n)
	}
	if n := p.buffered.Taken(); n != 0 {
		t.Errorf("%d bytes of max_buffered_bytes_total taken", n)
	}
	if n := p.requestFrames.Taken() + p.responseFrames.Taken(); n != 0 {
		t.Errorf("%d bytes of max_frame_bytes_total taken", n)
	}
}
