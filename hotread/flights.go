package hotread

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// flightShards is how many locks a table of flights spreads its flights
// over.
const flightShards = 64

// Flights is the table of reads in flight that identical reads join, so
// that one of them reaches the upstream; W is what the caller needs to
// answer a waiting read (its session and stream, say). Safe for concurrent
// use (its flights are spread over shards by hash, each with its own lock).
// Bounded: at most maxFlights flights, and maxWaiters waiters per flight;
// past either bound Join says neither joined nor leading, and the caller
// forwards the read itself.
type Flights[W any] struct {
	seed       maphash.Seed
	maxFlights int64
	maxWaiters int
	n          atomic.Int64 // flights in the table
	pool       sync.Pool    // of *Flight[W], released
	shards     [flightShards]flightShard[W]
}

// flightShard holds the flights whose hash falls in it.
type flightShard[W any] struct {
	mu                sync.Mutex
	m                 map[uint64]*Flight[W]
	led, joined, full uint64
	_                 [64]byte // keeps neighbouring shards' locks off one cache line
}

// Flight is one read in flight, led by the request that was forwarded.
type Flight[W any] struct {
	hash    uint64
	shard   *flightShard[W]
	inTable bool // guarded by shard.mu, as waiters is until the flight lands
	gen     Gen
	read    Read
	buf     []byte // holds read's Keyspace and Body
	waiters []W
}

// NewFlights returns an empty table of at most maxFlights flights with at
// most maxWaiters waiters each.
func NewFlights[W any](maxFlights, maxWaiters int) *Flights[W] {
	f := &Flights[W]{
		seed:       maphash.MakeSeed(),
		maxFlights: int64(max(maxFlights, 0)),
		maxWaiters: max(maxWaiters, 0),
	}
	f.pool.New = func() any { return new(Flight[W]) }
	for i := range f.shards {
		f.shards[i].m = make(map[uint64]*Flight[W])
	}
	return f
}

// Join looks for a flight identical to r at generation gen. If there is one
// with room, it adds w to its waiters and returns it and true: the caller's
// read waits for that flight's answer, and may read the flight's identity
// (Read) until it is answered, as the flight is released only after. Otherwise it registers a new flight
// for r (copying r's identity) led by the caller and returns (f, false); or
// (nil, false) when the table is full or the identical flight has its
// maxWaiters (the caller forwards without coalescing). A flight at another
// generation is not joined: the new flight replaces it in the table (the
// old one still lands, through Land).
func (f *Flights[W]) Join(r *Read, gen Gen, w W) (*Flight[W], bool) {
	h := r.hash(f.seed)
	s := &f.shards[h%flightShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.m[h]
	if old != nil && old.gen == gen && identical(&old.read, r) {
		if len(old.waiters) >= f.maxWaiters {
			s.full++
			return nil, false
		}
		old.waiters = append(old.waiters, w)
		s.joined++
		return old, true
	}
	// An older flight, or one for another read that collides with r,
	// gives way to the new one and takes no more waiters; its count
	// passes to the new one.
	if old != nil {
		old.inTable = false
	} else if f.n.Add(1) > f.maxFlights {
		f.n.Add(-1)
		s.full++
		return nil, false
	}
	fl := f.pool.Get().(*Flight[W])
	fl.hash, fl.shard, fl.gen, fl.inTable = h, s, gen, true
	if n := r.identityLen(); cap(fl.buf) < n {
		fl.buf = make([]byte, n)
	}
	r.copyInto(&fl.read, fl.buf[:r.identityLen()])
	s.m[h] = fl
	s.led++
	return fl, false
}

// Land removes fl from the table, if it is still there, so that no more
// reads join it, and returns its waiters, in the order they joined. The
// slice is valid until Release.
func (f *Flights[W]) Land(fl *Flight[W]) []W {
	s := fl.shard
	s.mu.Lock()
	f.takeOut(fl)
	ws := fl.waiters
	s.mu.Unlock()
	return ws
}

// takeOut removes fl from the table if it is still there; fl.shard.mu is
// held.
func (f *Flights[W]) takeOut(fl *Flight[W]) {
	if fl.inTable {
		delete(fl.shard.m, fl.hash)
		fl.inTable = false
		f.n.Add(-1)
	}
}

// Release returns fl to a pool for reuse; fl must not be used after. A
// flight released without landing is taken out of the table first, and
// its waiters are forgotten.
func (f *Flights[W]) Release(fl *Flight[W]) {
	s := fl.shard
	s.mu.Lock()
	f.takeOut(fl)
	s.mu.Unlock()
	// Zeroed, the waiters let go of what they point to.
	clear(fl.waiters)
	fl.waiters = fl.waiters[:0]
	fl.read = Read{}
	fl.shard = nil
	f.pool.Put(fl)
}

// Read returns the identity of the flight's read (its Body, Keyspace... as
// copied at Join), which a waiter may forward on its own if the flight
// fails; valid until Release.
func (fl *Flight[W]) Read() *Read { return &fl.read }

// Len returns how many flights are in the table.
func (f *Flights[W]) Len() int { return int(f.n.Load()) }

// FlightStats are a table's counts since it was made: Flights in the table
// now, Led and Joined the Joins that led a new flight and that joined one,
// and Full the Joins refused by a bound.
type FlightStats struct {
	Flights           int
	Led, Joined, Full uint64
}

// Stats returns the table's current size and counts.
func (f *Flights[W]) Stats() FlightStats {
	st := FlightStats{Flights: f.Len()}
	for i := range f.shards {
		s := &f.shards[i]
		s.mu.Lock()
		st.Led += s.led
		st.Joined += s.joined
		st.Full += s.full
		s.mu.Unlock()
	}
	return st
}
