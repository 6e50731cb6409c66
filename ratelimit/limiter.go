package ratelimit

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"time"
)

// Label identifies what is counted for a partition, such as the reads or the
// writes of one table. The caller assigns labels; two labels on the same token
// are counted separately.
type Label uint32

// Decision is the outcome of counting one operation.
type Decision uint8

const (
	// Accept admits the operation; its partition is under its limit.
	Accept Decision = iota
	// Reject refuses the operation; its partition is over its limit.
	Reject
	// AcceptUntracked admits the operation without counting it, because its
	// shard's table had no free slot on the partition's probe sequence.
	// Failing open keeps a flood of distinct partitions from turning into
	// refused requests; the limiter's FailedAllocations counts these.
	AcceptUntracked
)

// Accepted reports whether the operation may proceed.
func (d Decision) Accepted() bool { return d != Reject }

// String returns the decision's name, for logs and metric labels.
func (d Decision) String() string {
	switch d {
	case Accept:
		return "accept"
	case Reject:
		return "reject"
	case AcceptUntracked:
		return "accept_untracked"
	}
	return fmt.Sprintf("Decision(%d)", uint8(d))
}

// Algorithm names accepted in Config.Algorithm.
const (
	// AlgorithmScylla is ScyllaDB's per-partition limiter: counts halved every
	// wall-clock second, lossy counting, and above twice the limit rejection
	// with a probability that leaves the limit accepted on average.
	AlgorithmScylla = "scylla"
	// AlgorithmTokenBucket is a token bucket per partition: rate equal to the
	// limit, capacity Config.Burst seconds of that rate.
	AlgorithmTokenBucket = "token-bucket"
)

// DefaultMemoryBytes is the table memory used when Config.MemoryBytes is 0:
// 262,144 ScyllaDB-sized entries, four times one ScyllaDB shard's table.
const DefaultMemoryBytes = 4 << 20

// minShardEntries is the smallest table a shard may have: a table smaller
// than the probe sequence would probe the same slots repeatedly.
const minShardEntries = 64

// ErrConfig is wrapped by the errors New returns for an invalid Config.
var ErrConfig = errors.New("invalid rate limiter config")

// Config configures a Limiter. The zero value is a valid configuration.
type Config struct {
	// Algorithm is AlgorithmScylla (the default when empty) or
	// AlgorithmTokenBucket.
	Algorithm string
	// MemoryBytes is the total size of the counter tables, split evenly over
	// the shards; each shard's table is rounded down to a power of two
	// entries. 0 means DefaultMemoryBytes. Memory is allocated once, by New.
	MemoryBytes int
	// Shards is the number of tables; a partition's shard is chosen by
	// its token. Each AlgorithmScylla shard ages its counts on its own
	// clock, and counts its own operations for lossy counting. 0 means
	// runtime.GOMAXPROCS(0).
	Shards int
	// Burst is the token bucket's capacity, in seconds of the limit's rate:
	// 1 lets a partition that was idle send one second's worth of operations
	// at once. 0 means 1. Ignored by AlgorithmScylla.
	Burst float64
	// Clock returns the current time in nanoseconds since the Unix epoch.
	// AlgorithmScylla halves its counts when the clock crosses a second, so
	// that limiters on several machines with synchronized clocks halve
	// together. Nil means the system clock, read through Go's monotonic clock
	// so that steps of the wall clock after New do not disturb the counts.
	Clock func() int64
	// Seed, if not 0, makes the limiter deterministic: the hash salt and the
	// random draws of AlgorithmScylla derive from it, and every decision
	// writes its statistics to one set of counters, which costs scaling
	// with cores. 0 means a salt and draws seeded from crypto/rand, so that
	// clients cannot aim collisions.
	Seed uint64
}

// A Limiter counts operations per (token, label) and decides whether to admit
// them. It is safe for concurrent use. Allow does not allocate and takes no
// lock shared between partitions: decisions on different partitions from
// different cores write no common cache line, so they scale with cores.
type Limiter struct {
	now       func() int64
	tokenSalt uint64 // picks the shard, and is the start of the slot hash
	slotSalt  uint64 // mixed with the label into the slot hash
	burst     int64  // token bucket tolerance, nanoseconds
	startSec  int64  // AlgorithmScylla's window 0, in Unix seconds
	scylla    []scyllaShard
	bucket    []bucketShard
	perShard  int
	stripes   stripeSet
}

// layout is a Config with its defaults applied and its tables sized.
type layout struct {
	algorithm        string
	shards, perShard int
	burst            float64
}

