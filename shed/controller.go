package shed

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// MaxTier is the least important tier; 0 is the most important and is
// never shed.
const MaxTier = 9

// Defaults of a ControllerConfig's zero fields. A healthy node's ratio
// stays within a few percent of 1 (see the package's tests), far from
// DefaultRatioBelow; a ratio of 0.5 is a short-term quantile twice the usual.
//
// DefaultFloor is above every healthy second of point reads seen on a
// loaded test node (a p99 of 1-5 ms, and of up to 14 ms while other
// programs shared its CPUs), and far below what an overload does to the
// same reads: a queue that grows for as long as more is offered than
// answered, a p99 of about a second within 2 s in the shedding
// experiment. A quantile that high is past the floor within the first
// fraction of a second of such an overload, so the floor costs its
// reaction next to nothing.
//
// DefaultConfirm is longer than the short window holds a blip (1 to 1.5 s
// at the default), and no longer than an overload the size of a tier
// keeps the signals unhealthy: until the tier is almost shed, most of a
// Rise, and a short window after.
const (
	DefaultRatioBelow   = 0.5
	DefaultRatioRecover = 0.8
	DefaultFloor        = 20 * time.Millisecond
	DefaultConfirm      = 2 * time.Second
	DefaultRise         = 2 * time.Second
	DefaultFall         = 5 * time.Second
	DefaultMaxStep      = time.Second
)

// ControllerConfig sets how a Controller sheds. A zero field takes its
// default.
type ControllerConfig struct {
	// RatioBelow is the latency ratio under which the node is slow and
	// shedding rises. DefaultRatioBelow.
	RatioBelow float64
	// RatioRecover is the latency ratio from which the node is well again
	// and shedding falls, if the queue is not standing either. Between
	// RatioBelow and RatioRecover, shedding that has not started does not
	// start, and shedding under way goes on rising while a tier is still
	// partly let through: it starts only on a clear slowdown, and once
	// started it stops only when the node is back near its usual, instead
	// of settling where the node is slow but not slow enough to rise,
	// letting a share of a tier through that keeps it so. Once every tier
	// that may be shed is shed entirely it holds there, and so does
	// shedding not yet confirmed an overload (Confirm). DefaultRatioRecover.
	RatioRecover float64
	// Floor is the short-term quantile (Reading.Short) under which the
	// node is not slow, whatever its ratio: a node that answers within it
	// is well, however much faster it usually is, until an overload is
	// confirmed (Confirm); from then until shedding ends the ratio alone
	// decides. 1ns: the ratio alone decides always. DefaultFloor.
	Floor time.Duration
	// Confirm is how long the signals must have been clearly unhealthy
	// (the ratio under RatioBelow, or the queue standing) since shedding
	// started before it counts as an overload. Shedding rises at
	// once either way; if the signals are healthy again sooner it was a
	// false start, and it ends at once, instead of falling over Fall and
	// slower after failed tries as after an overload. A slowdown within
	// Fall of a false start's end is an overload from its start.
	// DefaultConfirm.
	Confirm time.Duration
	// Rise is how long an unhealthy signal takes to shed one more tier
	// entirely, from none of its requests to all. DefaultRise.
	Rise time.Duration
	// Fall is how long healthy signals take to give one tier back
	// entirely. DefaultFall.
	Fall time.Duration
	// MaxStep is the longest time between two updates that counts: a
	// ticker that stalled longer moves shedding no further than this.
	// DefaultMaxStep.
	MaxStep time.Duration
	// Tiers are the tiers that carry traffic, in any order, 0 to MaxTier:
	// shedding goes from the least important of them to the most without
	// spending time on tiers that no request has. Tier 0 among them
	// changes nothing. A tier not listed is shed like the next more
	// important one listed, and never if none is. Empty: 1 to MaxTier.
	Tiers []int
	// Trace is how many of the last updates the Controller keeps, for
	// Trace; 0, none.
	Trace int
}

