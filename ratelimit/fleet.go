package ratelimit

import (
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"math"
	"slices"
	"sync/atomic"
)

// Fleet holds what one proxy knows of a whole fleet's load on its hot
// partitions, so that the fleet together admits a partition's limit rather
// than each proxy admitting it. It is the local half of batch reporting: the
// request path counts, here, the operations each tracked partition let
// through its local Limiter; something else (package fleet) collects those
// counts every interval, reports them, learns the fleet-wide rate, and sets
// the share of operations each partition may still admit until the next
// report. Between reports a decision reads only this table.
//
// A partition is tracked from one of the first operations Admit sees for
// it, in a table of fixed size: buckets of four entries, one cache line of
// keys each. A partition whose bucket is full is not tracked, and is limited by
// the local Limiter alone. Collect forgets the partitions that were not
// hot enough to report, so the table holds what is hot now.
//
// Fleet takes no lock. An entry is written by the operations of its own
// partition and by the one goroutine that calls Collect and Set.
type Fleet struct {
	salt    uint64
	buckets []fleetBucket
	entries []fleetEntry
	mask    uint64
	// divisor divides local limits while the fleet cannot be reached and
	// the fallback is to share the limit (LocalLimit); 1 otherwise.
	divisor atomic.Uint32
}

// fleetBucket is the keys of four entries: a word of label and state, and
// the token.
type fleetBucket struct {
	keys   [4]atomic.Uint64
	tokens [4]atomic.Int64
}

// Key words: 0 is a free entry, keyBusy one being filled, and a tracked
// partition's is its label shifted up with keyUsed set.
const (
	keyBusy = 2
	keyUsed = 1
)

// fleetEntry is a tracked partition's counts and its share.
type fleetEntry struct {
	// hits counts operations offered since the last Collect.
	hits  atomic.Uint32
	limit atomic.Uint32
	// admit is the share of operations to admit, 16.16 fixed point in the
	// high word, and the time it holds until, in milliseconds of the
	// caller's clock modulo 2^32, in the low word; 0 when there is none.
	admit atomic.Uint64
	// credit accumulates the share per operation, 16.16 fixed point; an
	// operation is admitted when it reaches one, so that a share of 1/5
	// admits exactly every fifth operation rather than a random fifth.
	credit atomic.Uint32
	// rate is the fleet's rate of the partition last remembered, per
	// second; 0 when none is known.
	rate atomic.Uint32
	_    [36]byte // one entry per cache line: hot partitions do not share
}

// one is 1 in 16.16 fixed point.
const one = 1 << 16

// NewFleet returns a Fleet that tracks up to entries partitions (rounded up
// to a power of two, at least 4).
func NewFleet(entries int) *Fleet {
	n := 1
	for n*4 < entries {
		n *= 2
	}
	var b [8]byte
	rand.Read(b[:])
	f := &Fleet{
		salt:    binary.LittleEndian.Uint64(b[:]),
		buckets: make([]fleetBucket, n),
		entries: make([]fleetEntry, 4*n),
		mask:    uint64(n - 1),
	}
	f.divisor.Store(1)
	return f
}

// Admit counts an operation offered to a partition, and reports whether the
// fleet admits it: true unless the partition has a current share below one
// and this operation is past it. An operation it admits is then for the
// local Limiter to decide.
// limit is the partition's limit for the whole fleet, kept for Collect.
// now is in nanoseconds on the caller's clock, as given to Set.
func (f *Fleet) Admit(now int64, token int64, label Label, limit uint32) bool {
	ok, _ := f.decide(now, token, label, limit)
	return ok
}

// Decide is Admit, and also returns the limit the local Limiter is to
// apply to what the fleet admits: LocalLimit's, or twice it while a share
// below one holds this proxy to its part of the limit. A proxy admitting
// exactly its part, all of the limit when it has all the traffic, would
// otherwise feed its local bucket at the rate it refills, left empty by
// the partition's first second, and the jitter of arrivals would refuse
// some of what the fleet admits (a lone proxy admitted 7% under its limit
// in such seconds); twice still stops a proxy that the fleet's view is
// late for from admitting much more than the limit.
func (f *Fleet) Decide(now int64, token int64, label Label, limit uint32) (admit bool, local uint32) {
	ok, shared := f.decide(now, token, label, limit)
	local = f.LocalLimit(limit)
	if shared {
		local = uint32(min(2*uint64(local), math.MaxUint32))
	}
	return ok, local
}

// decide is Admit, and also reports whether a current share below one
// decided.
func (f *Fleet) decide(now int64, token int64, label Label, limit uint32) (admit, shared bool) {
	h := mix(uint64(token) ^ uint64(label)<<32 ^ f.salt)
	bi := h & f.mask
	b := &f.buckets[bi]
	want := uint64(label)<<32 | keyUsed
	for i := range b.keys {
		if b.keys[i].Load() == want && b.tokens[i].Load() == token {
			e := &f.entries[bi*4+uint64(i)]
			if e.limit.Load() != limit {
				e.limit.Store(limit) // a reload changed it
			}
			return e.admitAt(now)
		}
	}
	// A partition not tracked yet is taken in at one operation in eight,
	// picked by the clock: a hot one within a few operations, while a
	// stream of cold ones (uniform traffic, or a client spraying keys)
	// costs a bucket read and rarely takes a place.
	if (now>>10)&7 != 0 {
		return true, false
	}
	for i := range b.keys {
		if b.keys[i].Load() == 0 && b.keys[i].CompareAndSwap(0, keyBusy) {
			b.tokens[i].Store(token)
			e := &f.entries[bi*4+uint64(i)]
			e.limit.Store(limit)
			e.admit.Store(0)
			e.credit.Store(0)
			e.rate.Store(0)
			e.hits.Store(1)
			b.keys[i].Store(want)
			return true, false
		}
	}
	return true, false // not tracked: the local Limiter decides alone
}

