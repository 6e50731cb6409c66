package ratelimit

import (
	"sync"
	"sync/atomic"
)

// A stripe holds what every decision writes but no two decisions need to
// share: the decision statistics, the operations counted towards each
// shard's lossy-counting bucket but not yet added to it, and a random
// source. Decisions on different cores take different stripes, so each
// core writes cache lines of its own and decisions on distinct partitions
// scale with cores. The fields are atomic because a stripe is not owned:
// two cores may on occasion hold the same one (see stripeSet).
type stripe struct {
	accepted, rejected, untracked atomic.Uint64
	allocations, evictions        atomic.Uint64
	rng                           atomic.Uint64 // a splitmix64 state
	// ops[i] counts operations on shard i not yet added to the shard's
	// count, which they are flushOps at a time.
	ops []atomic.Uint32
	_   cacheLinePad
}

// count records decision d and returns it.
func (s *stripe) count(d Decision) Decision {
	switch d {
	case Accept:
		s.accepted.Add(1)
	case Reject:
		s.rejected.Add(1)
	default:
		s.untracked.Add(1)
	}
	return d
}

// float returns a pseudo-random number uniform in [0, 1), from the top 53
// bits of the next splitmix64 value so that every value is exactly
// representable.
func (s *stripe) float() float64 {
	return float64(mix(s.rng.Add(splitmixGamma))>>11) * 0x1p-53
}

// stripeSet hands out stripes, one per processor.
//
// Go does not tell a goroutine which core it runs on, but sync.Pool keeps a
// private item per P (the scheduler's processor, of which GOMAXPROCS run at
// once), and Get and Put of that item touch nothing shared. A stripe taken
// from the pool for one decision and put back is therefore, in the steady
// state, the same stripe for every decision made on that P. The pool may
// drop its items at a garbage collection; New then hands out the next
// stripe of a fixed set, round robin, so nothing is allocated and no count
// is lost. Two Ps may then hold the same stripe for a while, which costs
// contention, not correctness.
//
// A deterministic limiter (Config.Seed) has a single stripe and no pool: a
// pool's choice of stripe would change the random draws from run to run.
type stripeSet struct {
	all  []stripe
	next atomic.Uint32
	pool *sync.Pool // nil with a single stripe
}

// init allocates n stripes counting towards the given number of shards,
// their random sources seeded from src.
func (ss *stripeSet) init(n, shards int, src *splitmix) {
	ss.all = make([]stripe, n)
	// One array for every stripe's ops, with a cache line's worth of space
	// between one stripe's counters and the next, wherever the array
	// starts.
	perLine := len(cacheLinePad{}) / 4
	stride := (shards+perLine-1)/perLine*perLine + perLine
	ops := make([]atomic.Uint32, n*stride)
	for i := range ss.all {
		ss.all[i].rng.Store(src.next())
		ss.all[i].ops = ops[i*stride : i*stride+shards : i*stride+shards]
	}
	if n > 1 {
		ss.pool = &sync.Pool{New: func() any {
			return &ss.all[int(ss.next.Add(1))%len(ss.all)]
		}}
	}
}

// get returns the calling processor's stripe; put gives it back.
func (ss *stripeSet) get() *stripe {
	if ss.pool == nil {
		return &ss.all[0]
	}
	return ss.pool.Get().(*stripe)
}

func (ss *stripeSet) put(s *stripe) {
	if ss.pool != nil {
		ss.pool.Put(s)
	}
}

// addStats adds every stripe's counters to st.
func (ss *stripeSet) addStats(st *Stats) {
	for i := range ss.all {
		s := &ss.all[i]
		st.Accepted += s.accepted.Load()
		st.Rejected += s.rejected.Load()
		st.FailedAllocations += s.untracked.Load()
		st.Allocations += s.allocations.Load()
		st.Evictions += s.evictions.Load()
	}
}

// resetOps forgets the operations on shard i that no stripe has flushed,
// when the shard starts a new window.
func (ss *stripeSet) resetOps(i int) {
	for j := range ss.all {
		ss.all[j].ops[i].Store(0)
	}
}
