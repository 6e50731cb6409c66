package ratelimit

import (
	"runtime"
	"sync/atomic"
)

// bucketEntrySize is the size of a bucketEntry in bytes.
const bucketEntrySize = 24

// bucketEntry is one partition's token bucket, kept as the time at which
// the bucket will be full again (the "theoretical arrival time" of the
// generic cell rate algorithm): one number instead of a level and a time,
// and refilling is implicit in the clock moving on.
//
// A bucket whose full time is in the future is in debt: the partition has
// used tokens faster than the rate gives them back, and the debt is what it
// must wait out. An entry is free for another partition only once its
// bucket is full again (full <= now), when forgetting it changes nothing: a
// partition that comes back gets the full bucket it would have had anyway.
// So eviction never hands a hot partition a fresh bucket. The flip side is
// that a table full of partitions in debt cannot take new ones; those fail
// open and are counted, as with AlgorithmScylla.
//
// Each entry has a lock bit of its own instead of a lock per table, so that
// decisions on different partitions touch no common cache line. Searches
// read entries without taking it, then take it and check again.
type bucketEntry struct {
	token atomic.Uint64
	// full is when the bucket will be full, in clock nanoseconds; 0 marks
	// an entry never used, where a probe sequence may stop searching.
	full atomic.Int64
	// word is label<<32 | locked.
	word atomic.Uint64
}

// lock takes e's lock bit and returns e's word.
func (e *bucketEntry) lock() uint64 {
	for {
		w := e.word.Load()
		if w&entryLocked == 0 && e.word.CompareAndSwap(w, w|entryLocked) {
			return w
		}
		runtime.Gosched()
	}
}

// unlock releases e's lock bit, leaving e's word as w.
func (e *bucketEntry) unlock(w uint64) { e.word.Store(w &^ entryLocked) }

// owns reports whether e, locked with word w, is (token, label)'s entry.
func (e *bucketEntry) owns(w uint64, token uint64, label uint32) bool {
	return e.full.Load() != 0 && wordLabel(w) == label && e.token.Load() == token
}

// bucketShard is one shard's table of token buckets.
type bucketShard struct {
	entries []bucketEntry // a power of two of them
}

// interval returns the time one token takes to refill at limit per second.
// It rounds down, so that a bucket always holds at least its capacity in
// tokens: the rate is then high by less than limit/1e9 relative (0.1% at a
// million per second), and limits above 1e9 per second are unlimited.
func interval(limit uint32) int64 {
	return 1e9 / int64(limit)
}

// allow decides one operation on (token, label), whose slot hash is h, at
// time now: tokens refill one per every nanoseconds, and the bucket holds
// burst nanoseconds' worth (at least one token).
func (s *bucketShard) allow(st *stripe, token uint64, label uint32, h uint64, now, every, burst int64) Decision {
	e, w := s.lookup(st, token, label, h, now)
	if e == nil {
		return st.count(AcceptUntracked)
	}
	full := max(e.full.Load(), now) + every
	if full-now > max(burst, every) {
		// Rejected operations take no token, so a partition offered more
		// than its rate still gets exactly its rate through.
		e.unlock(w)
		return st.count(Reject)
	}
	if full == 0 {
		full = 1 // 0 means never used
	}
	e.full.Store(full)
	e.unlock(w)
	return st.count(Accept)
}

// lookup returns the entry for (token, label), locked, with its word,
// allocating a free one if it has none, or nil if the probe sequence has
// neither.
//
// Unlike AlgorithmScylla, the search goes past free entries, stopping only
// at a never-used one: a partition in debt whose entry sits behind an entry
// that has since been freed must find its own entry, not a fresh bucket.
func (s *bucketShard) lookup(st *stripe, token uint64, label uint32, h uint64, now int64) (*bucketEntry, uint64) {
	mask := uint64(len(s.entries) - 1)
search:
	for {
		var free *bucketEntry
		i := h
		for p := uint64(0); p < probes; p++ {
			i = (i + p) & mask
			e := &s.entries[i]
			full := e.full.Load()
			if full == 0 {
				if free == nil {
					free = e
				}
				break
			}
			if wordLabel(e.word.Load()) == label && e.token.Load() == token {
				w := e.lock()
				if e.owns(w, token, label) {
					return e, w
				}
				e.unlock(w) // taken by another partition meanwhile
				continue
			}
			if free == nil && full <= now {
				free = e
			}
		}
		if free == nil {
			return nil, 0
		}
		w := free.lock()
		if free.owns(w, token, label) {
			return free, w // a concurrent decision allocated it
		}
		// Two first decisions on one partition that read the table at
		// different times may take two free entries; the later entry on
		// the probe sequence then holds one operation and expires. The
		// partition gets at most one token more, once.
		old := free.full.Load()
		if old > now {
			free.unlock(w) // taken meanwhile: search again
			continue search
		}
		st.allocations.Add(1)
		if old != 0 {
			st.evictions.Add(1)
		}
		free.token.Store(token)
		free.full.Store(now)
		return free, uint64(label) << 32
	}
}

// addStats adds the shard's table figures to st; entries in debt at time
// now count as live.
func (s *bucketShard) addStats(st *Stats, now int64) {
	st.Capacity += uint64(len(s.entries))
	for i := range s.entries {
		if s.entries[i].full.Load() > now {
			st.Entries++
		}
	}
}
