package ratelimit

import (
	"crypto/rand"
	"encoding/binary"
	"math"
	"sync"
	"sync/atomic"
)

// Units keeps, for each partition that spends any, a budget in units per
// second (request units, say) that its operations pay for once their cost
// is known: a token bucket per partition that holds up to one second of
// its rate, admits while it is not in debt, and is charged after the fact,
// into debt if need be (Budget is the same for one budget). Its memory is
// fixed when it is made: partitions live in a table of entries, and a
// partition whose bucket is full again gives its entry up, so the table
// holds only partitions that spent recently. A partition that finds no
// entry on its probe sequence is not charged (fail open), which Stats
// counts. Safe for concurrent use; it allocates nothing after New.
type Units struct {
	shards []unitShard
	mask   uint64
	salt   uint64
	failed atomic.Uint64
}

type unitShard struct {
	mu      sync.Mutex
	entries []unitEntry
	_       cacheLinePad
}

// unitEntry is one partition's bucket. tokens is what it holds at last,
// negative in debt.
type unitEntry struct {
	token  int64
	last   int64
	tokens float64
	label  Label
	used   bool
}

// unitProbe bounds the entries a partition may take along its probe
// sequence.
const unitProbe = 8

// unitEntryBytes is what an entry takes, for sizing a table from memory.
const unitEntryBytes = 40

// NewUnits returns a Units with about memoryBytes of entries, at least one
// probe sequence's worth per shard.
func NewUnits(memoryBytes int) *Units {
	shards := 16
	per := max(floorPow2(memoryBytes/shards/unitEntryBytes), unitProbe)
	u := &Units{shards: make([]unitShard, shards), mask: uint64(per - 1)}
	var b [8]byte
	rand.Read(b[:]) // never fails, as of Go 1.24
	u.salt = binary.LittleEndian.Uint64(b[:])
	for i := range u.shards {
		u.shards[i].entries = make([]unitEntry, per)
	}
	return u
}

// Allow reports whether the partition with the given token and label may
// take an operation at now (nanoseconds): whether its budget of perSecond
// units a second is out of debt. A partition that spent nothing recently
// is.
func (u *Units) Allow(now, token int64, label Label, perSecond float64) bool {
	s, h := u.shard(token, label)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.find(h, token, label)
	if e == nil {
		return true
	}
	return e.refill(now, perSecond) >= 0
}

// Charge spends units of the partition's budget of perSecond units a
// second at now, into debt if need be. A debt is capped at a minute's
// rate, so that one absurd charge does not refuse the partition for
// longer.
func (u *Units) Charge(now, token int64, label Label, perSecond, units float64) {
	if !(units > 0) || !(perSecond > 0) {
		return
	}
	s, h := u.shard(token, label)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.find(h, token, label)
	if e == nil {
		if e = s.take(h, now, perSecond); e == nil {
			u.failed.Add(1)
			return
		}
		*e = unitEntry{token: token, label: label, used: true, last: now, tokens: perSecond}
	}
	e.refill(now, perSecond)
	e.tokens = math.Max(e.tokens-units, -60*perSecond)
}

// Failed returns how many charges found no entry and were not made.
func (u *Units) Failed() uint64 { return u.failed.Load() }

func (u *Units) shard(token int64, label Label) (*unitShard, uint64) {
	h := mix(uint64(token) ^ uint64(label)<<32 ^ u.salt)
	return &u.shards[h%uint64(len(u.shards))], (h >> 8) & u.mask
}

// find returns the partition's entry on its probe sequence, or nil.
func (s *unitShard) find(h uint64, token int64, label Label) *unitEntry {
	mask := uint64(len(s.entries) - 1)
	for i := range uint64(unitProbe) {
		e := &s.entries[(h+i)&mask]
		if e.used && e.token == token && e.label == label {
			return e
		}
	}
	return nil
}

// take returns an entry on the probe sequence that is free, or whose
// bucket is full again at now (its partition is as if it had never
// spent), or nil.
func (s *unitShard) take(h uint64, now int64, perSecond float64) *unitEntry {
	mask := uint64(len(s.entries) - 1)
	for i := range uint64(unitProbe) {
		e := &s.entries[(h+i)&mask]
		if !e.used {
			return e
		}
		// An entry's own rate is not kept: it is judged full when a second
		// has passed since it was last charged and it was not in debt
		// deeper than that second repays at the rate asked now.
		if now-e.last >= 1e9 && e.tokens+float64(now-e.last)/1e9*perSecond >= perSecond {
			return e
		}
	}
	return nil
}

// refill brings the bucket up to now at perSecond, holding at most one
// second of it, and returns its balance. Time never runs back.
func (e *unitEntry) refill(now int64, perSecond float64) float64 {
	if now > e.last {
		e.tokens = math.Min(perSecond, e.tokens+float64(now-e.last)/1e9*perSecond)
		e.last = now
	}
	return e.tokens
}