func (e *fleetEntry) admitAt(now int64) (admit, shared bool) {
	e.hits.Add(1)
	a := e.admit.Load()
	share := uint32(a >> 32)
	// The deadline is kept modulo 2^32 ms and compared as a difference,
	// which holds for shares set less than 24 days apart from a reading.
	if a == 0 || share >= one || int32(uint32(now/1e6)-uint32(a)) > 0 {
		return true, false
	}
	for {
		c := e.credit.Load()
		n := c + share
		if n >= one {
			if e.credit.CompareAndSwap(c, n-one) {
				return true, true
			}
		} else if e.credit.CompareAndSwap(c, n) {
			return false, true
		}
	}
}

// FleetEntry is a tracked partition as Collect reports it.
type FleetEntry struct {
	Token int64
	Label Label
	// Limit is the partition's limit for the whole fleet.
	Limit uint32
	// Hits is the operations offered to it since the last Collect.
	Hits uint32
	// Rate is the fleet's rate of it last given to Remember, per second;
	// 0 when none is known.
	Rate uint32
	slot uint32
}

// Collect appends to dst the tracked partitions whose hits since the last
// Collect are at least min(Limit) (hot enough to report), hottest first,
// at most max of them, and starts their counts again. The others are
// forgotten: a partition still busy is tracked again from its next
// operation. Shares past their time (now, on Set's clock) are dropped, so
// that none comes back when the clock's milliseconds wrap. It is meant for
// one goroutine, which alone calls Collect and Set.
func (f *Fleet) Collect(dst []FleetEntry, now int64, min func(limit uint32) uint32, max int) []FleetEntry {
	start := len(dst)
	for bi := range f.buckets {
		b := &f.buckets[bi]
		for i := range b.keys {
			k := b.keys[i].Load()
			if k&keyUsed == 0 {
				continue
			}
			slot := uint32(bi*4 + i)
			e := &f.entries[slot]
			if a := e.admit.Load(); a != 0 && int32(uint32(now/1e6)-uint32(a)) > 0 {
				e.admit.CompareAndSwap(a, 0)
			}
			hits := e.hits.Swap(0)
			limit := e.limit.Load()
			if hits == 0 || hits < min(limit) {
				// A concurrent operation may count into an entry being
				// freed: it loses one count of a partition that is cold.
				b.keys[i].CompareAndSwap(k, 0)
				continue
			}
			dst = append(dst, FleetEntry{Token: b.tokens[i].Load(), Label: Label(k >> 32), Limit: limit, Hits: hits, Rate: e.rate.Load(), slot: slot})
		}
	}
	got := dst[start:]
	if len(got) > max {
		slices.SortFunc(got, func(a, b FleetEntry) int { return cmp.Compare(b.Hits, a.Hits) })
		dst = dst[:start+max]
	}
	return dst
}

// owns reports whether e's slot still holds e's partition: it may have
// been taken by another since Collect returned e.
func (f *Fleet) owns(e FleetEntry) bool {
	b := &f.buckets[e.slot/4]
	i := e.slot % 4
	return b.keys[i].Load() == uint64(e.Label)<<32|keyUsed && b.tokens[i].Load() == e.Token
}

// Set gives the partition of an entry Collect returned the share of its
// operations to admit (0 to 1) until the caller's clock reads until
// (nanoseconds). The entry may have been taken by another partition since:
// Set checks, and then does nothing.
func (f *Fleet) Set(e FleetEntry, share float64, until int64) {
	if !f.owns(e) {
		return
	}
	s := uint64(one)
	if share < 1 {
		// Rounded up, so that a share never admits less than it says.
		s = uint64(math.Ceil(max(share, 0) * one))
	}
	f.entries[e.slot].admit.Store(s<<32 | uint64(uint32(until/1e6)))
}

// Remember keeps rate, the fleet's rate of the partition of an entry
// Collect returned, for Collect to report with it while the partition is
// tracked.
func (f *Fleet) Remember(e FleetEntry, rate float64) {
	if f.owns(e) {
		f.entries[e.slot].rate.Store(uint32(min(max(rate, 0), math.MaxUint32)))
	}
}

// Return gives back the hits of an entry Collect returned, so that the next
// Collect counts them again: what a report that failed did not deliver.
func (f *Fleet) Return(e FleetEntry) {
	if f.owns(e) {
		f.entries[e.slot].hits.Add(e.Hits)
	}
}

// LocalLimit is the limit a local Limiter applies to a partition whose
// fleet-wide limit is limit: limit itself, or its share of the fleet's
// proxies while SetDivisor says the fleet cannot be reached (at least 1).
func (f *Fleet) LocalLimit(limit uint32) uint32 {
	if d := f.divisor.Load(); d > 1 {
		return max(limit/d, 1)
	}
	return limit
}

// SetDivisor sets what LocalLimit divides limits by: the number of proxies
// sharing them, or 1 to apply them whole.
func (f *Fleet) SetDivisor(d uint32) { f.divisor.Store(max(d, 1)) }