func (c ControllerConfig) withDefaults() ControllerConfig {
	if c.RatioBelow == 0 {
		c.RatioBelow = DefaultRatioBelow
	}
	if c.RatioRecover == 0 {
		c.RatioRecover = DefaultRatioRecover
	}
	if c.Floor == 0 {
		c.Floor = DefaultFloor
	}
	if c.Confirm == 0 {
		c.Confirm = DefaultConfirm
	}
	if c.Rise == 0 {
		c.Rise = DefaultRise
	}
	if c.Fall == 0 {
		c.Fall = DefaultFall
	}
	if c.MaxStep == 0 {
		c.MaxStep = DefaultMaxStep
	}
	return c
}

// Validate reports what is wrong with c, once its zero fields have taken
// their defaults.
func (c ControllerConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	if !(c.RatioBelow > 0 && c.RatioBelow < 1) {
		errs = append(errs, fmt.Errorf("ratio below %v is outside (0, 1)", c.RatioBelow))
	}
	if !(c.RatioRecover >= c.RatioBelow && c.RatioRecover <= 1) {
		errs = append(errs, fmt.Errorf("ratio recover %v is outside [ratio below %v, 1]", c.RatioRecover, c.RatioBelow))
	}
	if c.Floor < 0 {
		errs = append(errs, fmt.Errorf("floor %v is negative", c.Floor))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"confirm", c.Confirm}, {"rise", c.Rise}, {"fall", c.Fall}, {"max step", c.MaxStep}} {
		if d.v < time.Millisecond {
			errs = append(errs, fmt.Errorf("%s %v is under 1ms", d.name, d.v))
		}
	}
	if c.Trace < 0 {
		errs = append(errs, fmt.Errorf("trace %d is negative", c.Trace))
	}
	for _, t := range c.Tiers {
		if t < 0 || t > MaxTier {
			errs = append(errs, fmt.Errorf("tier %d is outside 0 to %d", t, MaxTier))
		}
	}
	return errors.Join(errs...)
}

// Reserve is how far past the tiers in use pressure may rise: once every
// tier that may be shed is shed entirely, the signals must be healthy for
// Reserve x Fall before any of it comes back. Without it, a node that
// recovers as soon as its least important tier is gone lets that tier
// back at once, and the trickle slows the node again: shedding would
// settle just under the top, letting a steady share through.
const Reserve = 1

// MaxBackoff is how many times slower than Fall pressure falls at most,
// after recoveries that failed: see Controller.
const MaxBackoff = 8

// Controller turns the signals into a fraction of requests to shed for
// each tier. Its state is a pressure, in tiers: at pressure p the least
// important tier in use has a share min(p, 1) of the pressure, the next
// min(max(p-1, 0), 1), and so on, so that a tier is shed only once every
// less important one is shed entirely; past the tiers in use, up to
// Reserve more, everything that may be shed is. A tier's fraction shed is
// its share up to one half; above, what it lets through shrinks as the
// cube of the share it has left (see curve). Pressure rises at one tier
// per Rise while a signal is unhealthy and falls at one per Fall while all
// are healthy: each fraction moves by at most three updates' worth at a
// time.
//
// A recovery that fails, the signals turning unhealthy again while the
// pressure falls, doubles the time the pressure then takes to fall, up to
// MaxBackoff times Fall; falling more than the reserve, Reserve+1 tiers,
// without failing halves it again (a fall through the reserve alone
// proves nothing: no tier came back), and a pressure of none resets it.
// A node that slows again as soon as a shed tier comes back (a batch
// class offering far more than it can answer) is probed more and more
// rarely, instead of every Fall.
//
// All of that is after an overload: shedding whose signals are healthy
// again within Confirm of its start was a false start, a blip that passed
// by itself, and it ends at once. The latency signal is unhealthy only
// over the Floor, so that a node slower than usual but still fast starts
// shedding nothing at all; once an overload is confirmed, the ratio alone
// decides until shedding ends.
//
// Update is meant for one goroutine on a ticker; Fraction and Shed for any
// number of request paths, without a lock.
type Controller struct {
	cfg ControllerConfig

	mu       sync.Mutex
	used     [MaxTier + 1]bool // the tiers in use; never tier 0
	rank     [MaxTier + 1]int  // how many tiers in use are less important
	inUse    float64           // how many tiers in use may be shed
	pressure float64
	last     int64
	started  bool
	// backoff multiplies Fall; fell is how far the pressure has fallen
	// since it last rose, less the halvings: over 0 while it falls.
	backoff float64
	fell    float64
	// unhealthy is how long the signals have been clearly unhealthy (under
	// RatioBelow over the floor, or the queue standing) since the pressure
	// last rose from none; confirmed, whether that made it an overload. falseEnd is when the last false start ended, if hadFalse.
	unhealthy int64
	confirmed bool
	falseEnd  int64
	hadFalse  bool

	trace *tickRing // the last updates, when ControllerConfig.Trace asks

	fractions [MaxTier + 1]atomic.Uint64 // math.Float64bits
	pressureF atomic.Uint64
}

