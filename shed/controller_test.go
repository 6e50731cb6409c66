package shed

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

const tick = int64(100 * time.Millisecond)

// slowReading is a trusted latency reading of ratio whose short-term
// quantile is over the default floor: a node as slow as its ratio says.
func slowReading(ratio float64) Reading {
	return Reading{Ratio: ratio, Short: time.Second, OK: true}
}

func newController(t testing.TB, cfg ControllerConfig) *Controller {
	t.Helper()
	c, err := NewController(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkOrder fails unless c's fractions are in [0, 1], tier 0's is 0, and
// no tier is shed at all while a less important one is not shed entirely.
func checkOrder(t *testing.T, c *Controller, at time.Duration) {
	t.Helper()
	if f := c.Fraction(0); f != 0 {
		t.Fatalf("at %v: tier 0 shed %v", at, f)
	}
	for a := 1; a <= MaxTier; a++ {
		fa := c.Fraction(a)
		if !(fa >= 0 && fa <= 1) {
			t.Fatalf("at %v: tier %d's fraction %v", at, a, fa)
		}
		for b := a + 1; b <= MaxTier; b++ {
			if fa > 0 && c.Fraction(b) < 1 {
				t.Fatalf("at %v: tier %d shed %v while tier %d only %v", at, a, fa, b, c.Fraction(b))
			}
		}
	}
}

// TestControllerHealthy runs healthy nodes for ten minutes each, at rates
// from the fewest answers that the defaults trust to many, with a tail of
// outliers, and every 7 s a burst of requests that queue in the proxy and
// drain within 10 ms: nothing is ever shed, with the defaults and with
// the ratio alone, without the floor. (At 100 answers a second an interval
// of 100 ms may hold only requests of a burst, which is a standing queue
// for CoDel; that rate runs without bursts.)
func TestControllerHealthy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		floor time.Duration
		rate  int
	}{
		{"defaults/100", 0, 100}, {"defaults/200", 0, 200}, {"defaults/2000", 0, 2000},
		{"ratio alone/100", time.Nanosecond, 100}, {"ratio alone/200", time.Nanosecond, 200}, {"ratio alone/2000", time.Nanosecond, 2000},
	} {
		rate := tc.rate
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(uint64(rate), 9))
			l, _ := NewLatency(LatencyConfig{})
			q, _ := NewQueue(QueueConfig{})
			c := newController(t, ControllerConfig{Floor: tc.floor})
			gap := int64(time.Second) / int64(rate)
			base := int64(1e12)
			next := base
			lowest := math.Inf(1)
			for at := base; at < base+int64(10*time.Minute); at += 1 + r.Int64N(2*gap) {
				v := int64(2e6 * math.Exp(0.5*r.NormFloat64()))
				if r.IntN(200) == 0 {
					v = int64(2e6 / math.Pow(1-r.Float64(), 1/1.2))
				}
				l.Observe(at, v)
				wait := int64(0)
				if into := at % int64(7*time.Second); rate > 100 && into < int64(10*time.Millisecond) {
					wait = int64(10*time.Millisecond) - into
				}
				q.Observe(at, wait)
				for ; next <= at; next += tick {
					r := l.Read(next)
					ratio, ok := r.Ratio, r.OK
					_, over := q.Standing(next)
					c.Update(next, r, over)
					if ok {
						lowest = min(lowest, ratio)
					}
					if p := c.Pressure(); p != 0 {
						t.Fatalf("at %v: pressure %v (ratio %v, ok %v, queue over %v)", time.Duration(next-base), p, ratio, ok, over)
					}
				}
			}
			t.Logf("lowest ratio %.3f", lowest)
		})
	}
}

// step is a scripted run of the controller's signals.
type step struct {
	from, to  time.Duration // the unhealthy signal's span
	ratio     float64       // the ratio during the span; 1 outside
	queueOver bool          // the queue during the span
}

