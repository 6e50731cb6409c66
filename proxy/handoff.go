package proxy

// Handing off the write to the client. A routed session reads answers from
// several connections, each on a response path of its own, and a path
// writes to the client what it queued once it has handled all its read
// gave it. A client's batch of requests, spread over three nodes, came
// back in three writes, where one connection's path wrote them in one:
// writes on loopback also deliver and wake the reader, and they were most
// of the routed path's extra CPU (docs/benchmarks.md).
//
// So a path that has handled all it read leaves its write to another
// path of the session that is waiting for its node with bytes already in
// its socket: that path wakes, handles them, and writes everything queued
// by then, this path's answers with its own. What makes this safe is that
// such a path writes again before it can wait for anything else:
//
//   - between frames it writes, or hands off again, before it waits for
//     its node (serveResponses);
//   - part way through a frame, a read that finds the socket empty starts
//     the client writer's flush loop before it waits (kickClient, set as
//     the reader's SetBeforeWait), and so does a wait for
//     max_frame_bytes_total (frameBudget);
//   - a write to the client that must wait for room starts the flush loop
//     itself (transport.Writer);
//   - a path that ends writes as it ends (serveResponses), after it stopped
//     being a path one can hand off to.
//
// Nor may it work on without end: a node that sends without a pause, in
// frames no read of the buffer ends on, never has its path find all it
// read handled, nor its socket empty. While a write may have been left,
// a path starts the flush loop every leftWriteWeight of frames it handles,
// and before it reads a frame over 64 KiB (writeLeft).
//
// The bytes in the other socket only say the path will wake soon; the
// descriptor they are asked of may be stale once its connection is closed,
// but that path then writes as it ends. At most maxHandOffs paths in a row
// hand off, so that answers never wait on a chain of busy nodes.

// maxHandOffs is how many response paths of a session in a row may leave
// their write to another.
const maxHandOffs = 2

// leftWriteWeight is how much a response path handles, while a write may
// have been left to it, before it starts the client writer's flush loop:
// frames, each weighing one and one more for each KiB of its body.
const leftWriteWeight = 64

// Asking a socket for its bytes is a system call, a few hundred
// nanoseconds: when answers come one at a time (a driver that does not
// coalesce, a light load), it finds none, again and again. After
// handOffMisses looks in a row that asked and found no bytes, a session's
// response paths skip the next handOffSkips before they look again.
const (
	handOffMisses = 4
	handOffSkips  = 16
)

// handOff reports whether u's response path, which has handled all it
// read, may leave writing what it queued to another response path of the
// session: one waiting for its node, with requests in flight there and
// bytes already in its socket.
func (s *session) handOff(u *upstream) bool {
	conns := s.conns.Load()
	if conns == nil || len(*conns) < 2 {
		return false
	}
	if s.handOffLooks.Load() < 0 {
		s.handOffLooks.Add(1)
		return false
	}
	asked := false
	for _, o := range *conns {
		if o == u || o.inflight.Load() <= 0 || !o.waiting.Load() {
			continue
		}
		n, ok := o.in.Unread()
		if n > 0 {
			s.handOffLooks.Store(0)
			if s.handOffs.Add(1) <= maxHandOffs {
				return true
			}
			// This one writes: the next may leave it again.
			s.handOffs.Store(0)
			return false
		}
		asked = asked || ok
	}
	s.handOffs.Store(0)
	if asked && s.handOffLooks.Add(1) >= handOffMisses {
		s.handOffLooks.Store(-handOffSkips)
	}
	return false
}

// setConns records the session's connections, up and its legs, for
// handOff to look over without mu. s.mu is held.
func (s *session) setConns() {
	conns := make([]*upstream, 0, 1+len(s.legs))
	conns = append(append(conns, s.up), s.legs...)
	s.conns.Store(&conns)
}

// writeLeft starts the client writer's flush loop if a response path may
// have left its write to another: handOffs stays above zero from a hand-off
// until a path looks for one and writes.
func (s *session) writeLeft() {
	if s.handOffs.Load() > 0 {
		s.kickClient()
	}
}
