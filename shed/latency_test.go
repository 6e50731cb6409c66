package shed

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// errBound is the largest relative error of a quantile: half a bucket's
// width over its lower bound.
const errBound = 1.0 / 64

func TestBucketBounds(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	check := func(v int64) {
		b := bucketOf(v)
		if b < 0 || b >= numBuckets {
			t.Fatalf("bucketOf(%d) = %d, outside 0 to %d", v, b, numBuckets)
		}
		if bucketOf(bucketMid(b)) != b {
			t.Fatalf("bucketMid(%d) = %d is in bucket %d", b, bucketMid(b), bucketOf(bucketMid(b)))
		}
		if v > maxLatency {
			return
		}
		if e := relErr(bucketMid(b), v); e > errBound {
			t.Fatalf("latency %d: bucket %d's middle %d is %.4f off", v, b, bucketMid(b), e)
		}
		if v > 0 && bucketOf(v-1) > b {
			t.Fatalf("bucketOf(%d) = %d > bucketOf(%d) = %d", v-1, bucketOf(v-1), v, b)
		}
	}
	for v := range int64(1 << 14) {
		check(v)
	}
	for k := 6; k < 40; k++ {
		for d := int64(-2); d <= 2; d++ {
			check(1<<k + d)
		}
	}
	for range 100000 {
		check(r.Int64N(maxLatency + 1))
	}
	check(math.MaxInt64)
}

func relErr(got, want int64) float64 {
	if want == 0 {
		return math.Abs(float64(got))
	}
	return math.Abs(float64(got-want)) / float64(want)
}

// exact returns the nearest-rank quantile q of xs: the ceil(q*n)-th
// smallest.
func exact(q float64, xs []int64) int64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(q * float64(len(s))))
	return s[max(rank, 1)-1]
}

// synthetic streams of latencies in nanoseconds.
var synthetic = []struct {
	name string
	gen  func(r *rand.Rand) int64
}{
	{"constant", func(*rand.Rand) int64 { return 3_000_000 }},
	{"uniform 1-10ms", func(r *rand.Rand) int64 { return 1_000_000 + r.Int64N(9_000_000) }},
	{"lognormal 2ms", func(r *rand.Rand) int64 { return int64(2e6 * math.Exp(0.6*r.NormFloat64())) }},
	{"bimodal 1% at 200ms", func(r *rand.Rand) int64 {
		if r.IntN(100) == 0 {
			return int64(200e6 * (1 + 0.1*r.NormFloat64()))
		}
		return int64(1e6 * (1 + 0.1*r.NormFloat64()))
	}},
	{"pareto 1.5 from 500us", func(r *rand.Rand) int64 { return int64(500e3 / math.Pow(1-r.Float64(), 1/1.5)) }},
	{"under 100ns", func(r *rand.Rand) int64 { return r.Int64N(100) }},
	{"over 68s", func(r *rand.Rand) int64 { return maxLatency + r.Int64N(1e9) }},
}

var quantiles = []float64{0.001, 0.5, 0.9, 0.95, 0.99, 0.999, 1}

// TestQuantileSynthetic checks the histogram's quantiles against exact ones:
// within errBound of the exact nearest-rank quantile, for every stream.
func TestQuantileSynthetic(t *testing.T) {
	t.Parallel()
	for i, tc := range synthetic {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(uint64(i), 7))
			rg := newRing(int64(time.Second), 4)
			xs := make([]int64, 20000)
			for j := range xs {
				xs[j] = max(tc.gen(r), 0)
				rg.add(5e9, bucketOf(xs[j]))
			}
			worst := 0.0
			for _, q := range quantiles {
				got, n := quantile(q, []*slot{rg.period(5)})
				want := min(exact(q, xs), maxLatency)
				e := relErr(got, want)
				if n != uint64(len(xs)) || e > errBound {
					t.Errorf("q %v: %d of %d latencies, %d, want %d (%.4f off)", q, n, len(xs), got, want, e)
				}
				worst = max(worst, e)
			}
			t.Logf("largest relative error %.4f (bound %.4f)", worst, errBound)
		})
	}
}