// resolve applies cfg's defaults and sizes its tables, or says why New
// would refuse it.
func (cfg Config) resolve() (layout, error) {
	alg := cfg.Algorithm
	if alg == "" {
		alg = AlgorithmScylla
	}
	var entrySize int
	switch alg {
	case AlgorithmScylla:
		entrySize = scyllaEntrySize
	case AlgorithmTokenBucket:
		entrySize = bucketEntrySize
	default:
		return layout{}, fmt.Errorf("ratelimit: algorithm %q (want %q or %q): %w",
			cfg.Algorithm, AlgorithmScylla, AlgorithmTokenBucket, ErrConfig)
	}
	shards := cfg.Shards
	if shards == 0 {
		shards = runtime.GOMAXPROCS(0)
	}
	if shards < 0 {
		return layout{}, fmt.Errorf("ratelimit: %d shards: %w", shards, ErrConfig)
	}
	mem := cfg.MemoryBytes
	if mem == 0 {
		mem = DefaultMemoryBytes
	}
	if mem < 0 {
		return layout{}, fmt.Errorf("ratelimit: memory %d bytes: %w", mem, ErrConfig)
	}
	perShard := floorPow2(mem / shards / entrySize)
	if perShard < minShardEntries {
		return layout{}, fmt.Errorf("ratelimit: memory %d bytes over %d shards gives %d entries of %d bytes per shard, need at least %d: %w",
			mem, shards, perShard, entrySize, minShardEntries, ErrConfig)
	}
	burst := cfg.Burst
	if burst == 0 {
		burst = 1
	}
	if !(burst > 0) || burst > math.MaxInt64/1e9 {
		return layout{}, fmt.Errorf("ratelimit: burst %v seconds: %w", cfg.Burst, ErrConfig)
	}
	return layout{algorithm: alg, shards: shards, perShard: perShard, burst: burst}, nil
}

// Validate reports why New would refuse cfg, without allocating its
// tables: with Shards 0, the answer depends on the machine's processors.
func (cfg Config) Validate() error {
	_, err := cfg.resolve()
	return err
}

// New returns a Limiter configured by cfg, with its tables allocated.
func New(cfg Config) (*Limiter, error) {
	lay, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	alg, shards, perShard, burst := lay.algorithm, lay.shards, lay.perShard, lay.burst
	seed := cfg.Seed
	if seed == 0 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("ratelimit: seeding hash salt: %w", err)
		}
		seed = binary.LittleEndian.Uint64(b[:])
	}
	// The salts and the stripes' generators all come from one stream, so
	// that a seed fixes every one of them.
	src := splitmix(seed)
	l := &Limiter{
		now:       cfg.Clock,
		tokenSalt: src.next(),
		slotSalt:  src.next(),
		burst:     int64(burst * 1e9),
		perShard:  perShard,
	}
	if l.now == nil {
		l.now = monotonicWallClock()
	}
	// Window numbers start at 0, so that 32 bits of them last a century.
	l.startSec = seconds(l.now())
	// The shards' tables are one allocation, so that large pages
	// (makeTable) serve them however many shards share the memory.
	switch alg {
	case AlgorithmScylla:
		l.scylla = make([]scyllaShard, shards)
		all := makeTable[scyllaEntry](shards * perShard)
		for i := range l.scylla {
			l.scylla[i].entries = all[i*perShard : (i+1)*perShard : (i+1)*perShard]
		}
	case AlgorithmTokenBucket:
		l.bucket = make([]bucketShard, shards)
		all := makeTable[bucketEntry](shards * perShard)
		for i := range l.bucket {
			l.bucket[i].entries = all[i*perShard : (i+1)*perShard : (i+1)*perShard]
		}
	}
	stripes := 1
	if cfg.Seed == 0 {
		// A few per processor, so that two processors rarely meet on one
		// after the pool hands stripes out again (see stripeSet).
		stripes = 4 * runtime.GOMAXPROCS(0)
	}
	l.stripes.init(stripes, shards, &src)
	return l, nil
}

// monotonicWallClock returns a clock that reads Unix nanoseconds as of now
// and then advances with Go's monotonic clock, which cannot jump backwards
// when NTP steps the wall clock. It drifts from the wall clock only as fast
// as NTP slews it, which keeps its second boundaries close to other nodes'.
func monotonicWallClock() func() int64 {
	start := time.Now()
	base := start.UnixNano()
	return func() int64 { return base + int64(time.Since(start)) }
}

// seconds returns the wall-clock second that contains ns, rounding down for
// times before the epoch too.
func seconds(ns int64) int64 {
	s := ns / 1e9
	if ns < 0 && ns%1e9 != 0 {
		s--
	}
	return s
}

// floorPow2 returns the largest power of two <= n, or 0 if n < 1.
func floorPow2(n int) int {
	if n < 1 {
		return 0
	}
	p := 1
	for p <= n/2 {
		p *= 2
	}
	return p
}