// runStep updates a controller every tick for d with s's signals, checking
// the order of the tiers and that no fraction moves by more than three
// ticks' worth (curve's steepest), and returns the fractions of tiers 1
// to 9 every second.
func runStep(t *testing.T, cfg ControllerConfig, s step, d time.Duration) [][MaxTier + 1]float64 {
	c := newController(t, cfg)
	cfg = cfg.withDefaults()
	maxMove := 3*float64(tick)/float64(min(cfg.Rise, cfg.Fall)) + 1e-9
	var rows [][MaxTier + 1]float64
	var prev [MaxTier + 1]float64
	base := int64(1e12)
	for at := time.Duration(0); at <= d; at += time.Duration(tick) {
		ratio, over := 1.0, false
		if at >= s.from && at < s.to {
			ratio, over = s.ratio, s.queueOver
		}
		c.Update(base+int64(at), slowReading(ratio), over)
		checkOrder(t, c, at)
		var row [MaxTier + 1]float64
		for tier := range row {
			row[tier] = c.Fraction(tier)
			if math.Abs(row[tier]-prev[tier]) > maxMove {
				t.Fatalf("at %v: tier %d moved from %v to %v", at, tier, prev[tier], row[tier])
			}
		}
		prev = row
		if at%time.Second == 0 {
			rows = append(rows, row)
		}
	}
	return rows
}

func table(rows [][MaxTier + 1]float64) string {
	var b strings.Builder
	b.WriteString("\n   s  t1   t2   t3   t4   t5   t6   t7   t8   t9\n")
	for s, row := range rows {
		fmt.Fprintf(&b, "%4d", s)
		for tier := 1; tier <= MaxTier; tier++ {
			fmt.Fprintf(&b, " %4.2f", row[tier])
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TestControllerStep scripts a step in each signal: shedding rises while it
// lasts, least important tier first, and falls back to nothing after it.
func TestControllerStep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		s    step
		peak float64 // pressure at the step's end: its length over Rise
	}{
		{"ratio", step{from: 5 * time.Second, to: 12 * time.Second, ratio: 0.3}, 3.5},
		{"queue", step{from: 5 * time.Second, to: 12 * time.Second, ratio: 1, queueOver: true}, 3.5},
		{"ratio in the hold band", step{from: 5 * time.Second, to: 12 * time.Second, ratio: 0.6}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rows := runStep(t, ControllerConfig{}, tc.s, 40*time.Second)
			t.Log(table(rows))
			for s, row := range rows {
				at := time.Duration(s) * time.Second
				if at < tc.s.from && row[MaxTier] != 0 {
					t.Errorf("at %v, before the step: tier 9 shed %v", at, row[MaxTier])
				}
			}
			// The pressure at the step's end, and its remains 18 s
			// later: 3.6 tiers at 1 per 5 s from 3.5 is 0.
			peak := rows[12]
			got := 0.0
			for tier := 1; tier <= MaxTier; tier++ {
				got += peak[tier]
			}
			if math.Abs(got-tc.peak) > 0.11 {
				t.Errorf("pressure at the step's end %v, want %v", got, tc.peak)
			}
			if last := rows[len(rows)-1]; last[MaxTier] != 0 {
				t.Errorf("tier 9 still shed %v at the end", last[MaxTier])
			}
		})
	}
}

// TestControllerEnough sheds from a node that can answer 650 requests a
// second, offered 100 a second by each of tiers 1 to 9, whose requests
// queue in the proxy while more are sent than it answers: shedding settles
// at 2.5 tiers, tiers 9 and 8 entirely and half of tier 7, and no more.
func TestControllerEnough(t *testing.T) {
	t.Parallel()
	q, _ := NewQueue(QueueConfig{})
	c := newController(t, ControllerConfig{})
	base := int64(1e12)
	for at := int64(0); at <= int64(60*time.Second); at += tick {
		_, over := q.Standing(base + at)
		c.Update(base+at, slowReading(1), over)
		checkOrder(t, c, time.Duration(at))
		sent := 0.0
		for tier := 1; tier <= MaxTier; tier++ {
			sent += 100 * (1 - c.Fraction(tier))
		}
		wait := int64(0)
		if sent > 650 {
			wait = int64(20 * time.Millisecond)
		}
		for i := range int64(10) {
			q.Observe(base+at+i*tick/10, wait)
		}
		if at >= int64(30*time.Second) {
			if p := c.Pressure(); math.Abs(p-2.5) > 0.1 {
				t.Fatalf("at %v: pressure %v, want 2.5 give or take 0.1", time.Duration(at), p)
			}
			if f := c.Fraction(6); f != 0 {
				t.Fatalf("at %v: tier 6 shed %v", time.Duration(at), f)
			}
		}
	}
}