// exactWindows returns what Latency.Quantiles should answer at clock
// reading now for the latencies of s answered by then, computed from the
// latencies themselves.
func exactWindows(cfg LatencyConfig, s stream, now int64) (short, long int64, ok bool) {
	cfg = cfg.withDefaults()
	sw, lw := int64(cfg.Short)/2, int64(cfg.Long)/longSlots
	var in []int64
	from := (now/sw - 2) * sw
	for i, at := range s.at {
		if at >= from && at <= now {
			in = append(in, s.lat[i])
		}
	}
	if len(in) > 0 {
		short = exact(cfg.Quantile, in)
	}
	var qs []int64
	e := now / lw
	for p := e - longSlots; p < e; p++ {
		var per []int64
		for i, at := range s.at {
			if at/lw == p {
				per = append(per, s.lat[i])
			}
		}
		if len(per) >= cfg.MinSamples {
			qs = append(qs, exact(cfg.Quantile, per))
		}
	}
	if len(qs) > 0 {
		slices.Sort(qs)
		long = qs[(len(qs)-1)/2]
	}
	return short, long, len(in) >= cfg.MinSamples && len(qs) >= 3
}

// checkWindows replays s into a Latency and, every step, checks its
// quantiles against exactWindows': within errBound. It returns the
// largest relative error seen.
func checkWindows(t *testing.T, cfg LatencyConfig, s stream, step int64) float64 {
	t.Helper()
	l, err := NewLatency(cfg)
	if err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	checks := 0
	i := 0
	for now := s.at[0] + step; now <= s.at[len(s.at)-1]; now += step {
		for ; i < len(s.at) && s.at[i] <= now; i++ {
			l.Observe(s.at[i], s.lat[i])
		}
		short, long, ok := l.Quantiles(now)
		wshort, wlong, wok := exactWindows(cfg, s, now)
		if ok != wok {
			t.Fatalf("at %v: ok %v, want %v", time.Duration(now-s.at[0]), ok, wok)
		}
		for _, c := range []struct {
			name      string
			got, want int64
		}{{"short", int64(short), wshort}, {"long", int64(long), wlong}} {
			e := relErr(c.got, c.want)
			if e > errBound {
				t.Fatalf("at %v: %s-term quantile %d, want %d (%.4f off)", time.Duration(now-s.at[0]), c.name, c.got, c.want, e)
			}
			worst = max(worst, e)
		}
		checks++
	}
	t.Logf("%d checks, largest relative error %.4f (bound %.4f)", checks, worst, errBound)
	return worst
}

// drifting returns a stream of rate latencies a second for d, lognormal
// around a median that swings between 1 and 4 ms every 20 s, starting at
// clock reading base.
func drifting(r *rand.Rand, base int64, rate int, d time.Duration) stream {
	var s stream
	gap := int64(time.Second) / int64(rate)
	for at := base; at < base+int64(d); at += 1 + r.Int64N(2*gap) {
		phase := float64(at-base) / float64(20*time.Second) * 2 * math.Pi
		median := 2.5e6 + 1.5e6*math.Sin(phase)
		s.add(at, int64(median*math.Exp(0.5*r.NormFloat64())))
	}
	return s
}

func TestLatencyWindows(t *testing.T) {
	t.Parallel()
	cfg := LatencyConfig{Short: 500 * time.Millisecond, Long: 10 * time.Second}
	checkWindows(t, cfg, drifting(rand.New(rand.NewPCG(3, 4)), 1e12, 500, 40*time.Second), int64(130*time.Millisecond))
}

// TestLatencyRecorded checks the windows against exact quantiles on a
// recorded stream of real latencies with a step in it.
func TestLatencyRecorded(t *testing.T) {
	t.Parallel()
	s := loadRecorded(t, 1e12)
	cfg := LatencyConfig{Short: 500 * time.Millisecond, Long: 10 * time.Second, MinSamples: 20}
	checkWindows(t, cfg, s, int64(97*time.Millisecond))
}