// Allow counts one operation on the partition with the given token under
// label, and decides it against limit, in operations per second.
//
// A limit of 0 means unlimited: the operation is accepted and not counted,
// as ScyllaDB does not count operations on tables without a limit, so that
// unlimited tables cost no table space. Rejected operations are counted:
// for AlgorithmScylla they raise the partition's count like accepted ones,
// as in ScyllaDB; for AlgorithmTokenBucket they consume nothing.
func (l *Limiter) Allow(token int64, label Label, limit uint32) Decision {
	if limit == 0 {
		return Accept
	}
	return l.AllowAt(l.now(), token, label, limit)
}

// AllowAt is Allow at time now, read from the Config's clock by a caller
// that already holds a reading: reading the clock is half the cost of a
// decision. Readings taken a little before a concurrent caller's are fine;
// a count never runs back.
func (l *Limiter) AllowAt(now int64, token int64, label Label, limit uint32) Decision {
	if limit == 0 {
		return Accept
	}
	th, h := l.hash(token, label)
	st := l.stripes.get()
	var d Decision
	if l.scylla != nil {
		i := pick(th, len(l.scylla))
		d = l.scylla[i].allow(st, &l.stripes, i, uint64(token), uint32(label), h, l.window(now), limit)
	} else {
		s := &l.bucket[pick(th, len(l.bucket))]
		d = s.allow(st, uint64(token), uint32(label), h, now, interval(limit), l.burst)
	}
	l.stripes.put(st)
	return d
}

// hash returns the hashes of (token, label): th picks the shard (pick), h
// the slot in it.
func (l *Limiter) hash(token int64, label Label) (th, h uint64) {
	th = mix(uint64(token) ^ l.tokenSalt)
	return th, mix(th ^ uint64(label) ^ l.slotSalt)
}

// window returns AlgorithmScylla's window for time now: the seconds since
// the limiter's start, or 0 for a clock that stepped back before it. A
// shard's clock holds 32 bits of it: a clock 136 years on stays in the last
// window rather than wrap.
func (l *Limiter) window(now int64) int64 {
	return min(max(seconds(now)-l.startSec, 0), 1<<32-1)
}

// pick maps a hash to one of n shards with a multiply instead of a division.
// It uses the hash's high bits; slots use the low bits of another hash.
func pick(h uint64, n int) int {
	return int((h >> 32) * uint64(n) >> 32)
}

// Request is one partition touched by a multi-partition operation, for
// AllowAll.
type Request struct {
	Token int64
	Label Label
	Limit uint32
}

// AllowAll counts every request, as Allow does, and decides the operation as
// a whole: Reject if any request is rejected, else AcceptUntracked if any was
// not counted, else Accept. It is meant for unlogged batches, whose
// statements ScyllaDB counts one by one.
//
// Every request is counted even after one is rejected, and the counts are
// kept when the whole is rejected: a client that retries a rejected batch
// keeps paying for each of its partitions, and a hot partition in a batch
// cannot hide the others' load. With AlgorithmTokenBucket this means the
// requests accepted in a rejected batch consume their tokens. Requests are
// decided one at a time, so a batch is not atomic with respect to
// concurrent callers.
func (l *Limiter) AllowAll(reqs []Request) Decision {
	d := Accept
	for _, r := range reqs {
		switch l.Allow(r.Token, r.Label, r.Limit) {
		case Reject:
			d = Reject
		case AcceptUntracked:
			if d == Accept {
				d = AcceptUntracked
			}
		}
	}
	return d
}

// Stats are a Limiter's counters, for metrics. Counters only grow; Entries
// is a gauge.
type Stats struct {
	// Capacity is the number of table entries over all shards.
	Capacity uint64
	// Entries is the number of entries holding a live count: occupancy is
	// Entries / Capacity.
	Entries uint64
	// Allocations counts entries taken for a partition not in the table.
	Allocations uint64
	// Evictions counts the allocations that reused an entry last held by
	// another partition, whose count had expired (AlgorithmScylla) or whose
	// bucket had refilled (AlgorithmTokenBucket).
	Evictions uint64
	// FailedAllocations counts operations admitted untracked because no
	// entry was free on their probe sequence (AcceptUntracked).
	FailedAllocations uint64
	// Accepted and Rejected count the decisions on counted operations.
	Accepted, Rejected uint64
}

// Stats returns the limiter's counters. It visits every table entry to count
// the live ones, so it is meant for a metrics scrape, not for the request
// path. Decisions made while it runs may or may not be in the figures.
func (l *Limiter) Stats() Stats {
	var st Stats
	now := l.now()
	for i := range l.scylla {
		l.scylla[i].addStats(&st, &l.stripes, i, l.window(now))
	}
	for i := range l.bucket {
		l.bucket[i].addStats(&st, now)
	}
	l.stripes.addStats(&st)
	return st
}

// probes is the length of a probe sequence; offsets are triangular numbers
// (0, 1, 3, 6, ...), which visit distinct slots of a power-of-two table.
const probes = 32

// cacheLinePad keeps what one core writes off the cache lines of what the
// next core in a slice writes, or of what every core reads.
type cacheLinePad [64]byte
