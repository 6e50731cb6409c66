package proxy

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"

	"github.com/cqlguard/cqlguard/frame"
)

// errWriterClosed is returned by writes after the writer has stopped.
var errWriterClosed = errors.New("connection closed")

// writer writes frames to a socket from several goroutines. Write queues
// frames; Push writes what is queued on the calling goroutine, unless
// another goroutine is writing already, which then writes it too. A path
// that queues every frame one read of its socket gave and pushes once
// before it waits for the next read costs one system call per read, and
// hands nothing to another goroutine: the wake-up a hand-off costs is as
// much as the write itself for the small frames of a request-response
// driver. The pending buffer is bounded: a peer that stops reading blocks
// the producers, which stops the proxy reading from the other side
// instead of buffering; a producer that would wait for room first starts
// the flush loop, a goroutine that writes what is queued until nothing is,
// then ends, so that an idle connection, the many a driver keeps open,
// costs no goroutine for its writers.
type writer struct {
	out    *sockWriter
	max    int    // pending bytes past which Write blocks
	budget *bound // max_buffered_bytes_total; nil for no bound
	// held is the bytes queued or being written, taken from budget.
	held atomic.Int64
	// stopped is closed, for a Write waiting on the budget.
	stopped atomic.Bool

	mu      sync.Mutex
	room    sync.Cond // pending was taken, the flush loop ended, or closed
	pending []byte
	raw     int                  // pending[:raw] is written as plain frames, even when segs is set
	segs    *frame.SegmentWriter // v5 framing, once the handshake switched to it
	err     error
	closed  bool
	busy    bool // the flush loop is writing
	running bool // the flush loop runs, on a goroutine of its own or in Push

	// Owned by the flush loop; the goroutine of one run hands them to the
	// next through mu.
	spare []byte // the buffer the flush loop writes from, swapped with pending
	wire  []byte // segments built from spare in v5 mode
	run   func() // w.loop, made once so that starting it allocates nothing

	waited atomic.Bool // a Write waited for room; see Waited
	wkick  func()      // w.waitKick, made once
	// stall, when set, is called with true before a Write waits for room
	// (its peer does not read, or max_buffered_bytes_total is full), or a
	// Push for room in the socket, and with false once it stops waiting,
	// outside the writer's lock: for what others wait on behind this
	// writer's producers. Set it with SetStall.
	stall func(waiting bool)
}

// SetStall sets the writer's stall hook, before it is used.
func (w *writer) SetStall(fn func(waiting bool)) {
	w.stall = fn
	w.out.stall = fn
	if c, ok := w.out.conn.(*tls.Conn); ok {
		if sc, ok := c.NetConn().(*stallConn); ok {
			sc.out.stall = fn
		}
	}
}

func newWriter(conn net.Conn, maxPending int) *writer {
	return newBudgetWriter(conn, maxPending, nil)
}

// newBudgetWriter returns a writer that also takes what it holds from
// budget, when that is not nil.
func newBudgetWriter(conn net.Conn, maxPending int, budget *bound) *writer {
	w := &writer{out: newSockWriter(conn), max: maxPending, budget: budget}
	w.room.L = &w.mu
	w.run = w.loop
	w.wkick = w.waitKick
	return w
}

// Write queues one or more whole frames; Push, Flush or Close writes
// them. It copies f, so the caller may reuse it as soon as Write returns.
func (w *writer) Write(f []byte) error {
	if w.budget != nil && !w.budget.takeNowHolding(int64(len(f)), &w.held) {
		w.stalled(true)
		ok := w.budget.takeOr(int64(len(f)), &w.stopped, &w.held, w.wkick)
		w.stalled(false)
		if !ok {
			w.mu.Lock()
			err := w.err
			w.mu.Unlock()
			if err == nil {
				err = errWriterClosed
			}
			return err
		}
	}
	w.held.Add(int64(len(f)))
	w.mu.Lock()
	if w.mustWait(len(f)) {
		w.mu.Unlock()
		w.stalled(true)
		w.mu.Lock()
		for w.mustWait(len(f)) {
			w.waited.Store(true)
			w.kickLocked()
			w.room.Wait()
		}
		w.mu.Unlock()
		w.stalled(false)
		w.mu.Lock()
	}
	if w.closed {
		return w.refuseLocked(len(f))
	}
	w.pending = append(w.pending, f...)
	if w.segs == nil {
		w.raw = len(w.pending)
	}
	w.mu.Unlock()
	return nil
}

// mustWait reports whether a Write of n bytes waits for room. w.mu is held.
func (w *writer) mustWait(n int) bool {
	return len(w.pending) > 0 && len(w.pending)+n > w.max && !w.closed
}

// stalled calls w.stall, if set.
func (w *writer) stalled(waiting bool) {
	if w.stall != nil {
		w.stall(waiting)
	}
}

// Full reports whether the writer holds as much as it queues before a
// Write waits: its peer is not keeping up.
func (w *writer) Full() bool { return w.held.Load() >= int64(w.max) }

// Waited reports whether a Write waited for room since the last call.
func (w *writer) Waited() bool {
	// A load, and a store only after a wait: the writer's other users
	// keep the line in their caches.
	if !w.waited.Load() {
		return false
	}
	w.waited.Store(false)
	return true
}

// waitKick is kick for a Write about to wait for the budget.
func (w *writer) waitKick() {
	w.waited.Store(true)
	w.kick()
}

// refuseLocked gives back the n bytes of a frame a closed writer will not
// queue, and returns why it stopped. It unlocks w.mu.
func (w *writer) refuseLocked(n int) error {
	err := w.err
	w.mu.Unlock()
	w.release(n)
	if err == nil {
		err = errWriterClosed
	}
	return err
}