// TestControllerTiers sheds only the tiers in use, least important first,
// and a tier not in use like the next more important one in use.
func TestControllerTiers(t *testing.T) {
	t.Parallel()
	c := newController(t, ControllerConfig{Tiers: []int{0, 2, 5, 5}, Rise: time.Second})
	base := int64(1e12)
	for at := int64(0); at <= int64(1500*time.Millisecond); at += tick {
		c.Update(base+at, slowReading(0.1), false)
	}
	// 1.5 tiers: all of tier 5 and half of tier 2; tiers 3 and 4 like
	// tier 2, tiers 6 to 9 like tier 5, tier 1 never.
	want := [MaxTier + 1]float64{0, 0, 0.5, 0.5, 0.5, 1, 1, 1, 1, 1}
	for tier, w := range want {
		if got := c.Fraction(tier); math.Abs(got-w) > 1e-9 {
			t.Errorf("tier %d: fraction %v, want %v", tier, got, w)
		}
	}
	for at := int64(1600 * time.Millisecond); at <= int64(5*time.Second); at += tick {
		c.Update(base+at, slowReading(0.1), false)
	}
	if p := c.Pressure(); p != 2+Reserve {
		t.Errorf("pressure %v, want %v, all the tiers in use and the reserve", p, 2+Reserve)
	}
	if c.Fraction(0) != 0 || c.Shed(0, 0) || c.Shed(-1, 0) {
		t.Error("tier 0 shed")
	}
	if c.Shed(1, 0) {
		t.Error("tier 1, more important than every tier in use, shed")
	}
	if !c.Shed(2, 0.999) || !c.Shed(12, 0.999) {
		t.Error("tiers 2 and 12 not shed entirely")
	}
}

// TestControllerRecorded runs the controller on the recorded stream, whose
// latency rises a thousandfold from 15 s to 22 s while its answers fall
// from about 900 a second to 40: shedding starts within a second of the
// step, not before, and is gone by the end.
func TestControllerRecorded(t *testing.T) {
	t.Parallel()
	base := int64(1e12)
	s := loadRecorded(t, base)
	l, err := NewLatency(LatencyConfig{Short: 500 * time.Millisecond, Long: 10 * time.Second, MinSamples: 20})
	if err != nil {
		t.Fatal(err)
	}
	c := newController(t, ControllerConfig{Fall: time.Second})
	i := 0
	var first time.Duration
	for now := base; now <= s.at[len(s.at)-1]; now += tick {
		for ; i < len(s.at) && s.at[i] <= now; i++ {
			l.Observe(s.at[i], s.lat[i])
		}
		r := l.Read(now)
		ratio, ok := r.Ratio, r.OK
		c.Update(now, r, false)
		at := time.Duration(now - base)
		if c.Pressure() > 0 && first == 0 {
			first = at
			t.Logf("shedding from %v, ratio %.3f", at, ratio)
		}
		if at%time.Second == 0 {
			t.Logf("%v: ratio %.3f ok %v, pressure %.2f", at, ratio, ok, c.Pressure())
		}
	}
	if first < 15*time.Second || first > 16*time.Second {
		t.Errorf("shedding started at %v, want within a second of 15s", first)
	}
	if p := c.Pressure(); p != 0 {
		t.Errorf("pressure %v at the end", p)
	}
}

