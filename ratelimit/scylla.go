package ratelimit

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
)

// Constants of ScyllaDB's limiter, which AlgorithmScylla reproduces.
const (
	// bucketOps is the number of operations on a shard after which every
	// count of the shard is virtually decreased by one (lossy counting).
	bucketOps = 10000
	// flushOps is how many operations a stripe counts on its own before it
	// adds them to the shard's operations: the shard's counter is then
	// written once per flushOps operations instead of once per operation.
	// It divides bucketOps, so that a single stripe moves the bucket on
	// exactly every bucketOps-th operation.
	flushOps = 100
	// countBits and windowBits split an entry's state, beside the label
	// and the lock bit in its 64-bit word.
	countBits  = 20
	windowBits = 11
	maxCount   = 1<<countBits - 1
	windowMask = 1<<windowBits - 1
	// halvings is the number of windows after which any count has decayed
	// to zero; older entries are not replayed window by window.
	halvings = countBits - 1
	// sweepWindows bounds how long an entry may go without a refresh. An
	// entry's 11-bit window wraps after 2048 windows, when a long-idle
	// entry would look current again; refreshing every entry within half
	// that period rules this out, and leaves the other half to recognize
	// an entry stamped in a window newer than a decision's reading of the
	// clock.
	sweepWindows = 1 << (windowBits - 1)
	// pastWindows is the size of the ring of past windows' buckets: a power
	// of two above halvings.
	pastWindows = 32
)

// scyllaEntrySize is the size of a scyllaEntry in bytes.
const scyllaEntrySize = 16

// scyllaEntry is one counter: 16 bytes, as in ScyllaDB. Entries are
// updated without a table lock, so that decisions on different partitions
// touch no common cache line.
type scyllaEntry struct {
	token atomic.Uint64
	// word is label<<32 | count<<12 | window<<1 | locked. The count
	// includes the shard's lossy-counting bucket: it is live while above
	// the bucket. The window is the low 11 bits of the window in which the
	// count was last brought up to date. A counted operation replaces the
	// word with one compare-and-swap; taking the entry for another
	// partition sets the lock bit while the token is rewritten.
	word atomic.Uint64
}

const entryLocked = 1

func scyllaWord(label, count, window uint32) uint64 {
	return uint64(label)<<32 | uint64(count)<<(windowBits+1) | uint64(window&windowMask)<<1
}

func wordLabel(w uint64) uint32  { return uint32(w >> 32) }
func wordCount(w uint64) uint32  { return uint32(w>>(windowBits+1)) & maxCount }
func wordWindow(w uint64) uint32 { return uint32(w>>1) & windowMask }

// scyllaShard is one shard's table and the clock that ages it.
type scyllaShard struct {
	entries []scyllaEntry // a power of two of them
	// clock is window<<32 | bucket: the current window, in seconds since
	// the limiter's start, and the lossy-counting buckets elapsed in it.
	// Every decision reads it; it changes once a second and once every
	// bucketOps operations.
	clock atomic.Uint64
	// past[w%pastWindows] is the bucket at the end of window w: ageing an
	// entry over a past window subtracts that window's bucket, then halves.
	// A window's slot is written before the clock moves past the window.
	past [pastWindows]atomic.Uint32
	mu   sync.Mutex // held while moving the clock to a new window
	// sweep is the next entry a window change refreshes; guarded by mu.
	sweep int
	_     cacheLinePad
	// ops counts the operations of the current window that stripes have
	// flushed; on a line of its own, so that flushes do not disturb the
	// readers of clock.
	ops atomic.Uint64
	_   cacheLinePad
}

// allow counts one operation on (token, label), whose slot hash is h, in
// window win, and decides it against limit. st is the caller's stripe and
// i the shard's index.
func (s *scyllaShard) allow(st *stripe, ss *stripeSet, i int, token uint64, label uint32, h uint64, win int64, limit uint32) Decision {
	c := s.clock.Load()
	if win > int64(c>>32) {
		c = s.advance(ss, i, win)
	}
	n, c, ok := s.count(st, token, label, h, c)
	if !ok {
		return st.count(AcceptUntracked)
	}
	if st.ops[i].Add(1)%flushOps == 0 && s.ops.Add(flushOps)%bucketOps == 0 {
		s.clock.Add(1) // the next bucket
	}
	// The count is net of its window's bucket, which may have moved on
	// since; but not of a later window's, whose bucket starts again.
	bucket := uint32(c)
	if c2 := s.clock.Load(); c2>>32 == c>>32 {
		bucket = uint32(c2)
	}
	x := subSat(n, bucket)
	// At a steady rate V a count swings from V to 2V within each window,
	// so up to 2L nothing is rejected, and above it rejecting with
	// probability 1 - L/(x ln 2) leaves exactly L per window accepted on
	// average once V >= 2L: the integral of L/(x ln 2) over [V, 2V] is L.
	if uint64(x) <= 2*uint64(limit) || st.float()*float64(x)*math.Ln2 < float64(limit) {
		return st.count(Accept)
	}
	return st.count(Reject)
}

// advance moves the shard's clock to window win, if later, and returns the
// clock. A clock that steps back leaves the window where it is rather than
// un-halving counts.
func (s *scyllaShard) advance(ss *stripeSet, i int, win int64) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.clock.Load()
	cur := int64(c >> 32)
	if win <= cur {
		return c // another decision moved it
	}
	if win-cur >= halvings {
		// Every count has decayed to zero: start afresh rather than
		// replay the windows. The sweep did not visit the table in the
		// windows skipped, so an entry's window may have wrapped round
		// and look recent: zero every count before opening the window.
		for j := range s.entries {
			s.entries[j].zero(uint32(win))
		}
		s.ops.Store(0)
		ss.resetOps(i)
		s.clock.Store(uint64(win) << 32)
		return s.clock.Load()
	}
	for ; cur < win; cur++ {
		// Record the window's final bucket, then open the next window;
		// the swap fails if a bucket was added meanwhile.
		for {
			c = s.clock.Load()
			s.past[cur%pastWindows].Store(uint32(c))
			if s.clock.CompareAndSwap(c, uint64(cur+1)<<32) {
				break
			}
		}
		s.ops.Store(0)
		ss.resetOps(i)
		s.sweepStep(uint32(cur + 1))
	}
	return s.clock.Load()
}