// NewController returns a Controller as cfg says, shedding nothing.
func NewController(cfg ControllerConfig) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("shed: controller: %w", err)
	}
	cfg = cfg.withDefaults()
	c := &Controller{cfg: cfg, backoff: 1}
	if cfg.Trace > 0 {
		c.trace = newTickRing(cfg.Trace)
	}
	if len(cfg.Tiers) == 0 {
		for t := 1; t <= MaxTier; t++ {
			c.used[t] = true
		}
	}
	for _, t := range cfg.Tiers {
		c.used[t] = t > 0
	}
	c.rankTiers()
	return c, nil
}

// rankTiers sets rank and inUse from used.
func (c *Controller) rankTiers() {
	c.inUse = 0
	for t := range c.rank {
		c.rank[t] = 0
		for u := t + 1; u <= MaxTier; u++ {
			if c.used[u] {
				c.rank[t]++
			}
		}
		if c.used[t] {
			c.inUse++
		}
	}
}

// SetTiers changes the tiers in use to tiers, as ControllerConfig.Tiers
// says except that empty means none: for a caller that learns from the
// traffic which tiers carry requests. A tier that leaves takes its share
// of the pressure with it, so that every tier that stays keeps its
// fraction; a tier that comes is shed as its rank says at once, the
// tiers more important than it less. Tiers outside 0 to MaxTier are
// ignored.
func (c *Controller) SetTiers(tiers []int) {
	var used [MaxTier + 1]bool
	for _, t := range tiers {
		if t > 0 && t <= MaxTier {
			used[t] = true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if used == c.used {
		return
	}
	// The reserve is the old tiers'; what stays of the pressure is the
	// shares of the tiers that stay.
	p := min(c.pressure, c.inUse)
	for t := range used {
		if c.used[t] && !used[t] {
			p -= c.share(t)
		}
	}
	c.pressure = p
	c.used = used
	c.rankTiers()
	c.pressure = min(max(c.pressure, 0), c.ceiling())
	c.publish()
}

// ceiling is the highest the pressure goes: the tiers in use that may be
// shed, and the reserve once there is one.
func (c *Controller) ceiling() float64 {
	if c.inUse == 0 {
		return 0
	}
	return c.inUse + Reserve
}

// share is tier's share of the pressure, 0 to 1. c.mu is held.
func (c *Controller) share(tier int) float64 {
	if tier <= 0 {
		return 0
	}
	return min(max(min(c.pressure, c.inUse)-float64(c.rank[tier]), 0), 1)
}

// curve returns the fraction of a tier's requests shed at share s of the
// pressure: s up to one half; above, 1 - (2(1-s))³/2, so that what is let
// through shrinks as the cube of the share left. A tier nine tenths shed
// by share lets 0.4% of its requests through, not 10%: when the pressure
// comes down from a tier shed entirely, the node sees a trickle that
// grows, not a flood, while the latency signal is a short window behind.
// A tier that offers many times what the node answers would otherwise
// slow it again before the signal could say so.
func curve(s float64) float64 {
	if s <= 0.5 {
		return max(s, 0)
	}
	left := 2 * (1 - min(s, 1))
	return 1 - left*left*left/2
}

// fraction is tier's fraction shed. c.mu is held.
func (c *Controller) fraction(tier int) float64 {
	return curve(c.share(tier))
}

// publish stores the pressure and each tier's fraction for the request
// paths. c.mu is held.
func (c *Controller) publish() {
	for t := range c.fractions {
		c.fractions[t].Store(math.Float64bits(c.fraction(t)))
	}
	c.pressureF.Store(math.Float64bits(c.pressure))
}

// Update moves shedding on to clock reading now, from the signals: the
// node's latency reading (Latency.Read; a NaN or non-positive ratio is
// not trusted), and whether the queue is standing (Queue.Standing).
func (c *Controller) Update(now int64, r Reading, queueOver bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started {
		c.started, c.last = true, now
		c.record(now, r, queueOver)
		return
	}
	dt := min(max(now-c.last, 0), int64(c.cfg.MaxStep))
	c.last = max(c.last, now)
	ratio := r.Ratio
	ratioOK := r.OK && ratio > 0 && !math.IsInf(ratio, 0)
	// The floor keeps a fast node from starting to shed; once an overload
	// is confirmed, shedding brings the node back to its usual, as the
	// ratio says, not merely under the floor: a floor of many times the
	// usual would let the shed tier back in until the node was that slow.
	fast := r.Short < c.cfg.Floor && !c.confirmed
	// In the band, only a tier still partly let through is worth shedding
	// more: in the reserve nothing is, and the ratio's noise would ratchet
	// the pressure up.
	partly := c.pressure > 0 && c.pressure < c.inUse
	clear := ratioOK && !fast && ratio < c.cfg.RatioBelow || queueOver
	// The band goes on rising only what an overload started: what may
	// still be a false start holds there, as a blip's tail passes through
	// it on its way back.
	slow := clear || c.confirmed && ratioOK && !fast && partly && ratio < c.cfg.RatioRecover
	well := !ratioOK || fast || ratio >= c.cfg.RatioRecover
	switch {
	case slow:
		if c.pressure == 0 {
			c.confirmed = c.hadFalse && now-c.falseEnd < int64(c.cfg.Fall)
		}
		// Only a clear slowdown confirms: the band would stretch a blip.
		if clear {
			c.unhealthy += dt
		}
		c.confirmed = c.confirmed || c.unhealthy >= int64(c.cfg.Confirm)
		if c.fell > 0 && c.pressure > 0 {
			c.backoff = min(2*c.backoff, MaxBackoff)
		}
		c.fell = 0
		c.pressure += float64(dt) / float64(c.cfg.Rise)
	case well && !c.confirmed && c.pressure > 0:
		c.pressure = 0
		c.falseEnd, c.hadFalse = now, true
	case well:
		down := float64(dt) / (float64(c.cfg.Fall) * c.backoff)
		c.fell += down
		c.pressure -= down
		if c.fell > Reserve+1 {
			c.backoff, c.fell = max(c.backoff/2, 1), c.fell-(Reserve+1)
		}
	}
	c.pressure = min(max(c.pressure, 0), c.ceiling())
	if c.pressure == 0 {
		c.backoff, c.fell = 1, 0
		c.unhealthy, c.confirmed = 0, false
	}
	c.publish()
	c.record(now, r, queueOver)
}

// Slower reports whether latency reading a says more than b that a node
// is slow: a trusted reading before one that is not, one at or over the
// floor before one under it, then the lower ratio. A node whose tiers are
// measured each against its own usual is as slow as its slowest tier's
// reading.
func (c *Controller) Slower(a, b Reading) bool {
	if a.OK != b.OK {
		return a.OK
	}
	if oa, ob := a.Short >= c.cfg.Floor, b.Short >= c.cfg.Floor; oa != ob {
		return oa
	}
	return a.Ratio < b.Ratio
}

// Pressure returns how many tiers' worth of requests are being shed.
func (c *Controller) Pressure() float64 {
	return math.Float64frombits(c.pressureF.Load())
}

// Fraction returns the fraction of tier's requests to shed, 0 to 1; always
// 0 for tier 0. A tier under 0 is taken for 0, one over MaxTier for
// MaxTier.
func (c *Controller) Fraction(tier int) float64 {
	return math.Float64frombits(c.fractions[min(max(tier, 0), MaxTier)].Load())
}

// Shed reports whether to shed a request of tier, given draw, a number
// drawn uniformly from [0, 1) for this request.
func (c *Controller) Shed(tier int, draw float64) bool {
	return draw < c.Fraction(tier)
}
