package proxy

import (
	"sync"
	"sync/atomic"
)

// reply says what the response to a request needs besides forwarding.
type reply uint8

const (
	replyForward   reply = iota // pass the response through
	replyLocal                  // rewrite rows of system.local
	replyPeers                  // rewrite rows of system.peers
	replyPeersV2                // rewrite rows of system.peers_v2
	replyPrepared               // learn the id of a prepared topology query
	replySupported              // rewrite SUPPORTED
	replyStartup                // end of the handshake: READY, AUTHENTICATE or ERROR
)

// request is what the proxy remembers of a request until its response.
type request struct {
	start int64 // monotonic nanoseconds when it was forwarded
	reply reply
	table reply // for replyPrepared: which topology table was prepared
	used  bool
	ddl   bool // may change the schema: reload it once answered
	// version is the request's protocol version, for an answer the proxy
	// writes itself when the upstream cannot.
	version uint8
	// prepared is what is known of an EXECUTE's statement.
	prepared *preparedStatement
}

// streamPage is one page of the in-flight table.
type streamPage [256]request

// streams tracks in-flight requests by stream id. Drivers use low ids
// first, so the table is paged and pages are allocated on first use: an idle
// connection holds no pages, a busy one a few.
type streams struct {
	pages    [128]*streamPage
	inflight int
}

// begin records a request on stream id and reports whether it counts as one
// more in flight: not when the stream already has one (a client bug the
// proxy still forwards) nor for a negative id, which no answer can name.
func (s *streams) begin(id int16, r request) bool {
	if id < 0 {
		return false
	}
	p := s.pages[uint16(id)>>8]
	if p == nil {
		p = new(streamPage)
		s.pages[uint16(id)>>8] = p
	}
	e := &p[id&0xff]
	dup := e.used
	r.used = true
	*e = r
	if !dup {
		s.inflight++
	}
	return !dup
}

// end removes and returns the request on stream id.
func (s *streams) end(id int16) (request, bool) {
	if id < 0 {
		return request{}, false
	}
	p := s.pages[uint16(id)>>8]
	if p == nil || !p[id&0xff].used {
		return request{}, false
	}
	r := p[id&0xff]
	p[id&0xff] = request{}
	s.inflight--
	return r, true
}

// each calls fn for every request in flight.
func (s *streams) each(fn func(id int16, r request)) {
	for pi, p := range s.pages {
		if p == nil {
			continue
		}
		for i := range p {
			if p[i].used {
				fn(int16(pi<<8|i), p[i])
			}
		}
	}
}

// bound is a limit over all of a proxy's connections: max_in_flight, the
// requests in flight, of which a request path takes one before forwarding
// and gives it back when the request is answered or its connection ends;
// and max_frame_bytes_total, the bytes of large frames being read or
// handled. Taking costs one compare-and-swap, giving one atomic add; the
// lock is only for waiting. Past the bound a taker waits, except when
// nothing at all is taken, so that a taking larger than the bound (a frame
// over max_frame_bytes_total) still goes through, alone.
type bound struct {
	max     int64  // 0: no bound, only counting
	waits   func() // counts a wait
	n       atomic.Int64
	waiters atomic.Int32
	mu      sync.Mutex
	room    sync.Cond // a slot was given back, or a waiting session stopped
}

func newBound(max int, waits func()) *bound {
	b := &bound{max: int64(max), waits: waits}
	b.room.L = &b.mu
	return b
}

// take takes k, waiting while there is no room. It gives up, reporting
// false, once stopped is set (the session is closing).
func (b *bound) take(k int64, stopped *atomic.Bool) bool {
	if b.max == 0 {
		b.n.Add(k)
		return true
	}
	if b.tryTake(k) {
		return true
	}
	b.waits()
	b.mu.Lock()
	defer b.mu.Unlock()
	// Counted as waiting before looking again, so that a slot given back
	// after the look finds the waiter (see give).
	b.waiters.Add(1)
	defer b.waiters.Add(-1)
	for !b.tryTake(k) {
		if stopped.Load() {
			// A signal meant for a slot may have woken this one: pass
			// it on.
			if b.n.Load() < b.max {
				b.room.Signal()
			}
			return false
		}
		b.room.Wait()
	}
	return true
}

func (b *bound) tryTake(k int64) bool {
	for {
		n := b.n.Load()
		if n+k > b.max && n > 0 {
			return false
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
