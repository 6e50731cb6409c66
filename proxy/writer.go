package proxy

import (
	"errors"
	"net"
	"sync"

	"github.com/cqlguard/cqlguard/frame"
)

// errWriterClosed is returned by writes after the writer has stopped.
var errWriterClosed = errors.New("connection closed")

// writer is the one goroutine that writes to a socket. Frames from any
// goroutine are appended to a pending buffer and written together by the
// flush loop, so a burst of small frames costs one syscall. The pending
// buffer is bounded: a peer that stops reading blocks the producers, which
// stops the proxy reading from the other side instead of buffering.
type writer struct {
	conn net.Conn
	max  int // pending bytes past which Write blocks

	mu      sync.Mutex
	wake    sync.Cond // pending gained frames, or closed
	room    sync.Cond // pending was taken, or closed
	pending []byte
	raw     int                  // pending[:raw] is written as plain frames, even when segs is set
	segs    *frame.SegmentWriter // v5 framing, once the handshake switched to it
	err     error
	closed  bool
	busy    bool // the flush loop is writing

	spare []byte // the buffer the flush loop writes from, swapped with pending
	wire  []byte // segments built from spare in v5 mode
	done  chan struct{}
}

func newWriter(conn net.Conn, maxPending int) *writer {
	w := &writer{conn: conn, max: maxPending, done: make(chan struct{})}
	w.wake.L = &w.mu
	w.room.L = &w.mu
	go w.loop()
	return w
}

// Write queues one or more whole frames. It copies f, so the caller may
// reuse it as soon as Write returns.
func (w *writer) Write(f []byte) error {
	w.mu.Lock()
	for len(w.pending) > 0 && len(w.pending)+len(f) > w.max && !w.closed {
		w.room.Wait()
	}
	if w.closed {
		err := w.err
		w.mu.Unlock()
		if err == nil {
			err = errWriterClosed
		}
		return err
	}
	w.pending = append(w.pending, f...)
	if w.segs == nil {
		w.raw = len(w.pending)
	}
	w.wake.Signal()
	w.mu.Unlock()
	return nil
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
	for (len(w.pending) > 0 || w.busy) && !w.closed {
		w.room.Wait()
	}
	w.mu.Unlock()
}

// Close stops the writer after it has written what is pending, and waits.
func (w *writer) Close() {
	w.mu.Lock()
	w.closed = true
	w.wake.Broadcast()
	w.room.Broadcast()
	w.mu.Unlock()
	<-w.done
}

func (w *writer) loop() {
	defer close(w.done)
	for {
		w.mu.Lock()
		for len(w.pending) == 0 && !w.closed {
			w.wake.Wait()
		}
		if len(w.pending) == 0 {
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
		if _, err := w.conn.Write(out); err != nil {
			w.mu.Lock()
			w.err = err
			w.closed = true
			w.pending = w.pending[:0]
			w.room.Broadcast()
			w.mu.Unlock()
			return
		}
		w.mu.Lock()
		w.busy = false
		w.room.Broadcast()
		w.mu.Unlock()
		// A burst may have grown the buffers; give large ones back so that
		// idle connections stay small.
		if cap(w.spare) > shrinkAbove {
			w.spare = nil
		}
		if cap(w.wire) > shrinkAbove {
			w.wire = nil
		}
	}
}

// shrinkAbove is the buffer capacity a writer keeps between bursts.
const shrinkAbove = 256 << 10
