package shed

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Defaults of a QueueConfig's zero fields: CoDel's.
const (
	DefaultTarget   = 5 * time.Millisecond
	DefaultInterval = 100 * time.Millisecond
)

// QueueConfig sets when a Queue is standing. A zero field takes its
// default.
type QueueConfig struct {
	// Target is the wait that a standing queue's shortest wait exceeds.
	// DefaultTarget.
	Target time.Duration
	// Interval is the period over which the shortest wait is taken: a
	// queue is standing when no request of a whole interval waited less
	// than Target. It should be about the time the proxy takes to notice
	// and act, a few round trips to the cluster. DefaultInterval.
	Interval time.Duration
}

func (c QueueConfig) withDefaults() QueueConfig {
	if c.Target == 0 {
		c.Target = DefaultTarget
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	return c
}

// Validate reports what is wrong with c, once its zero fields have taken
// their defaults.
func (c QueueConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Target < 0 {
		errs = append(errs, fmt.Errorf("queue target %v is negative", c.Target))
	}
	if c.Interval < time.Millisecond {
		errs = append(errs, fmt.Errorf("queue interval %v is under 1ms", c.Interval))
	}
	if c.Target >= c.Interval {
		errs = append(errs, fmt.Errorf("queue target %v is not under the interval %v", c.Target, c.Interval))
	}
	return errors.Join(errs...)
}

// Queue is CoDel's view of the time requests wait inside the proxy (for a
// bound on requests in flight, for a writer): a queue that drains between
// bursts, however long, has some request in each interval that hardly
// waited; one that stands has none, and only its shortest wait says so.
//
// The shortest wait of each interval is kept in one word, the interval's
// number and the wait together, so that recording is a compare-and-swap
// and only when the wait is a new shortest.
type Queue struct {
	target, interval int64
	// mins holds the shortest wait of the even and of the odd intervals:
	// valid bit, 23 bits of the interval's number, 40 of the wait.
	mins [2]atomic.Uint64
}

const (
	waitBits  = 40
	waitMask  = 1<<waitBits - 1
	epochMask = 1<<23 - 1
	validBit  = 1 << 63
)

// NewQueue returns a Queue as cfg says.
func NewQueue(cfg QueueConfig) (*Queue, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("shed: queue: %w", err)
	}
	cfg = cfg.withDefaults()
	return &Queue{target: int64(cfg.Target), interval: int64(cfg.Interval)}, nil
}

func (q *Queue) epoch(now int64) int64 {
	if now < 0 {
		return 0
	}
	return now / q.interval
}

// Observe records that a request waited this long, in nanoseconds, by clock
// reading now: every request that passes the point where requests wait,
// including those that did not wait (0), which are what shows a queue is
// not standing. A negative wait counts as 0. It takes no lock and
// allocates nothing.
func (q *Queue) Observe(now, waited int64) {
	w := uint64(min(max(waited, 0), waitMask))
	e := uint64(q.epoch(now)) & epochMask
	m := &q.mins[e&1]
	for {
		old := m.Load()
		if old&validBit != 0 {
			oe := old >> waitBits & epochMask
			if oe == e {
				if w >= old&waitMask {
					return
				}
			} else if (oe-e)&epochMask < epochMask/2 {
				// A newer interval holds the slot: this reading of the
				// clock is older than the last interval.
				return
			}
		}
		if m.CompareAndSwap(old, validBit|e<<waitBits|w) {
			return
		}
	}
}

// Standing returns the shortest wait of the last complete interval before
// clock reading now, and whether it exceeds the target. An interval in which
// no request passed has no queue.
func (q *Queue) Standing(now int64) (minWait time.Duration, over bool) {
	prev := uint64(q.epoch(now)-1) & epochMask
	w := q.mins[prev&1].Load()
	if w&validBit == 0 || w>>waitBits&epochMask != prev {
		return 0, false
	}
	d := int64(w & waitMask)
	return time.Duration(d), d > q.target
}
