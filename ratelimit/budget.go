package ratelimit

import (
	"math"
	"sync"
)

// Budget is a rate in units per second that requests spend after the
// fact: a token bucket that admits while it is not in debt, and is charged
// each request's cost once that is known, which may take it into debt
// (Databricks' limiter does the same), so that one costly request is paid
// for by the requests after it. Safe for concurrent use; it allocates
// nothing.
type Budget struct {
	mu     sync.Mutex
	rate   float64 // units per nanosecond
	burst  float64 // the most it holds
	tokens float64
	last   int64 // when tokens was last brought up to date
}

// NewBudget returns a full budget of perSecond units a second that holds
// at most burstSeconds of them, as of now (nanoseconds on the caller's
// clock).
func NewBudget(perSecond, burstSeconds float64, now int64) *Budget {
	b := &Budget{last: now}
	b.Set(perSecond, burstSeconds, now)
	b.tokens = b.burst
	return b
}

// Set changes the rate and burst from now on, keeping what the budget
// holds or owes, but no more than the new burst.
func (b *Budget) Set(perSecond, burstSeconds float64, now int64) {
	b.mu.Lock()
	b.refill(now)
	b.rate = perSecond / 1e9
	b.burst = perSecond * burstSeconds
	b.tokens = min(b.tokens, b.burst)
	b.mu.Unlock()
}

// Allow reports whether a request may start at now: whether the budget is
// out of debt.
func (b *Budget) Allow(now int64) bool {
	b.mu.Lock()
	b.refill(now)
	ok := b.tokens >= 0
	b.mu.Unlock()
	return ok
}

// Charge spends units at now, into debt if need be; negative or NaN
// units charge nothing.
func (b *Budget) Charge(now int64, units float64) {
	if !(units > 0) {
		return
	}
	b.mu.Lock()
	b.refill(now)
	// A debt deeper than a minute's rate would refuse for a minute: a
	// single absurd charge (a misconfigured price) is capped there.
	b.tokens = max(b.tokens-units, -60e9*b.rate)
	b.mu.Unlock()
}

// Balance returns what the budget holds at now, negative in debt.
func (b *Budget) Balance(now int64) float64 {
	b.mu.Lock()
	b.refill(now)
	t := b.tokens
	b.mu.Unlock()
	return t
}

// refill adds what accrued since the last update. Time never runs back.
func (b *Budget) refill(now int64) {
	if now <= b.last {
		return
	}
	b.tokens = math.Min(b.burst, b.tokens+float64(now-b.last)*b.rate)
	b.last = now
}
