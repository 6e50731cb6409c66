package ratelimit

import (
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// TopKHalfLife is how fast a TopK forgets: an operation observed this long
// ago weighs half as much as one observed now. Short enough that the
// hottest partitions are those hot in the last few seconds, long enough
// that a partition's rate does not flicker between requests.
const TopKHalfLife = 2 * time.Second

// weightTick is how long a TopK reuses the weight it last computed, to
// save an exponential per operation: operations are timed to the tick,
// which changes a rate by less than ln 2 · weightTick / TopKHalfLife
// (0.035%).
const weightTick = int64(time.Millisecond)

// rescaleAt bounds the exponent of the weights. Past it the counts are
// rescaled so that the weights start again from 1, long before float64
// could overflow.
const rescaleAt = 40

// TopK finds the partitions that take the most operations now, in memory
// fixed when it is made. It is the Space-Saving algorithm of Metwally,
// Agrawal and El Abbadi over exponentially decayed counts, kept as
// "forward decay" (Cormode et al.): an operation at time t adds
// exp(λ·(t-L)) for a fixed landmark L, so that old counts need no update,
// and a count read at time now is divided by exp(λ·(now-L)).
//
// Up to k partitions are tracked, each with its decayed count. A partition
// not tracked takes the place of the one with the smallest count, and
// inherits that count as its possible overestimate. So the counts of
// partitions tracked since they were last absent are exact, and any
// partition whose decayed count exceeds 1/k of the total is tracked.
//
// A partition is identified by its token and label, as in a Limiter; its
// key, for display, is the one it was first observed with since it was last
// tracked, truncated to the size given to NewTopK.
//
// TopK is safe for concurrent use. Observe takes one lock for O(log k) work
// and does not allocate.
type TopK struct {
	mu  sync.Mutex
	now func() int64
	// full is set once k partitions are tracked, which stays so: from then
	// on ObserveSampledAt samples.
	full atomic.Bool

	lambda   float64 // decay rate, per nanosecond
	landmark int64   // clock time at which an operation weighs 1
	last     int64   // latest clock reading, so that time never runs back
	tick     int64   // when weight was computed
	weight   float64 // exp(lambda · (tick - landmark))

	salt  uint64
	index []int32 // open addressing, linear probing: slot number + 1, 0 when free
	slots []topSlot
	heap  []heapEntry // a min-heap by count
	keys  []byte      // slot i's key is keys[i*maxKey:][:slots[i].keyLen]
	// maxKey is the bytes kept of a key.
	maxKey int
}

// topSlot is one tracked partition.
type topSlot struct {
	token     int64
	err       float64 // the part of its count that may belong to partitions it replaced
	label     Label
	heapPos   int32 // its count is heap[heapPos]
	keyLen    int32
	truncated bool
	tag       uint16 // the caller's, as of the last operation
}

// heapEntry is a tracked partition's count, in the heap rather than in its
// slot so that keeping the heap in order reads contiguous memory.
type heapEntry struct {
	// count is the decayed count, times exp(lambda · (now - landmark)).
	count float64
	slot  int32
}

// HotEntry is a partition reported by TopK.Top.
type HotEntry struct {
	Token int64
	Label Label
	// Tag is what the caller tagged the partition's last operation with
	// (ObserveTaggedAt); 0 for none.
	Tag uint16
	// Key is a copy of the partition's key, at most the maxKeyBytes given
	// to NewTopK; Truncated is set when the key was longer.
	Key       []byte
	Truncated bool
	// Rate is the partition's operations per second: the decayed count
	// times the decay rate, which for a partition at a steady rate r tends
	// to r within a few half-lives.
	Rate float64
	// Error bounds Rate's overestimate: the partition's true rate is at
	// least Rate - Error. 0 means exact.
	Error float64
}

// NewTopK returns a TopK that tracks k partitions (at least 1) and keeps up
// to maxKeyBytes of each key, with all its memory allocated. clock returns
// nanoseconds, as Config.Clock; nil means the system's monotonic clock.
func NewTopK(k int, maxKeyBytes int, clock func() int64) *TopK {
	k = max(k, 1)
	maxKeyBytes = max(maxKeyBytes, 0)
	if clock == nil {
		clock = monotonicWallClock()
	}
	var b [8]byte
	rand.Read(b[:]) // never fails, as of Go 1.24
	n := 2
	for n < 2*k {
		n *= 2
	}
	now := clock()
	return &TopK{
		now:      clock,
		lambda:   math.Ln2 / float64(TopKHalfLife),
		landmark: now,
		last:     now,
		tick:     now,
		weight:   1,
		salt:     binary.LittleEndian.Uint64(b[:]),
		index:    make([]int32, n),
		slots:    make([]topSlot, 0, k),
		heap:     make([]heapEntry, 0, k),
		keys:     make([]byte, k*maxKeyBytes),
		maxKey:   maxKeyBytes,
	}
}

// Observe counts one operation on the partition with the given token,
// label and key. It does not allocate.
func (t *TopK) Observe(token int64, label Label, key []byte) {
	t.ObserveAt(t.now(), token, label, key)
}

// ObserveAt is Observe at time now, read from the clock given to NewTopK
// by a caller that already holds a reading. It returns the rate in
// operations per second the partition is known to have at least, counting
// this one: Top's Rate less its RateError. A partition that just replaced
// another has that one's count as its possible overestimate, which is
// left out, so that a cold partition is never taken for a hot one.
func (t *TopK) ObserveAt(now int64, token int64, label Label, key []byte) float64 {
	return t.ObserveTaggedAt(now, token, label, key, 0)
}

// ObserveTaggedAt is ObserveAt that also tags the partition with tag,
// which Top reports: the caller's name for who sent the operation, say.
func (t *TopK) ObserveTaggedAt(now int64, token int64, label Label, key []byte, tag uint16) float64 {
	return t.observe(now, token, label, key, tag, 1)
}

// TopKSampleEvery is how many operations ObserveSampledAt counts one of,
// at random, once a TopK is full.
const TopKSampleEvery = 4

// ObserveSampledAt is ObserveTaggedAt for a caller that needs no rate
// back, at a fraction of the cost under load: while fewer than k
// partitions are tracked it counts every operation, and from then on it
// counts each with probability 1/TopKSampleEvery, as TopKSampleEvery
// operations. Counts stay unbiased. A partition at a steady r operations
// per second is reported at its rate with a relative standard deviation
// of sqrt((TopKSampleEvery-1)·λ/(2r)), λ = ln 2 / TopKHalfLife: 7% at
// 100/s, 2.3% at 1,000/s, 0.7% at 10,000/s. Space-Saving's guarantee
// holds for the counts sampled: any partition above 1/k of them is
// tracked. rng is the caller's random state, of any seed, used by one
// goroutine at a time; the decision to sample takes no lock.
func (t *TopK) ObserveSampledAt(now int64, token int64, label Label, key []byte, tag uint16, rng *uint64) {
	if !t.full.Load() {
		t.observe(now, token, label, key, tag, 1)
		return
	}
	*rng += splitmixGamma
	if mix(*rng)%TopKSampleEvery != 0 {
		return
	}
	t.observe(now, token, label, key, tag, TopKSampleEvery)
}

// observe counts n operations at now on a partition, and returns its rate
// known at least.
func (t *TopK) observe(now int64, token int64, label Label, key []byte, tag uint16, n float64) float64 {
	t.mu.Lock()
	one := t.weightAt(now)
	w := one * n
	h := t.hash(token, label)
	i, pos := t.find(h, token, label)
	var count float64
	switch {
	case i >= 0:
		j := int(t.slots[i].heapPos)
		t.heap[j].count += w
		count = t.heap[j].count - t.slots[i].err
		t.down(j)
	case len(t.slots) < cap(t.slots):
		i = len(t.slots)
		t.slots = t.slots[:i+1]
		t.heap = append(t.heap, heapEntry{count: w, slot: int32(i)})
		count = w
		t.slots[i] = topSlot{token: token, label: label, heapPos: int32(i)}
		t.index[pos] = int32(i) + 1
		t.setKey(i, key)
		t.up(i)
		if len(t.slots) == cap(t.slots) {
			t.full.Store(true)
		}
	default:
		// Space-Saving: the new partition replaces the least counted one
		// and inherits its count, which bounds the new count's error.
		e := &t.heap[0]
		i = int(e.slot)
		s := &t.slots[i]
		t.unindex(t.hash(s.token, s.label), i)
		*s = topSlot{token: token, label: label, err: e.count, heapPos: 0}
		e.count += w
		count = w
		// The removal may have moved entries along the probe sequence.
		_, pos = t.find(h, token, label)
		t.index[pos] = int32(i) + 1
		t.setKey(i, key)
		t.down(0)
	}
	t.slots[i].tag = tag
	// Counts are scaled by the weight of an operation now.
	rate := count / one * t.lambda * 1e9
	t.mu.Unlock()
	return rate
}

// weightAt returns the weight of an operation at now, rescaling the counts
// when the weights grow too large. Time is never taken to run back.
func (t *TopK) weightAt(now int64) float64 {
	if now <= t.last {
		now = t.last
	} else {
		t.last = now
	}
	// now >= tick >= landmark, so these differences do not overflow as
	// unsigned numbers even when the clock jumps far.
	if uint64(now-t.tick) < uint64(weightTick) {
		return t.weight
	}
	t.tick = now
	x := t.lambda * float64(uint64(now-t.landmark))
	if x > rescaleAt {
		f := math.Exp(-x) // 0 after a long pause: everything is forgotten
		for i := range t.heap {
			t.heap[i].count *= f
			t.slots[i].err *= f
		}
		t.landmark, x = now, 0
	}
	t.weight = math.Exp(x)
	return t.weight
}

func (t *TopK) hash(token int64, label Label) uint64 {
	return mix(uint64(token) ^ t.salt ^ uint64(label)*0x9e3779b97f4a7c15)
}

// find returns the slot of (token, label) and its index position, or -1
// and the free index position where it would go.
func (t *TopK) find(h uint64, token int64, label Label) (slot, pos int) {
	mask := uint64(len(t.index) - 1)
	for p := h & mask; ; p = (p + 1) & mask {
		e := t.index[p]
		if e == 0 {
			return -1, int(p)
		}
		if s := &t.slots[e-1]; s.token == token && s.label == label {
			return int(e - 1), int(p)
		}
	}
}

// unindex removes slot from the index, where it is filed under hash h, and
// closes the gap it leaves (backward-shift deletion), so that lookups never
// need tombstones.
func (t *TopK) unindex(h uint64, slot int) {
	mask := uint64(len(t.index) - 1)
	target := int32(slot) + 1
	p := h & mask
	for t.index[p] != target {
		p = (p + 1) & mask
	}
	for q := (p + 1) & mask; t.index[q] != 0; q = (q + 1) & mask {
		s := &t.slots[t.index[q]-1]
		home := t.hash(s.token, s.label) & mask
		// Move q's entry into the gap at p unless its home lies in the
		// cyclic range (p, q], where it would no longer be found.
		if (q-home)&mask >= (q-p)&mask {
			t.index[p] = t.index[q]
			p = q
		}
	}
	t.index[p] = 0
}

func (t *TopK) setKey(i int, key []byte) {
	s := &t.slots[i]
	n := copy(t.keys[i*t.maxKey:(i+1)*t.maxKey], key)
	s.keyLen, s.truncated = int32(n), n < len(key)
}

// up and down restore the heap property after heap[j]'s count fell or
// rose.
func (t *TopK) up(j int) {
	for j > 0 {
		parent := (j - 1) / 2
		if t.heap[parent].count <= t.heap[j].count {
			return
		}
		t.swap(j, parent)
		j = parent
	}
}

func (t *TopK) down(j int) {
	n := len(t.heap)
	for {
		c := 2*j + 1
		if c >= n {
			return
		}
		if c+1 < n && t.heap[c+1].count < t.heap[c].count {
			c++
		}
		if t.heap[j].count <= t.heap[c].count {
			return
		}
		t.swap(j, c)
		j = c
	}
}

func (t *TopK) swap(a, b int) {
	h := t.heap
	h[a], h[b] = h[b], h[a]
	t.slots[h[a].slot].heapPos = int32(a)
	t.slots[h[b].slot].heapPos = int32(b)
}

// Len returns the number of partitions tracked, at most k.
func (t *TopK) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.slots)
}

