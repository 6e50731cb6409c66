package shed

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// Defaults of a LatencyConfig's zero fields.
const (
	DefaultShort      = time.Second
	DefaultLong       = 30 * time.Second
	DefaultQuantile   = 0.95
	DefaultMinSamples = 100
)

// longSlots is how many periods the long window is cut into.
const longSlots = 10

// LatencyConfig sets what a Latency measures. A zero field takes its
// default.
type LatencyConfig struct {
	// Short is the short-term window: the short-term quantile is over the
	// latencies of the last Short to 1.5 Short. DefaultShort.
	Short time.Duration
	// Long is the long-term window, cut into ten periods: the long-term
	// quantile is the median of the quantiles of its last ten complete
	// periods. DefaultLong; at least twice Short.
	Long time.Duration
	// Quantile is the quantile compared, in (0, 1). DefaultQuantile.
	Quantile float64
	// MinSamples is how many latencies the short window, and each long
	// period that counts, must hold before the ratio is trusted.
	// DefaultMinSamples.
	MinSamples int
}

func (c LatencyConfig) withDefaults() LatencyConfig {
	if c.Short == 0 {
		c.Short = DefaultShort
	}
	if c.Long == 0 {
		c.Long = DefaultLong
	}
	if c.Quantile == 0 {
		c.Quantile = DefaultQuantile
	}
	if c.MinSamples == 0 {
		c.MinSamples = DefaultMinSamples
	}
	return c
}

// Validate reports what is wrong with c, once its zero fields have taken
// their defaults.
func (c LatencyConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Short < time.Millisecond {
		errs = append(errs, fmt.Errorf("short window %v is under 1ms", c.Short))
	}
	if c.Long < 2*c.Short {
		errs = append(errs, fmt.Errorf("long window %v is under twice the short window %v", c.Long, c.Short))
	}
	if !(c.Quantile > 0 && c.Quantile < 1) {
		errs = append(errs, fmt.Errorf("quantile %v is outside (0, 1)", c.Quantile))
	}
	if c.MinSamples < 1 {
		errs = append(errs, fmt.Errorf("min samples %d is under 1", c.MinSamples))
	}
	return errors.Join(errs...)
}

// Latency tracks one upstream node's latencies over a short and a long
// window, in about 64 KiB fixed when it is made.
//
// The long-term quantile is a median of quantiles, not the quantile of all
// the long window's latencies, so that it holds on to the usual latency
// for half the long window after a rise: the quantile of them all would
// follow the rise as soon as 1-Quantile of the window was slow (1.5 s of a
// 30 s window at 0.95), and the ratio would be back to 1 by then.
type Latency struct {
	q          float64
	minSamples uint64
	short      *ring // periods of Short/2
	long       *ring // periods of Long/longSlots

	// done caches the quantiles of complete long periods, which change no
	// more, so that a reader sums one period's counts, not ten.
	mu   sync.Mutex
	done [longSlots + 2]periodQuantile
}

// periodQuantile is a complete long period's quantile.
type periodQuantile struct {
	epoch int64 // 0: none; periods of a clock at or after 0 start at 1 here
	v     int64
	n     uint64
}

// NewLatency returns a Latency measuring as cfg says.
func NewLatency(cfg LatencyConfig) (*Latency, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("shed: latency: %w", err)
	}
	cfg = cfg.withDefaults()
	return &Latency{
		q:          cfg.Quantile,
		minSamples: uint64(cfg.MinSamples),
		// Three periods are read; a fourth is being cleared for the next.
		short: newRing(int64(cfg.Short)/2, 4),
		long:  newRing(int64(cfg.Long)/longSlots, longSlots+2),
	}, nil
}

// Observe records one request's latency, in nanoseconds, answered at clock
// reading now (nanoseconds of a clock that starts at or after 0). A
// negative latency is ignored. It takes no lock and allocates nothing.
func (l *Latency) Observe(now, latency int64) {
	if latency < 0 {
		return
	}
	b := bucketOf(latency)
	l.short.add(now, b)
	l.long.add(now, b)
}

// Quantiles returns the short-term and long-term quantiles at clock reading
// now, and whether there are enough latencies to trust them: MinSamples in
// the short window, and in at least three of the long window's periods.
func (l *Latency) Quantiles(now int64) (short, long time.Duration, ok bool) {
	var sel [maxSlots]*slot
	ss := sel[:0]
	e := l.short.epoch(now)
	for p := e - 2; p <= e; p++ {
		if s := l.short.period(p); s != nil {
			ss = append(ss, s)
		}
	}
	sv, sn := quantile(l.q, ss)

	// Each complete long period's quantile, sorted by insertion.
	var qs [longSlots]int64
	n := 0
	e = l.long.epoch(now)
	l.mu.Lock()
	defer l.mu.Unlock()
	for p := e - longSlots; p < e; p++ {
		v, c := l.periodQuantile(p)
		if c < l.minSamples {
			continue
		}
		i := n
		for ; i > 0 && qs[i-1] > v; i-- {
			qs[i] = qs[i-1]
		}
		qs[i] = v
		n++
	}
	var lv int64
	if n > 0 {
		lv = qs[(n-1)/2]
	}
	return time.Duration(sv), time.Duration(lv), sn >= l.minSamples && n >= 3
}

// periodQuantile returns the quantile of complete long period p and how
// many latencies it has, from the cache if it is there. l.mu is held.
func (l *Latency) periodQuantile(p int64) (v int64, n uint64) {
	if p < 0 {
		return 0, 0
	}
	d := &l.done[p%int64(len(l.done))]
	if d.epoch == p+1 {
		return d.v, d.n
	}
	if s := l.long.period(p); s != nil {
		v, n = quantile(l.q, []*slot{s})
	}
	*d = periodQuantile{epoch: p + 1, v: v, n: n}
	return v, n
}

// Reading is a Latency's signal at one clock reading.
type Reading struct {
	// Ratio is the long-term quantile over the short-term one: about 1
	// while the node answers as fast as usual, falling as it slows down,
	// rising above 1 as it speeds up; 1 when not OK. Always finite and
	// positive.
	Ratio float64
	// Short is the short-term quantile, against which a Controller's
	// floor is held: a ratio says how much slower the node is than
	// usual, Short how slow it is.
	Short time.Duration
	// OK is Quantiles' ok: there were enough latencies to trust them.
	OK bool
}

// Read returns the reading at clock reading now.
func (l *Latency) Read(now int64) Reading {
	short, long, ok := l.Quantiles(now)
	if !ok {
		return Reading{Ratio: 1, Short: short}
	}
	// A quantile under a nanosecond is a measurement of nothing; 1 ns
	// keeps the ratio finite.
	r := float64(max(long, 1)) / float64(max(short, 1))
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return Reading{Ratio: 1, Short: short}
	}
	return Reading{Ratio: r, Short: short, OK: true}
}

// Ratio returns Read's ratio and ok at clock reading now.
func (l *Latency) Ratio(now int64) (ratio float64, ok bool) {
	r := l.Read(now)
	return r.Ratio, r.OK
}