// Offer queues the frame f with its stream id set to stream, without
// waiting for room, and with kick starts the flush loop: for a frame that
// another connection's path hands to this writer, which must never wait on
// this connection's peer. Without kick the caller pushes it later. Its
// callers offer only while the writer is not Full, or small frames (a
// refusal, a forwarded hot read) bounded by the requests in flight: what
// it queues past the bounds is at most a frame per such caller.
func (w *writer) Offer(f []byte, stream int16, kick bool) error {
	if w.budget != nil {
		w.budget.force(int64(len(f)))
	}
	w.held.Add(int64(len(f)))
	w.mu.Lock()
	if w.closed {
		return w.refuseLocked(len(f))
	}
	n := len(w.pending)
	w.pending = append(w.pending, f...)
	frame.SetStream(w.pending[n:], stream)
	if w.segs == nil {
		w.raw = len(w.pending)
	}
	if kick {
		w.kickLocked()
	}
	w.mu.Unlock()
	return nil
}

// Push writes what is queued, on the calling goroutine, and returns once
// nothing is; if another goroutine is writing, it returns at once and that
// one writes it too. It returns the error that stopped the writer, if any.
func (w *writer) Push() error {
	// Nothing queued or being written: the request path pushes its client
	// writer after every read, and it seldom holds an answer, so the lock
	// the response path also takes is left alone.
	if w.held.Load() == 0 {
		return nil
	}
	w.mu.Lock()
	if w.running || len(w.pending) == 0 {
		err := w.err
		w.mu.Unlock()
		return err
	}
	w.running = true
	w.mu.Unlock()
	w.loop()
	w.mu.Lock()
	err := w.err
	w.mu.Unlock()
	return err
}

// kick starts the flush loop on a goroutine of its own if something is
// queued and nothing writes it: for a producer about to wait, which must
// not hold back what it queued.
func (w *writer) kick() {
	w.mu.Lock()
	w.kickLocked()
	w.mu.Unlock()
}

func (w *writer) kickLocked() {
	if !w.running && len(w.pending) > 0 {
		w.running = true
		go w.run()
	}
}

// UseSegments makes every frame queued after this call travel in v5
// segments. Frames already queued are still written plain, as the
// handshake requires for READY and AUTHENTICATE.
func (w *writer) UseSegments(compressed bool) {
	w.mu.Lock()
	w.raw = len(w.pending)
	w.segs = frame.NewSegmentWriter(compressed)
	w.mu.Unlock()
}

// Flush waits until everything queued so far has been written, or the
// writer has stopped.
func (w *writer) Flush() {
	w.mu.Lock()
	w.kickLocked()
	for (len(w.pending) > 0 || w.busy) && !w.closed {
		w.room.Wait()
	}
	w.mu.Unlock()
}

// Close stops the writer after it has written what is pending, and waits
// for that.
func (w *writer) Close() {
	w.mu.Lock()
	w.kickLocked()
	w.closed = true
	w.room.Broadcast()
	w.mu.Unlock()
	w.stop()
	w.mu.Lock()
	for w.running {
		w.room.Wait()
	}
	w.mu.Unlock()
}

// stop lets a Write waiting on the budget go on, to find the writer closed.
func (w *writer) stop() {
	w.stopped.Store(true)
	if w.budget != nil {
		w.budget.wake()
	}
}

// release gives back n bytes no longer queued or being written.
func (w *writer) release(n int) {
	w.held.Add(-int64(n))
	if w.budget != nil {
		w.budget.give(n)
	}
}

// loop is the flush loop: it writes what is pending until nothing is, then
// ends.
func (w *writer) loop() {
	for {
		w.mu.Lock()
		if len(w.pending) == 0 {
			// Idle until the next Write: keep no more than a connection
			// of small frames needs.
			w.pending = shrink(w.pending, keepIdle)
			w.spare = shrink(w.spare, keepIdle)
			w.wire = shrink(w.wire, keepIdle)
			w.running = false
			w.room.Broadcast() // for Close
			w.mu.Unlock()
			return
		}
		w.spare, w.pending = w.pending, w.spare[:0]
		raw, segs := w.raw, w.segs
		w.raw = 0
		w.busy = true
		w.room.Broadcast()
		w.mu.Unlock()

		out := w.spare
		if segs != nil && raw < len(w.spare) {
			w.wire = append(w.wire[:0], w.spare[:raw]...)
			w.wire = segs.AppendFrames(w.wire, w.spare[raw:])
			out = w.wire
		}
		if _, err := w.out.Write(out); err != nil {
			w.mu.Lock()
			w.err = err
			w.closed = true
			dropped := len(w.pending)
			w.pending = w.pending[:0]
			w.mu.Unlock()
			w.release(len(w.spare) + dropped)
			w.stop()
			w.mu.Lock()
			w.busy = false
			w.running = false
			w.room.Broadcast()
			w.mu.Unlock()
			return
		}
		w.mu.Lock()
		w.busy = false
		w.room.Broadcast()
		w.mu.Unlock()
		w.release(len(w.spare))
		// A batch may have grown the buffers up to max_buffered_bytes;
		// give large ones back.
		w.spare = shrink(w.spare, keepBusy)
		w.wire = shrink(w.wire, keepBusy)
	}
}

// The buffer capacity a writer keeps from one batch to the next while
// frames keep coming, and once it has written everything.
const (
	keepBusy = 256 << 10
	keepIdle = 64 << 10
)

// shrink returns b, or nil if its capacity is over keep.
func shrink(b []byte, keep int) []byte {
	if cap(b) > keep {
		return nil
	}
	return b
}
