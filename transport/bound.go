package transport

import (
	"sync"
	"sync/atomic"
)

// Bound is a limit over many connections, taken from before something is
// held and given back after: requests in flight (one each), large frames
// (their size), or writers' queues (their bytes). Taking costs one
// compare-and-swap and giving one atomic add; the lock is only for waiting.
//
// Past the bound a taker waits, except one that holds nothing: nothing at
// all of the bound, or, for a Writer, nothing of its own. So a taking
// larger than the bound still goes through, alone, and a writer with an
// empty queue is never held up by other sockets' peers, which exceeds the
// bound by at most one frame per socket.
type Bound struct {
	max     int64  // 0: no bound, only counting
	waits   func() // counts a wait
	n       atomic.Int64
	waiters atomic.Int32
	mu      sync.Mutex
	room    sync.Cond // some was given back, or a waiting taker stopped
}

// NewBound returns a Bound that lets max be taken at once, or one that
// only counts when max is 0. It calls waits each time a taker is about to
// wait, for the caller's metrics.
func NewBound(max int, waits func()) *Bound {
	b := &Bound{max: int64(max), waits: waits}
	b.room.L = &b.mu
	return b
}

// Take takes n, waiting while there is no room. It gives up, reporting
// false and having taken nothing, once stopped is set (the taker's
// connection is closing): a taker already waiting looks at it when Wake
// wakes it.
func (b *Bound) Take(n int64, stopped *atomic.Bool) bool {
	return b.takeOr(n, stopped, nil, nil)
}

// TakeOr is Take that calls before, when not nil, before it waits: a taker
// that holds queued work must send it on, or the room it waits for may
// never come.
func (b *Bound) TakeOr(n int64, stopped *atomic.Bool, before func()) bool {
	return b.takeOr(n, stopped, nil, before)
}

// takeOr is TakeOr for a taker that holds held already, when not nil.
func (b *Bound) takeOr(k int64, stopped *atomic.Bool, held *atomic.Int64, before func()) bool {
	if b.max == 0 {
		b.n.Add(k)
		return true
	}
	if b.tryTake(k, held) {
		return true
	}
	if before != nil {
		before()
	}
	b.waits()
	b.mu.Lock()
	defer b.mu.Unlock()
	// Counted as waiting before looking again, so that what is given back
	// after the look finds the waiter (see Give).
	b.waiters.Add(1)
	defer b.waiters.Add(-1)
	for !b.tryTake(k, held) {
		if stopped.Load() {
			// A signal meant for another taker may have woken this one:
			// pass it on.
			if b.n.Load() < b.max {
				b.room.Signal()
			}
			return false
		}
		b.room.Wait()
	}
	return true
}

// TakeNow takes n if there is room now, without waiting.
func (b *Bound) TakeNow(n int64) bool {
	if b.max == 0 {
		b.n.Add(n)
		return true
	}
	return b.tryTake(n, nil)
}

// takeNowHolding is TakeNow for a taker that holds held already, which it
// may take past the bound while it holds nothing (see tryTake).
func (b *Bound) takeNowHolding(k int64, held *atomic.Int64) bool {
	if b.max == 0 {
		b.n.Add(k)
		return true
	}
	return b.tryTake(k, held)
}

// TakeNowFair is TakeNow that leaves the room to the takers already
// waiting, if any: a taker that arrives as room is given back does not
// pass them, and its wait is counted as one.
func (b *Bound) TakeNowFair(n int64) bool {
	if b.waiters.Load() > 0 {
		return false
	}
	return b.TakeNow(n)
}

// force takes k whether there is room or not: for what must not wait, and
// is bounded otherwise.
func (b *Bound) force(k int64) { b.n.Add(k) }

func (b *Bound) tryTake(k int64, held *atomic.Int64) bool {
	for {
		n := b.n.Load()
		if n+k > b.max {
			alone := n == 0
			if held != nil {
				alone = held.Load() == 0
			}
			if !alone {
				return false
			}
		}
		if b.n.CompareAndSwap(n, n+k) {
			return true
		}
	}
}

// Give gives back n, waking a waiter, or every waiter when takers may want
// different amounts.
func (b *Bound) Give(n int64) {
	if n <= 0 {
		return
	}
	b.n.Add(-n)
	if b.waiters.Load() == 0 {
		return
	}
	b.mu.Lock()
	if n == 1 {
		b.room.Signal()
	} else {
		b.room.Broadcast()
	}
	b.mu.Unlock()
}

// Wake wakes every waiter to look at its stop flag.
func (b *Bound) Wake() {
	if b.waiters.Load() == 0 {
		return
	}
	b.mu.Lock()
	b.room.Broadcast()
	b.mu.Unlock()
}

// Taken reports how much is taken now.
func (b *Bound) Taken() int64 { return b.n.Load() }
