package hotread

import (
	"math/bits"
	"math/rand/v2"
	"sync/atomic"
)

// Gen is the write generation a read started at: the counts of writes to
// its partition, to its table and to everything. An answer is only good for
// reads at the same Gen.
type Gen struct {
	part, table, all uint64
}

// Generations counts writes in fixed memory: per partition and per table in
// arrays of counters indexed by a hash, so that two partitions (or tables)
// sharing a counter only invalidate each other more often, never less. Safe
// for concurrent use, allocation-free.
//
// For a cached answer never to be older than a write the client has seen
// acknowledged, the proxy calls Wrote when the write's answer comes back,
// before it passes it on: any read whose Gen was taken before that may have
// read the partition before the write and is invalidated, and any read
// whose Gen is taken after it started after the write was applied.
type Generations struct {
	mask  uint64
	salt  uint64 // keeps clients from choosing partitions that share a counter
	all   atomic.Uint64
	parts []atomic.Uint64
	tabs  []atomic.Uint64
}

// NewGenerations returns counters for slots partitions and as many tables;
// slots is rounded up to a power of two, at least 1.
func NewGenerations(slots int) *Generations {
	n := uint64(1)
	if slots > 1 {
		n = 1 << bits.Len64(uint64(slots-1))
	}
	return &Generations{
		mask:  n - 1,
		salt:  rand.Uint64(),
		parts: make([]atomic.Uint64, n),
		tabs:  make([]atomic.Uint64, n),
	}
}

// partSlot returns the counter of a partition.
func (g *Generations) partSlot(table uint32, token int64) *atomic.Uint64 {
	return &g.parts[mix(uint64(token)^mix(uint64(table)^g.salt))&g.mask]
}

// tableSlot returns the counter of a table.
func (g *Generations) tableSlot(table uint32) *atomic.Uint64 {
	return &g.tabs[mix(uint64(table)+g.salt)&g.mask]
}

// At returns the generation a read of the partition starts at now.
func (g *Generations) At(table uint32, token int64) Gen {
	return Gen{
		part:  g.partSlot(table, token).Load(),
		table: g.tableSlot(table).Load(),
		all:   g.all.Load(),
	}
}

// Wrote records a write to one partition.
func (g *Generations) Wrote(table uint32, token int64) { g.partSlot(table, token).Add(1) }

// WroteTable records a write the proxy cannot pin to partitions, such as a
// range delete or a TRUNCATE, which invalidates every partition of table.
func (g *Generations) WroteTable(table uint32) { g.tableSlot(table).Add(1) }

// WroteAll records anything that may change any table (DDL, requests the
// proxy does not understand): it invalidates every read.
func (g *Generations) WroteAll() { g.all.Add(1) }

// mix is the splitmix64 finalizer: every output bit depends on every input
// bit, so that nearby tokens and labels land on unrelated counters.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