// TestControllerSetTiers changes the tiers in use under pressure: a tier
// that leaves takes its share with it, so no tier that stays is shed more;
// a tier that comes takes the shedding of the more important ones.
func TestControllerSetTiers(t *testing.T) {
	t.Parallel()
	c := newController(t, ControllerConfig{Tiers: []int{0, 1, 5}, Rise: time.Second})
	base := int64(1e12)
	at := int64(0)
	rise := func(d time.Duration) {
		for end := at + int64(d); at < end; {
			at += tick
			c.Update(base+at, slowReading(0.1), false)
		}
	}
	check := func(step string, pressure float64, want map[int]float64) {
		t.Helper()
		if p := c.Pressure(); math.Abs(p-pressure) > 1e-9 {
			t.Errorf("%s: pressure %v, want %v", step, p, pressure)
		}
		for tier, w := range want {
			if got := c.Fraction(tier); math.Abs(got-w) > 1e-9 {
				t.Errorf("%s: tier %d shed %v, want %v", step, tier, got, w)
			}
		}
	}
	c.Update(base, slowReading(0.1), false)
	rise(time.Second)
	check("one tier's worth", 1, map[int]float64{0: 0, 1: 0, 5: 1})
	c.SetTiers([]int{0, 5})
	check("tier 1 gone", 1, map[int]float64{1: 0, 3: 0, 5: 1, 7: 1})
	rise(time.Second)
	check("at the ceiling, tier 5 and the reserve", 2, map[int]float64{1: 0, 5: 1})
	c.SetTiers([]int{0, 1})
	check("tier 5 gone, tier 1 back", 0, map[int]float64{1: 0, 5: 0})
	rise(500 * time.Millisecond)
	check("half of tier 1", 0.5, map[int]float64{1: 0.5})
	c.SetTiers([]int{0, 1, 5})
	check("tier 5 back", 0.5, map[int]float64{1: 0, 5: 0.5})
	c.SetTiers([]int{0, 1, 5, 12, -1})
	check("unchanged", 0.5, map[int]float64{1: 0, 5: 0.5})
	c.SetTiers(nil)
	check("none", 0, map[int]float64{1: 0, 5: 0})
}

// TestCurve checks curve, the fraction shed at each share of the
// pressure: the share itself up to one half, then steeper, continuous and
// rising, to 1.
func TestCurve(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ s, want float64 }{
		{-1, 0}, {0, 0}, {0.25, 0.25}, {0.5, 0.5}, {0.75, 0.9375}, {0.9, 0.996}, {1, 1}, {2, 1},
	} {
		if got := curve(tc.s); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("curve(%v) = %v, want %v", tc.s, got, tc.want)
		}
	}
	prev := 0.0
	for i := 1; i <= 1000; i++ {
		s := float64(i) / 1000
		f := curve(s)
		if f < prev || f-prev > 3.0/1000+1e-12 {
			t.Fatalf("curve(%v) = %v after %v", s, f, prev)
		}
		prev = f
	}
}

// TestControllerBackoff runs a node that slows again whenever the tier it
// sheds lets 1% of its requests through (a batch class offering a hundred
// times what the node answers), and whose latency says so for 2 s (a
// short window) after: each failed recovery doubles the time the next
// takes, up to MaxBackoff, so the tier is let back ever more rarely. Once
// the node is well for good the pressure falls to nothing, and a later
// step starts from Fall again.
func TestControllerBackoff(t *testing.T) {
	t.Parallel()
	cfg := ControllerConfig{Tiers: []int{0, 5}}.withDefaults()
	c := newController(t, cfg)
	base := int64(1e12)
	at := int64(0)
	var probes []time.Duration // when each recovery failed
	run := func(d time.Duration, slowAt float64) {
		slowUntil := int64(-1)
		for end := at + int64(d); at < end; at += tick {
			if c.Fraction(5) < slowAt {
				if at >= slowUntil && at > 0 {
					probes = append(probes, time.Duration(at))
				}
				slowUntil = at + int64(2*time.Second)
			}
			ratio := 1.0
			if at < slowUntil {
				ratio = 0.3
			}
			c.Update(base+at, slowReading(ratio), false)
		}
	}
	run(10*time.Minute, 0.99)
	var gaps []time.Duration
	for i := 1; i < len(probes); i++ {
		gaps = append(gaps, probes[i]-probes[i-1])
	}
	t.Logf("failed recoveries at %v", probes)
	if len(gaps) < 4 {
		t.Fatalf("failed recoveries at %v: want at least 5", probes)
	}
	for i := 1; i < 3; i++ {
		if gaps[i] < gaps[i-1]*3/2 {
			t.Errorf("gaps between failed recoveries %v: want each about twice the last", gaps)
		}
	}
	// At most MaxBackoff times Fall for the reserve, and the 1% of the
	// tier, and the rise back.
	longest := time.Duration(MaxBackoff)*cfg.Fall*11/10 + cfg.Rise
	for _, g := range gaps {
		if g > longest {
			t.Errorf("gap %v between failed recoveries, want at most %v", g, longest)
		}
	}
	if n := len(probes); n > 25 {
		t.Errorf("%d failed recoveries in 10 minutes, want at most 25", n)
	}
	// Well for good: everything comes back, and the backoff with it.
	run(time.Duration(MaxBackoff)*3*cfg.Fall, -1)
	if p := c.Pressure(); p != 0 {
		t.Fatalf("pressure %v after the node is well", p)
	}
	// A new step and its end: back to nothing within a Fall.
	run(2*time.Second, 2)
	if p := c.Pressure(); math.Abs(p-1) > 0.06 {
		t.Fatalf("pressure %v after a 2 s step, want 1", p)
	}
	run(cfg.Fall+time.Second, -1)
	if p := c.Pressure(); p != 0 {
		t.Errorf("pressure %v a Fall after a step, want 0: the backoff was not reset", p)
	}
}

