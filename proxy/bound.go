package proxy

import (
	"sync"
	"sync/atomic"
)

// bound is a limit over all of a proxy's connections, taken from before
// something is held and given back after: max_in_flight (requests, one
// each), max_frame_bytes_total (large frames, their size) and
// max_buffered_bytes_total (writers' queues, their bytes). Taking costs one
// compare-and-swap and giving one atomic add; the lock is only for waiting.
//
// Past the bound a taker waits, except one that holds nothing: nothing at
// all of the bound, or, when the taker says what it holds, nothing of its
// own. So a taking larger than the bound still goes through, alone, and a
// writer with an empty queue is never held up by other sockets' peers,
// which exceeds the bound by at most one frame per socket.
type bound struct {
	max     int64  // 0: no bound, only counting
	waits   func() // counts a wait
	n       atomic.Int64
	waiters atomic.Int32
	mu      sync.Mutex
	room    sync.Cond // some was given back, or a waiting taker stopped
}

func newBound(max int, waits func()) *bound {
	b := &bound{max: int64(max), waits: waits}
	b.room.L = &b.mu
	return b
}

// take takes k, waiting while there is no room. held, if not nil, is what
// the taker holds already. It gives up, reporting false and having taken
// nothing, once stopped is set (the taker's connection is closing).
func (b *bound) take(k int64, stopped *atomic.Bool, held *atomic.Int64) bool {
	return b.takeOr(k, stopped, held, nil)
}

// takeOr is take that calls before, when not nil, before it waits: a taker
// that holds queued work must send it on, or the room it waits for may
// never come.
func (b *bound) takeOr(k int64, stopped *atomic.Bool, held *atomic.Int64, before func()) bool {
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
	// after the look finds the waiter (see give).
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

// takeNow takes k if there is room now, without waiting.
func (b *bound) takeNow(k int64) bool {
	if b.max == 0 {
		b.n.Add(k)
		return true
	}
	return b.tryTake(k, nil)
}

// takeNowHolding is takeNow for a taker that holds held already, which it
// may take past the bound while it holds nothing (see tryTake).
func (b *bound) takeNowHolding(k int64, held *atomic.Int64) bool {
	if b.max == 0 {
		b.n.Add(k)
		return true
	}
	return b.tryTake(k, held)
}

// takeNowFair is takeNow that leaves the room to the takers already
// waiting, if any: a taker that arrives as room is given back does not
// pass them, and its wait is counted as one.
func (b *bound) takeNowFair(k int64) bool {
	if b.waiters.Load() > 0 {
		return false
	}
	return b.takeNow(k)
}

// force takes k whether there is room or not: for what must not wait, and
// is bounded otherwise.
func (b *bound) force(k int64) { b.n.Add(k) }

func (b *bound) tryTake(k int64, held *atomic.Int64) bool {
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

// give gives back k, waking a waiter, or every waiter when takers may want
// different amounts.
func (b *bound) give(k int) {
	if k <= 0 {
		return
	}
	b.n.Add(-int64(k))
	if b.waiters.Load() == 0 {
		return
	}
	b.mu.Lock()
	if k == 1 {
		b.room.Signal()
	} else {
		b.room.Broadcast()
	}
	b.mu.Unlock()
}

// wake wakes every waiter to look at its stop flag.
func (b *bound) wake() {
	if b.waiters.Load() == 0 {
		return
	}
	b.mu.Lock()
	b.room.Broadcast()
	b.mu.Unlock()
}
