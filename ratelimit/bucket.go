package ratelimit

import "sync"

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
type bucketEntry struct {
	token uint64
	// full is when the bucket will be full, in clock nanoseconds; 0 marks
	// an entry never used, where a probe sequence may stop searching.
	full  int64
	label uint32
	_     uint32
}

// bucketShard is one shard's table of token buckets, guarded by mu.
type bucketShard struct {
	mu      sync.Mutex
	entries []bucketEntry // a power of two of them
	stats   shardStats
	_       cacheLinePad
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
func (s *bucketShard) allow(token uint64, label uint32, h uint64, now, every, burst int64) Decision {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.lookup(token, label, h, now)
	if e == nil {
		return s.stats.count(AcceptUntracked)
	}
	full := max(e.full, now) + every
	if full-now > max(burst, every) {
		// Rejected operations take no token, so a partition offered more
		// than its rate still gets exactly its rate through.
		return s.stats.count(Reject)
	}
	if full == 0 {
		full = 1 // 0 means never used
	}
	e.full = full
	return s.stats.count(Accept)
}

// lookup returns the entry for (token, label), allocating a free one if it
// has none, or nil if the probe sequence has neither.
//
// Unlike AlgorithmScylla, the search goes past free entries, stopping only
// at a never-used one: a partition in debt whose entry sits behind an entry
// that has since been freed must find its own entry, not a fresh bucket.
func (s *bucketShard) lookup(token uint64, label uint32, h uint64, now int64) *bucketEntry {
	mask := uint64(len(s.entries) - 1)
	var free *bucketEntry
	i := h
	for p := range uint64(probes) {
		i = (i + p) & mask
		e := &s.entries[i]
		if e.full == 0 {
			if free == nil {
				free = e
			}
			break
		}
		if e.token == token && e.label == label {
			return e
		}
		if free == nil && e.full <= now {
			free = e
		}
	}
	if free == nil {
		return nil
	}
	s.stats.allocations++
	if free.full != 0 {
		s.stats.evictions++
	}
	free.token, free.label, free.full = token, label, now
	return free
}

// addStats adds the shard's counters to st; entries in debt at time now
// count as live.
func (s *bucketShard) addStats(st *Stats, now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.add(st)
	st.Capacity += uint64(len(s.entries))
	for i := range s.entries {
		if s.entries[i].full > now {
			st.Entries++
		}
	}
}