// TestControllerBand checks the band between RatioBelow and RatioRecover:
// a node in it is not shed for, shedding not yet confirmed an overload
// holds there, but once it is it goes on rising there while a tier is
// partly let through, holds once every tier is shed entirely, and falls
// when the node is back near its usual. (The slowdown lasts Confirm
// before the band: a shorter one may be a blip's, which the band would
// stretch.)
func TestControllerBand(t *testing.T) {
	t.Parallel()
	c := newController(t, ControllerConfig{Tiers: []int{0, 3, 5}})
	base := int64(1e12)
	at := int64(0)
	run := func(d time.Duration, ratio float64) {
		for end := at + int64(d); at < end; at += tick {
			c.Update(base+at, slowReading(ratio), false)
		}
	}
	run(5*time.Second, 0.6)
	if p := c.Pressure(); p != 0 {
		t.Fatalf("pressure %v in the band before any slowdown, want 0", p)
	}
	run(time.Second, 0.3)
	p := c.Pressure()
	run(time.Second, 0.6)
	if q := c.Pressure(); q != p {
		t.Fatalf("pressure %v after a second in the band, from %v, not yet an overload: want it held", q, p)
	}
	run(time.Second, 0.3)
	p = c.Pressure()
	run(time.Second, 0.6)
	if q := c.Pressure(); q < p+0.45 {
		t.Fatalf("pressure %v after a second in the band, from %v: want it rising", q, p)
	}
	// Every tier shed entirely: the band holds, for nothing more can be.
	run(time.Second, 0.3)
	p = c.Pressure()
	if p < 2 {
		t.Fatalf("pressure %v after 4 s slow, want both tiers shed", p)
	}
	run(3*time.Second, 0.6)
	if q := c.Pressure(); q != p {
		t.Fatalf("pressure %v after 3 s in the band with every tier shed, want it held at %v", q, p)
	}
	run(40*time.Second, 0.9)
	if p := c.Pressure(); p != 0 {
		t.Fatalf("pressure %v after 20 s near the usual, want 0", p)
	}
}