// Top appends the tracked partitions whose rate is not 0 to dst[:0],
// hottest first, and returns it. It reuses the Key buffers of dst's
// elements up to its capacity, so that a caller passing back the previous
// result allocates nothing once the buffers are large enough. It holds the
// lock while it copies, O(k), so it is meant for an admin endpoint, not for
// every request.
func (t *TopK) Top(dst []HotEntry) []HotEntry {
	dst = dst[:0]
	t.mu.Lock()
	now := max(t.now(), t.last)
	// Rates are per second; counts are scaled by exp(lambda·(now-landmark)).
	scale := t.lambda * 1e9 * math.Exp(-t.lambda*float64(uint64(now-t.landmark)))
	for i := range t.slots {
		s := &t.slots[i]
		rate := t.heap[s.heapPos].count * scale
		if !(rate > 0) {
			continue
		}
		dst = slices.Grow(dst, 1)[:len(dst)+1]
		e := &dst[len(dst)-1]
		*e = HotEntry{
			Token:     s.token,
			Label:     s.label,
			Key:       append(e.Key[:0], t.keys[i*t.maxKey:][:s.keyLen]...),
			Truncated: s.truncated,
			Tag:       s.tag,
			Rate:      rate,
			Error:     s.err * scale,
		}
	}
	t.mu.Unlock()
	slices.SortFunc(dst, func(a, b HotEntry) int {
		if c := cmp.Compare(b.Rate, a.Rate); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Token, b.Token); c != 0 {
			return c
		}
		return cmp.Compare(a.Label, b.Label)
	})
	return dst
}
