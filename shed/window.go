package shed

import (
	"math/bits"
	"sync/atomic"
)

// A latency is counted in a bucket of a log-linear histogram: each power of
// two of nanoseconds is cut into 1<<subBits buckets of equal width, so that
// a bucket is at most 1/32 of its lower bound wide, and the middle of a
// bucket is within 1/64 (1.6%) of any latency in it. Below 64 ns a bucket
// is one nanosecond wide. This is the quantile's only error: the rank is
// counted exactly.
//
// A histogram and not the P² algorithm of Jain and Chlamtac, which keeps
// five markers in constant memory: P² has no error bound (its markers are
// fitted by parabolas, and a stream that changes shape can leave them far
// off), it cannot be windowed except by starting over, and its update
// moves several markers together, which needs a lock on the response path
// of every connection to the node. A bucket is one atomic add. The
// HdrHistogram library counts the same way but not atomically, and rotates
// its windows on the caller's command; here the clock rotates them.
const subBits = 5

// maxLatency is the largest latency counted as itself, about 68.7 s; longer
// ones count as it.
const maxLatency = 1<<36 - 1

// numBuckets is the number of buckets up to maxLatency.
const numBuckets = (36 - subBits + 1) << subBits

// bucketOf returns the bucket that counts latency v (0 <= v).
func bucketOf(v int64) int {
	u := uint64(min(v, maxLatency))
	if u < 1<<subBits {
		return int(u)
	}
	k := bits.Len64(u) - 1
	return (k-subBits+1)<<subBits | int(u>>(k-subBits)&(1<<subBits-1))
}

// bucketMid returns the middle of bucket i's latencies.
func bucketMid(i int) int64 {
	e, sub := i>>subBits, int64(i&(1<<subBits-1))
	if e == 0 {
		return sub
	}
	k := e + subBits - 1
	width := int64(1) << (k - subBits)
	lo := int64(1)<<k | sub<<(k-subBits)
	return lo + (width-1)/2
}

// slot counts the latencies of one period of a ring.
type slot struct {
	epoch  atomic.Int64 // the period: clock / ring width
	counts [numBuckets]atomic.Uint32
}

// ring is a histogram per period of width nanoseconds, for the last
// len(slots) periods. The clock moves a ring on: the first latency of a new
// period clears the slot of the oldest. One that another records while the
// slot is being cleared (a few microseconds) may be lost, which moves no
// quantile measurably; one recorded with a reading of the clock older
// than the ring is dropped.
type ring struct {
	width int64
	slots []slot
}

// maxSlots bounds a ring's length, so that readers can keep the slots they
// read in an array on the stack.
const maxSlots = 16

func newRing(width int64, n int) *ring {
	return &ring{width: width, slots: make([]slot, n)}
}

// epoch returns the period of clock reading now.
func (r *ring) epoch(now int64) int64 {
	if now < 0 {
		return 0
	}
	return now / r.width
}

func (r *ring) slotOf(e int64) *slot { return &r.slots[e%int64(len(r.slots))] }

// add counts one latency in bucket b at clock reading now.
func (r *ring) add(now int64, b int) {
	e := r.epoch(now)
	s := r.slotOf(e)
	if cur := s.epoch.Load(); cur != e {
		if cur > e {
			return
		}
		if s.epoch.CompareAndSwap(cur, e) {
			for i := range s.counts {
				s.counts[i].Store(0)
			}
		} else if s.epoch.Load() != e {
			return
		}
	}
	s.counts[b].Add(1)
}

// period returns the slot of period e, or nil if the ring holds no count of
// it (no latency was recorded in it, or it is too old).
func (r *ring) period(e int64) *slot {
	if e < 0 {
		return nil
	}
	s := r.slotOf(e)
	if s.epoch.Load() != e {
		return nil
	}
	return s
}

// quantile returns the latency at quantile q of slots' counts together, by
// nearest rank (the ceil(q*n)-th smallest), and n, how many there are.
func quantile(q float64, slots []*slot) (v int64, n uint64) {
	for _, s := range slots {
		for i := range s.counts {
			n += uint64(s.counts[i].Load())
		}
	}
	if n == 0 {
		return 0, 0
	}
	rank := uint64(q * float64(n))
	if float64(rank) < q*float64(n) {
		rank++
	}
	rank = max(rank, 1)
	// The counts may have grown since they were summed; the last bucket
	// is the answer whatever happened.
	var cum uint64
	for i := 0; i < numBuckets-1; i++ {
		for _, s := range slots {
			cum += uint64(s.counts[i].Load())
		}
		if cum >= rank {
			return bucketMid(i), n
		}
	}
	return bucketMid(numBuckets - 1), n
}
