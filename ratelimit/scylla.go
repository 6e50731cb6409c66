package ratelimit

import (
	"math"
	"sync"
)

// Constants of ScyllaDB's limiter, which AlgorithmScylla reproduces.
const (
	// bucketOps is the number of operations on a shard after which every
	// count of the shard is virtually decreased by one (lossy counting).
	bucketOps = 10000
	// countBits and windowBits split an entry's 32-bit state.
	countBits  = 20
	windowBits = 12
	maxCount   = 1<<countBits - 1
	windowMask = 1<<windowBits - 1
	// halvings is the number of windows after which any count has decayed
	// to zero; older entries are not replayed window by window.
	halvings = countBits - 1
	// sweepWindows bounds how long an entry may go without a refresh. An
	// entry's 12-bit window wraps after 4096 windows, when a long-idle entry
	// would look current again; refreshing every entry within half that
	// period rules this out.
	sweepWindows = 1 << (windowBits - 1)
)

// scyllaEntrySize is the size of a scyllaEntry in bytes.
const scyllaEntrySize = 16

// scyllaEntry is one counter: 16 bytes, as in ScyllaDB.
type scyllaEntry struct {
	token uint64
	label uint32
	// state is count<<windowBits | window. The count includes the shard's
	// lossy-counting bucket: it is live while above the bucket. The window
	// is the low 12 bits of the second in which the count was last brought
	// up to date.
	state uint32
}

// scyllaShard is one shard's table and the clocks that age it. All fields
// are guarded by mu.
type scyllaShard struct {
	mu      sync.Mutex
	entries []scyllaEntry // a power of two of them
	sec     int64         // current window: seconds since the Unix epoch
	bucket  uint32        // lossy-counting buckets elapsed in this window
	ops     uint32        // operations counted in the current bucket
	// past[i] is the bucket at the end of window sec-1-i: ageing an entry
	// over a past window subtracts that window's bucket, then halves.
	past  [halvings - 1]uint32
	sweep int // next entry the window change refreshes
	rng   splitmix
	stats shardStats
	_     cacheLinePad
}

// init allocates the shard's table and starts its clock at second sec.
func (s *scyllaShard) init(entries int, sec int64, rng splitmix) {
	s.entries = make([]scyllaEntry, entries)
	s.sec = sec
	s.rng = rng
}

// allow counts one operation on (token, label), whose slot hash is h, at
// second sec, and decides it against limit.
func (s *scyllaShard) allow(token uint64, label uint32, h uint64, sec int64, limit uint32) Decision {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance(sec)
	x, ok := s.count(token, label, h)
	if !ok {
		return s.stats.count(AcceptUntracked)
	}
	// At a steady rate V a count swings from V to 2V within each window,
	// so up to 2L nothing is rejected, and above it rejecting with
	// probability 1 - L/(x ln 2) leaves exactly L per window accepted on
	// average once V >= 2L: the integral of L/(x ln 2) over [V, 2V] is L.
	if uint64(x) <= 2*uint64(limit) || s.rng.float()*float64(x)*math.Ln2 < float64(limit) {
		return s.stats.count(Accept)
	}
	return s.stats.count(Reject)
}

// advance moves the shard's window to second sec, if later. A clock that
// steps back leaves the window where it is rather than un-halving counts.
func (s *scyllaShard) advance(sec int64) {
	d := sec - s.sec
	if d <= 0 {
		return
	}
	if d >= halvings {
		// Every count has decayed to zero: start afresh rather than
		// replay the windows.
		clear(s.entries)
		s.past = [halvings - 1]uint32{}
		s.bucket, s.ops, s.sec = 0, 0, sec
		return
	}
	for ; d > 0; d-- {
		copy(s.past[1:], s.past[:])
		s.past[0] = s.bucket
		s.bucket, s.ops = 0, 0
		s.sec++
		s.sweepStep()
	}
}

// sweepStep refreshes the next slice of the table, sized so that the whole
// table is refreshed every sweepWindows windows.
func (s *scyllaShard) sweepStep() {
	n := max(len(s.entries)/sweepWindows, 1)
	mask := len(s.entries) - 1
	for range n {
		s.refresh(&s.entries[s.sweep])
		s.sweep = (s.sweep + 1) & mask
	}
}

// aged returns the count of an entry with the given state as of the
// current window, with the windows since it was last updated applied: for
// each, that window's lossy-counting decrease, then a halving.
func (s *scyllaShard) aged(state uint32) uint32 {
	k := (uint32(s.sec) - state) & windowMask
	n := state >> windowBits
	if k == 0 {
		return n
	}
	if k >= halvings {
		return 0
	}
	for ; k > 0; k-- {
		n = subSat(n, s.past[k-1]) >> 1
	}
	return n
}

// refresh brings e's count up to the current window.
func (s *scyllaShard) refresh(e *scyllaEntry) {
	e.state = s.aged(e.state)<<windowBits | uint32(s.sec)&windowMask
}

// count finds or allocates the entry for (token, label), counts one
// operation on it, and returns its count net of lossy counting. ok is false
// if no entry was found or free on the probe sequence.
//
// Like ScyllaDB, the search stops at the first free entry. If an entry
// earlier on a partition's probe sequence expires, the partition gets a
// second, fresh entry there and its count restarts; this moves the
// partition earlier on its sequence, so it happens at most a few times to
// any one partition, and the stale entry expires on its own.
func (s *scyllaShard) count(token uint64, label uint32, h uint64) (x uint32, ok bool) {
	mask := uint64(len(s.entries) - 1)
	i := h
	for p := range uint64(probes) {
		i = (i + p) & mask
		e := &s.entries[i]
		s.refresh(e)
		n := e.state >> windowBits
		if n <= s.bucket {
			if e.token != token || e.label != label {
				if e.token != 0 || e.label != 0 {
					s.stats.evictions++
				}
				e.token, e.label = token, label
			}
			s.stats.allocations++
			n = s.bucket
		} else if e.token != token || e.label != label {
			continue
		}
		n = min(n+1, maxCount)
		e.state = n<<windowBits | e.state&windowMask
		if s.ops++; s.ops >= bucketOps {
			s.ops = 0
			s.bucket++
		}
		return subSat(n, s.bucket), true
	}
	return 0, false
}

// addStats adds the shard's counters to st, bringing the shard to second
// sec first so that occupancy reflects expired counts.
func (s *scyllaShard) addStats(st *Stats, sec int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance(sec)
	s.stats.add(st)
	st.Capacity += uint64(len(s.entries))
	for i := range s.entries {
		if s.aged(s.entries[i].state) > s.bucket {
			st.Entries++
		}
	}
}

// subSat returns a-b, or 0 if b > a.
func subSat(a, b uint32) uint32 {
	if b > a {
		return 0
	}
	return a - b
}