// sweepStep refreshes the next slice of the table to window win, sized so
// that the whole table is refreshed every sweepWindows windows. s.mu is
// held.
func (s *scyllaShard) sweepStep(win uint32) {
	n := max(len(s.entries)/(sweepWindows/2), 1)
	mask := len(s.entries) - 1
	for range n {
		s.refresh(&s.entries[s.sweep], win)
		s.sweep = (s.sweep + 1) & mask
	}
}

// refresh brings e's count up to window win, the shard's current one.
func (s *scyllaShard) refresh(e *scyllaEntry, win uint32) {
	for {
		w := e.word.Load()
		if w&entryLocked != 0 {
			runtime.Gosched()
			continue
		}
		// With s.mu held at window win no entry is stamped later:
		// a stamp that looks later is an old one that wrapped.
		n, current := s.aged(w, win)
		if !current {
			n = 0
		}
		if e.word.CompareAndSwap(w, scyllaWord(wordLabel(w), n, win)) {
			return
		}
	}
}

// zero sets e's count to zero in window win. Decisions that read the clock
// before win find e stamped in a later window and read the clock again.
func (e *scyllaEntry) zero(win uint32) {
	for {
		w := e.word.Load()
		if w&entryLocked != 0 {
			runtime.Gosched()
			continue
		}
		if e.word.CompareAndSwap(w, scyllaWord(wordLabel(w), 0, win)) {
			return
		}
	}
}

// aged returns the count in word w as of window win, with the windows since
// it was last updated applied: for each, that window's lossy-counting
// decrease, then a halving. current is false if w was stamped in a window
// later than win, by a decision that read the clock after the caller did.
func (s *scyllaShard) aged(w uint64, win uint32) (n uint32, current bool) {
	k := (win - wordWindow(w)) & windowMask
	n = wordCount(w)
	switch {
	case k == 0:
		return n, true
	case k >= sweepWindows:
		return 0, false
	case k >= halvings:
		return 0, true
	}
	for ; k > 0; k-- {
		n = subSat(n, s.past[(win-k)%pastWindows].Load()) >> 1
	}
	return n, true
}

// count finds or allocates the entry for (token, label), counts one
// operation on it at clock c, and returns its count, lossy-counting bucket
// included, and the clock it counted at, which is c or a later reading.
// ok is false if no entry was found or free on the probe sequence.
//
// Like ScyllaDB, the search stops at the first free entry. If an entry
// earlier on a partition's probe sequence expires, the partition gets a
// second, fresh entry there and its count restarts; this moves the
// partition earlier on its sequence, so it happens at most a few times to
// any one partition, and the stale entry expires on its own.
func (s *scyllaShard) count(st *stripe, token uint64, label uint32, h uint64, c uint64) (n uint32, at uint64, ok bool) {
	mask := uint64(len(s.entries) - 1)
	i := h
	for p := uint64(0); p < probes; p++ {
		i = (i + p) & mask
		e := &s.entries[i]
		for {
			w := e.word.Load()
			if w&entryLocked != 0 {
				runtime.Gosched() // another decision is taking the entry
				continue
			}
			win, bucket := uint32(c>>32), uint32(c)
			n, current := s.aged(w, win)
			if !current {
				// Stamped in a window this decision's clock reading
				// predates: read the clock again, and if it has not
				// moved yet, let the decision moving it finish.
				if c2 := s.clock.Load(); c2 != c {
					c = c2
					continue
				}
				// Wait out an advance in progress; if the clock has
				// still not moved, no later window exists and the
				// stamp is an old one that wrapped: expire it.
				s.mu.Lock()
				if c2 := s.clock.Load(); c2 == c {
					s.refresh(e, win)
				}
				c = s.clock.Load()
				s.mu.Unlock()
				continue
			}
			if n <= bucket {
				// Free: take it, for this partition if it was another's.
				if !e.word.CompareAndSwap(w, w|entryLocked) {
					continue
				}
				if t := e.token.Load(); t != token || wordLabel(w) != label {
					if t != 0 || wordLabel(w) != 0 {
						st.evictions.Add(1)
					}
					e.token.Store(token)
				}
				st.allocations.Add(1)
				n = min(bucket+1, maxCount)
				e.word.Store(scyllaWord(label, n, win))
				return n, c, true
			}
			if wordLabel(w) != label || e.token.Load() != token {
				break // another partition's: probe on
			}
			n = min(n+1, maxCount)
			if e.word.CompareAndSwap(w, scyllaWord(label, n, win)) {
				return n, c, true
			}
		}
	}
	return 0, c, false
}

// addStats adds the shard's table figures to st, bringing the shard to
// window win first so that occupancy reflects expired counts.
func (s *scyllaShard) addStats(st *Stats, ss *stripeSet, i int, win int64) {
	c := s.clock.Load()
	if win > int64(c>>32) {
		c = s.advance(ss, i, win)
	}
	st.Capacity += uint64(len(s.entries))
	for j := range s.entries {
		n, current := s.aged(s.entries[j].word.Load(), uint32(c>>32))
		if !current || n > uint32(c) {
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
