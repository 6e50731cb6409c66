package transport

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"

	"github.com/cqlguard/cqlguard/frame"
)

// ErrWriterClosed is the error of a Writer's writes after it has stopped
// without an error of its socket.
var ErrWriterClosed = errors.New("connection closed")

// Writer writes frames to a socket from several goroutines. Write queues
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
type Writer struct {
	out    *sockWriter
	max    int    // pending bytes past which Write blocks
	budget *Bound // shared with other writers; nil for no bound
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
	// (its peer does not read, or its budget is full), or a Push for room
	// in the socket, and with false once it stops waiting, outside the
	// writer's lock: for what others wait on behind this writer's
	// producers. Set it with SetStall.
	stall func(waiting bool)
}

// NewWriter returns a Writer of conn whose Write waits for room rather
// than queue more than maxPending bytes (a larger frame is queued alone),
// and that also takes what it holds from budget, a bound shared with other
// writers, when that is not nil.
func NewWriter(conn net.Conn, maxPending int, budget *Bound) *Writer {
	w := &Writer{out: newSockWriter(conn), max: maxPending, budget: budget}
	w.room.L = &w.mu
	w.run = w.loop
	w.wkick = w.waitKick
	return w
}

// SetStall sets the writer's stall hook, before the writer is used. fn is
// called with true before a Write waits for room, or a Push for room in
// the socket, including the socket under a connection of TLSServer, and
// with false once it stops waiting; it is called outside the writer's
// lock.
func (w *Writer) SetStall(fn func(waiting bool)) {
	w.stall = fn
	w.out.stall = fn
	if c, ok := w.out.conn.(*tls.Conn); ok {
		if sc, ok := c.NetConn().(*sockConn); ok {
			sc.out.stall = fn
		}
	}
}

// Write queues one or more whole frames; Push, Flush or Close writes
// them. It copies f, so the caller may reuse it as soon as Write returns.
func (w *Writer) Write(f []byte) error {
	if w.budget != nil && !w.budget.takeNowHolding(int64(len(f)), &w.held) {
		w.stalled(true)
		ok := w.budget.takeOr(int64(len(f)), &w.stopped, &w.held, w.wkick)
		w.stalled(false)
		if !ok {
			w.mu.Lock()
			err := w.err
			w.mu.Unlock()
			if err == nil {
				err = ErrWriterClosed
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
func (w *Writer) mustWait(n int) bool {
	return len(w.pending) > 0 && len(w.pending)+n > w.max && !w.closed
}

// stalled calls w.stall, if set.
func (w *Writer) stalled(waiting bool) {
	if w.stall != nil {
		w.stall(waiting)
	}
}

// Full reports whether the writer holds as much as it queues before a
// Write waits: its peer is not keeping up.
func (w *Writer) Full() bool { return w.held.Load() >= int64(w.max) }

// Held reports the bytes the writer holds: queued, or being written.
func (w *Writer) Held() int64 { return w.held.Load() }

// Waited reports whether a Write waited for room since the last call.
func (w *Writer) Waited() bool {
	// A load, and a store only after a wait: the writer's other users
	// keep the line in their caches.
	if !w.waited.Load() {
		return false
	}
	w.waited.Store(false)
	return true
}

// waitKick is kick for a Write about to wait for the budget.
func (w *Writer) waitKick() {
	w.waited.Store(true)
	w.kick()
}

// refuseLocked gives back the n bytes of a frame a closed writer will not
// queue, and returns why it stopped. It unlocks w.mu.
func (w *Writer) refuseLocked(n int) error {
	err := w.err
	w.mu.Unlock()
	w.release(n)
	if err == nil {
		err = ErrWriterClosed
	}
	return err
}

// Offer queues the frame f with its stream id set to stream, without
// waiting for room, and with kick starts the flush loop: for a frame that
// another connection's path hands to this writer, which must never wait on
// this connection's peer. Without kick the caller pushes it later. Callers
// offer only while the writer is not Full, or small frames bounded
// otherwise (a refusal, a forwarded hot read: by the requests in flight),
// so that what it queues past its bounds is at most a frame per caller.
func (w *Writer) Offer(f []byte, stream int16, kick bool) error {
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
func (w *Writer) Push() error {
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

// Kick starts the flush loop on a goroutine of its own if something is
// queued and nothing writes it, and returns at once: for a goroutine about
// to wait, which must not hold back what it or others queued, and may not
// block.
func (w *Writer) Kick() {
	// Nothing queued or being written: the lock is left alone, as in Push.
	if w.held.Load() == 0 {
		return
	}
	w.kick()
}

// kick is Kick, for a producer of w's about to wait.
func (w *Writer) kick() {
	w.mu.Lock()
	w.kickLocked()
	w.mu.Unlock()
}

func (w *Writer) kickLocked() {
	if !w.running && len(w.pending) > 0 {
		w.running = true
		go w.run()
	}
}

// UseSegments makes every frame queued after this call travel in v5
// segments. Frames already queued are still written plain, as the
// handshake requires for READY and AUTHENTICATE.
func (w *Writer) UseSegments(compressed bool) {
	w.mu.Lock()
	w.raw = len(w.pending)
	w.segs = frame.NewSegmentWriter(compressed)
	w.mu.Unlock()
}

// Flush waits until everything queued so far has been written, or the
// writer has stopped.
func (w *Writer) Flush() {
	w.mu.Lock()
	w.kickLocked()
	for (len(w.pending) > 0 || w.busy) && !w.closed {
		w.room.Wait()
	}
	w.mu.Unlock()
}

// Close stops the writer after it has written what is pending, and waits
// for that.
func (w *Writer) Close() {
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
func (w *Writer) stop() {
	w.stopped.Store(true)
	if w.budget != nil {
		w.budget.Wake()
	}
}

// release gives back n bytes no longer queued or being written.
func (w *Writer) release(n int) {
	w.held.Add(-int64(n))
	if w.budget != nil {
		w.budget.Give(int64(n))
	}
}

// loop is the flush loop: it writes what is pending until nothing is, then
// ends.
func (w *Writer) loop() {
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
		// A batch may have grown the buffers up to maxPending;
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