// TestControllerFloorAndConfirm scripts the signals of one node whose
// tier 5 is in use: a slowdown sheds only over the floor, shedding rises
// from its first update either way, and a start whose signals are healthy
// again within Confirm ends at once, unless it comes within Fall of
// another false start; an overload falls over Fall.
func TestControllerFloorAndConfirm(t *testing.T) {
	t.Parallel()
	type seg struct {
		d     time.Duration
		r     Reading
		queue bool
	}
	var (
		well     = Reading{Ratio: 1, Short: 2 * time.Millisecond, OK: true}
		fastSlow = Reading{Ratio: 0.3, Short: 5 * time.Millisecond, OK: true}  // slower than usual, under the floor
		slow     = Reading{Ratio: 0.3, Short: 50 * time.Millisecond, OK: true} // over it
		band     = Reading{Ratio: 0.6, Short: 30 * time.Millisecond, OK: true}
		overload = Reading{Ratio: 0.01, Short: time.Second, OK: true}
	)
	for _, tc := range []struct {
		name     string
		segs     []seg
		min, max float64 // the pressure at the end
	}{
		{"under the floor", []seg{{5 * time.Second, fastSlow, false}}, 0, 0},
		{"over the floor", []seg{{time.Second, slow, false}}, 0.45, 0.55},
		{"overload reaches a tier in a rise", []seg{{2100 * time.Millisecond, overload, false}}, 1, 1.1},
		{"unconfirmed holds in the band", []seg{{time.Second, slow, false}, {time.Second, band, false}}, 0.45, 0.55},
		{"blip ends at once", []seg{{time.Second, slow, false}, {100 * time.Millisecond, well, false}}, 0, 0},
		{"blip through the band ends at once", []seg{{time.Second, slow, false}, {time.Second, band, false}, {100 * time.Millisecond, well, false}}, 0, 0},
		{"blip ends when the node is fast again", []seg{{time.Second, slow, false}, {100 * time.Millisecond, fastSlow, false}}, 0, 0},
		{"queue blip ends at once", []seg{{time.Second, well, true}, {100 * time.Millisecond, well, false}}, 0, 0},
		{"overload falls over fall", []seg{{3 * time.Second, slow, false}, {time.Second, well, false}}, 1.2, 1.4},
		{"queue overload falls over fall", []seg{{3 * time.Second, well, true}, {time.Second, well, false}}, 1.2, 1.4},
		{"a second blip soon after is an overload", []seg{
			{time.Second, slow, false}, {3 * time.Second, well, false}, {time.Second, slow, false}, {time.Second, well, false},
		}, 0.25, 0.35},
		{"a second blip long after is another false start", []seg{
			{time.Second, slow, false}, {6 * time.Second, well, false}, {time.Second, slow, false}, {100 * time.Millisecond, well, false},
		}, 0, 0},
		{"untrusted", []seg{{5 * time.Second, Reading{Ratio: 0.1, Short: time.Second}, false}}, 0, 0},
		// Once confirmed, the node is brought back to its usual, not merely
		// under the floor: a shed tier let back in would otherwise keep it
		// several times slower than usual.
		{"a confirmed overload goes on under the floor", []seg{{3 * time.Second, slow, false}, {time.Second, fastSlow, false}}, 1.95, 2},
		{"and falls once the ratio recovers", []seg{{3 * time.Second, slow, false}, {time.Second, well, false}}, 1.2, 1.4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newController(t, ControllerConfig{Tiers: []int{0, 5}})
			at := int64(1e12)
			c.Update(at, well, false)
			for _, s := range tc.segs {
				for end := at + int64(s.d); at < end; {
					at += tick
					c.Update(at, s.r, s.queue)
				}
			}
			if p := c.Pressure(); p < tc.min-1e-9 || p > tc.max+1e-9 {
				t.Errorf("pressure %.3f, want %.2f to %.2f", p, tc.min, tc.max)
			}
		})
	}
}

// TestControllerSlower orders latency readings as a node's slowest tier.
func TestControllerSlower(t *testing.T) {
	t.Parallel()
	c := newController(t, ControllerConfig{})
	ms := time.Millisecond
	for _, tc := range []struct {
		a, b Reading
		want bool
	}{
		{Reading{Ratio: 0.9, Short: ms, OK: true}, Reading{Ratio: 0.1, Short: time.Second}, true},
		{Reading{Ratio: 0.45, Short: 30 * ms, OK: true}, Reading{Ratio: 0.1, Short: 4 * ms, OK: true}, true},
		{Reading{Ratio: 0.1, Short: 4 * ms, OK: true}, Reading{Ratio: 0.45, Short: 30 * ms, OK: true}, false},
		{Reading{Ratio: 0.3, Short: 30 * ms, OK: true}, Reading{Ratio: 0.45, Short: 300 * ms, OK: true}, true},
		{Reading{Ratio: 0.3, Short: 3 * ms, OK: true}, Reading{Ratio: 0.45, Short: 4 * ms, OK: true}, true},
		{Reading{Ratio: 0.5, Short: 30 * ms, OK: true}, Reading{Ratio: 0.5, Short: 30 * ms, OK: true}, false},
	} {
		if got := c.Slower(tc.a, tc.b); got != tc.want {
			t.Errorf("Slower(%+v, %+v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
