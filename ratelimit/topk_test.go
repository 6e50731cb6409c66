package ratelimit

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// check verifies the sketch's invariants: the heap orders the.slots by
// count, the index finds every slot and nothing else, and counts are
// finite, not negative and at least their error.
func (t *TopK) check(tb testing.TB) {
	tb.Helper()
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.heap) != len(t.slots) || len(t.slots) > cap(t.slots) {
		tb.Fatalf("%d heap entries, %d slots of %d", len(t.heap), len(t.slots), cap(t.slots))
	}
	for j, e := range t.heap {
		if int(t.slots[e.slot].heapPos) != j {
			tb.Fatalf("slot %d at heap %d says %d", e.slot, j, t.slots[e.slot].heapPos)
		}
		if j > 0 && t.heap[(j-1)/2].count > e.count {
			tb.Fatalf("heap order broken at %d", j)
		}
	}
	type id struct {
		token int64
		label Label
	}
	seen := map[id]bool{}
	for i, s := range t.slots {
		if seen[id{s.token, s.label}] {
			tb.Fatalf("partition %d/%d tracked twice", s.token, s.label)
		}
		seen[id{s.token, s.label}] = true
		if got, _ := t.find(t.hash(s.token, s.label), s.token, s.label); got != i {
			tb.Fatalf("slot %d found at %d", i, got)
		}
		count := t.heap[s.heapPos].count
		if !(count >= 0) || math.IsInf(count, 0) || !(s.err >= 0) || s.err > count {
			tb.Fatalf("slot %d: count %v, error %v", i, count, s.err)
		}
		if int(s.keyLen) > t.maxKey {
			tb.Fatalf("slot %d: key of %d bytes, max %d", i, s.keyLen, t.maxKey)
		}
	}
	n := 0
	for _, e := range t.index {
		if e != 0 {
			n++
		}
	}
	if n != len(t.slots) {
		tb.Fatalf("index holds %d entries for %d slots", n, len(t.slots))
	}
}

// checkTop verifies that entries are sorted, finite and bounded.
func checkTop(tb testing.TB, top []HotEntry, k, maxKey int) {
	tb.Helper()
	if len(top) > k {
		tb.Fatalf("%d entries, k = %d", len(top), k)
	}
	for i, e := range top {
		if !(e.Rate > 0) || math.IsInf(e.Rate, 0) || !(e.Error >= 0) || e.Error > e.Rate*(1+1e-12) || len(e.Key) > maxKey {
			tb.Fatalf("entry %d: %+v", i, e)
		}
		if i > 0 && top[i-1].Rate < e.Rate {
			tb.Fatalf("entries %d and %d out of order: %v < %v", i-1, i, top[i-1].Rate, e.Rate)
		}
	}
}

// lambdaPerSecond is the sketch's decay rate per second.
var lambdaPerSecond = math.Ln2 / TopKHalfLife.Seconds()

// exactRates computes decayed rates the slow way, from every operation's
// time.
type exactRates struct {
	t0  int64
	sum map[int64]float64 // by token; sum of exp(lambda (t - t0))
}

func (e *exactRates) observe(token int64, now int64) {
	e.sum[token] += math.Exp(lambdaPerSecond * float64(now-e.t0) / 1e9)
}

func (e *exactRates) rate(token int64, now int64) float64 {
	return lambdaPerSecond * e.sum[token] * math.Exp(-lambdaPerSecond*float64(now-e.t0)/1e9)
}

// nearly reports whether got is within rel of want; operations are timed
// to the millisecond, which moves rates by less than 0.035%.
func nearly(got, want, rel float64) bool {
	return math.Abs(got-want) <= rel*math.Abs(want)
}

func TestTopKExactWhenFewPartitions(t *testing.T) {
	clk := &fakeClock{ns: epoch}
	tk := NewTopK(8, 16, clk.now)
	exact := exactRates{t0: clk.ns, sum: map[int64]float64{}}
	// Partition p takes p+1 operations per round; 8 partitions fill k.
	for round := range 3000 {
		for p := range int64(8) {
			if int64(round)%(8-p) == 0 {
				tk.Observe(p, Label(p%2), fmt.Appendf(nil, "key-%d", p))
				exact.observe(p, clk.ns)
			}
		}
		clk.ns += int64(time.Millisecond) + 7 // not aligned with the weight tick
	}
	tk.check(t)
	top := tk.Top(nil)
	checkTop(t, top, 8, 16)
	if len(top) != 8 {
		t.Fatalf("%d entries, want 8", len(top))
	}
	for i, e := range top {
		if want := int64(7 - i); e.Token != want {
			t.Errorf("entry %d is %d, want %d", i, e.Token, want)
		}
		if e.Error != 0 || e.Label != Label(e.Token%2) || string(e.Key) != fmt.Sprintf("key-%d", e.Token) || e.Truncated {
			t.Errorf("entry %d: %+v", i, e)
		}
		if want := exact.rate(e.Token, clk.ns); !nearly(e.Rate, want, 1e-3) {
			t.Errorf("partition %d: rate %v, exact %v", e.Token, e.Rate, want)
		}
	}
}

func TestTopKRateAndDecay(t *testing.T) {
	clk := &fakeClock{ns: epoch}
	tk := NewTopK(4, 8, clk.now)
	// 1,000 operations per second for 300 s: past the weight rescaling
	// (every 115 s) and long enough to forget the start.
	var observed float64
	for range 300_000 {
		observed = tk.ObserveAt(clk.ns, 42, 0, nil)
		clk.ns += int64(time.Millisecond)
	}
	tk.check(t)
	r := tk.Top(nil)[0].Rate
	if !nearly(r, 1000, 1e-3) {
		t.Errorf("steady 1000/s measured as %v", r)
	}
	// What ObserveAt returns is the rate Top reports at the same time.
	if !nearly(observed, r, 1e-2) {
		t.Errorf("ObserveAt returned %v, Top says %v", observed, r)
	}
	// Idle for one half-life: half the rate.
	clk.ns += int64(TopKHalfLife)
	if got := tk.Top(nil)[0].Rate; !nearly(got, r/2, 1e-3) {
		t.Errorf("after a half-life %v, want %v", got, r/2)
	}
	// Idle for an hour: forgotten, then counted afresh.
	clk.ns += int64(time.Hour)
	if top := tk.Top(nil); len(top) != 0 {
		t.Errorf("after an hour: %+v", top)
	}
	tk.Observe(7, 0, nil)
	tk.check(t)
	if top := tk.Top(nil); len(top) != 1 || top[0].Token != 7 || !nearly(top[0].Rate, lambdaPerSecond, 1e-3) {
		t.Errorf("after an hour and one operation: %+v", top)
	}
}

func TestTopKClockBackwards(t *testing.T) {
	clk := &fakeClock{ns: epoch}
	tk := NewTopK(2, 0, clk.now)
	tk.Observe(1, 0, []byte("k"))
	clk.ns -= int64(time.Hour)
	tk.Observe(1, 0, nil)
	clk.ns = math.MinInt64
	tk.Observe(2, 0, nil)
	clk.ns = math.MaxInt64
	tk.Observe(3, 0, nil)
	tk.check(t)
	checkTop(t, tk.Top(nil), 2, 0)
}

func TestTopKKeys(t *testing.T) {
	clk := &fakeClock{ns: epoch}
	tk := NewTopK(2, 4, clk.now)
	tk.Observe(1, 0, []byte("abcdefgh"))
	tk.Observe(1, 0, []byte("zz")) // same partition: the first key stays
	tk.Observe(2, 1, []byte("ab"))
	top := tk.Top(nil)
	if len(top) != 2 || string(top[0].Key) != "abcd" || !top[0].Truncated || string(top[1].Key) != "ab" || top[1].Truncated {
		t.Fatalf("got %+v", top)
	}
	// A replacing partition brings its own key.
	tk.Observe(3, 0, []byte("xyz"))
	for _, e := range tk.Top(nil) {
		if e.Token == 3 && (string(e.Key) != "xyz" || e.Error == 0) {
			t.Errorf("replacing entry %+v", e)
		}
	}
	// Top's copies are the caller's.
	top = tk.Top(nil)
	top[0].Key[0] = '!'
	if bytes.Contains(tk.keys, []byte("!")) {
		t.Error("Top returned the sketch's own key memory")
	}
}

// Among a Zipf-distributed stream of 10,000 partitions the sketch finds
// the hottest ones, with estimates within the error it reports.
func TestTopKHeavyHitters(t *testing.T) {
	const (
		k        = 256
		distinct = 10_000
		ops      = 200_000
	)
	clk := &fakeClock{ns: epoch}
	tk := NewTopK(k, 8, clk.now)
	exact := exactRates{t0: clk.ns, sum: map[int64]float64{}}
	// Tokens are scrambled so that rank and token differ.
	token := func(rank uint64) int64 { return int64(mix(rank + 1)) }
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, distinct-1)
	for range ops {
		tok := token(z.Uint64())
		tk.Observe(tok, 0, nil)
		exact.observe(tok, clk.ns)
		clk.ns += 50 * int64(time.Microsecond) // 20,000 operations per second
	}
	tk.check(t)
	top := tk.Top(nil)
	checkTop(t, top, k, 8)
	byToken := map[int64]HotEntry{}
	for _, e := range top {
		byToken[e.Token] = e
	}
	truth := make([]int64, 0, len(exact.sum))
	for tok := range exact.sum {
		truth = append(truth, tok)
	}
	slices.SortFunc(truth, func(a, b int64) int { return cmp.Compare(exact.rate(b, clk.ns), exact.rate(a, clk.ns)) })
	for rank, tok := range truth[:20] {
		want := exact.rate(tok, clk.ns)
		e, ok := byToken[tok]
		if !ok {
			t.Errorf("rank %d (%.1f/s) not tracked", rank+1, want)
			continue
		}
		// Space-Saving overestimates by at most its error.
		if e.Rate < want*(1-1e-3) || e.Rate-e.Error > want*(1+1e-3) {
			t.Errorf("rank %d: estimate %.1f ± %.1f, exact %.1f", rank+1, e.Rate, e.Error, want)
		}
	}
	// The sketch's own top 10 is the true top 10.
	for i := range 10 {
		if top[i].Token != truth[i] {
			t.Errorf("sketch rank %d is %d, true rank %d is %d", i+1, top[i].Token, i+1, truth[i])
		}
	}
}

// ObserveSampledAt counts every operation while the sketch has room, so
// that it is as exact as ObserveTaggedAt with few partitions.
func TestTopKSampledExactWhileRoom(t *testing.T) {
	clk := &fakeClock{ns: epoch}
	sampled, exact := NewTopK(16, 8, clk.now), NewTopK(16, 8, clk.now)
	var rng uint64
	for i := range 1000 {
		tok := int64(i % 10)
		sampled.ObserveSampledAt(clk.ns, tok, 0, nil, 0, &rng)
		exact.ObserveTaggedAt(clk.ns, tok, 0, nil, 0)
		clk.ns += int64(time.Millisecond)
	}
	got, want := sampled.Top(nil), exact.Top(nil)
	if len(got) != 10 || len(got) != len(want) {
		t.Fatalf("sampled %d partitions, exact %d, want 10", len(got), len(want))
	}
	for i := range got {
		if got[i].Token != want[i].Token || got[i].Rate != want[i].Rate || got[i].Error != 0 {
			t.Errorf("entry %d: sampled %+v, exact %+v", i, got[i], want[i])
		}
	}
}

// Once the sketch is full, ObserveSampledAt counts a sample: a hot
// partition's rate is unbiased and off by the relative standard deviation
// its documentation gives, sqrt((TopKSampleEvery-1)·λ/(2r)), here over
// many seeds among cold partitions that keep the sketch full.
func TestTopKSampledAccuracy(t *testing.T) {
	const (
		seeds = 40
		steps = 10_000 // of 1 ms
	)
	hot := []struct {
		token int64
		every int // steps between its operations
	}{{1, 1}, {2, 10}} // 1,000/s and 100/s
	rates := make([][]float64, len(hot))
	var want []float64
	for seed := range uint64(seeds) {
		clk := &fakeClock{ns: epoch}
		tk := NewTopK(32, 8, clk.now)
		exact := exactRates{t0: clk.ns, sum: map[int64]float64{}}
		rng := seed
		cold := rand.New(rand.NewPCG(seed, 3))
		for step := range steps {
			for j, h := range hot {
				if step%h.every == 0 {
					tk.ObserveSampledAt(clk.ns, h.token, 0, nil, 0, &rng)
					if seed == 0 {
						exact.observe(hot[j].token, clk.ns)
					}
				}
			}
			// 1,000 operations a second on partitions seen about once,
			// so that both hot ones are above 1/k of all.
			tk.ObserveSampledAt(clk.ns, 1000+cold.Int64N(1<<40), 0, nil, 0, &rng)
			clk.ns += int64(time.Millisecond)
		}
		if !tk.full.Load() {
			t.Fatal("the sketch never filled")
		}
		if seed == 0 {
			for _, h := range hot {
				want = append(want, exact.rate(h.token, clk.ns))
			}
		}
		top := tk.Top(nil)
		checkTop(t, top, 32, 8)
		for j, h := range hot {
			i := slices.IndexFunc(top, func(e HotEntry) bool { return e.Token == h.token })
			if i < 0 {
				t.Fatalf("seed %d: partition at %.0f/s not tracked: %+v", seed, want[j], top)
			}
			rates[j] = append(rates[j], top[i].Rate)
		}
	}
	lambda := math.Ln2 / TopKHalfLife.Seconds()
	for j := range hot {
		var mean, sq float64
		for _, r := range rates[j] {
			mean += r / seeds
		}
		for _, r := range rates[j] {
			sq += (r - mean) * (r - mean) / (seeds - 1)
		}
		sd := math.Sqrt(sq) / want[j]
		doc := math.Sqrt((TopKSampleEvery - 1) * lambda / (2 * 1000 / float64(hot[j].every)))
		// The mean of 40 is within 4 of its standard errors, and the
		// spread within half to twice the documented one.
		if math.Abs(mean-want[j]) > 4*doc*want[j]/math.Sqrt(seeds) {
			t.Errorf("%.0f/s: mean estimate %.2f, exact %.2f", want[j], mean, want[j])
		}
		if sd < doc/2 || sd > doc*2 {
			t.Errorf("%.0f/s: relative standard deviation %.4f, documented %.4f", want[j], sd, doc)
		}
		t.Logf("%.0f/s: mean %.2f, exact %.2f, relative standard deviation %.4f (documented %.4f)", want[j], mean, want[j], sd, doc)
	}
}

// The sketch's memory is allocated once: observing ever new partitions
// allocates nothing and grows nothing.
func TestTopKFixedMemory(t *testing.T) {
	clk := &fakeClock{ns: epoch}
	tk := NewTopK(64, 32, clk.now)
	index, slots, keys := len(tk.index), cap(tk.slots), len(tk.keys)
	key := make([]byte, 100)
	var tok int64
	allocs := testing.AllocsPerRun(10_000, func() {
		tok++
		binary.LittleEndian.PutUint64(key, uint64(tok))
		tk.Observe(tok, Label(tok%3), key)
		clk.ns += 1000
	})
	if allocs != 0 {
		t.Errorf("Observe: %v allocations per call", allocs)
	}
	var rng uint64
	allocs = testing.AllocsPerRun(10_000, func() {
		tok++
		tk.ObserveSampledAt(clk.ns, tok, Label(tok%3), key, 0, &rng)
		clk.ns += 1000
	})
	if allocs != 0 {
		t.Errorf("ObserveSampledAt: %v allocations per call", allocs)
	}
	if len(tk.index) != index || cap(tk.slots) != slots || len(tk.keys) != keys || tk.Len() != 64 {
		t.Errorf("memory changed: index %d→%d, slots %d→%d, keys %d→%d; %d tracked",
			index, len(tk.index), slots, cap(tk.slots), keys, len(tk.keys), tk.Len())
	}
	tk.check(t)

	// Top, given back its previous result, reuses it.
	top := tk.Top(nil)
	if allocs := testing.AllocsPerRun(100, func() { top = tk.Top(top) }); allocs != 0 {
		t.Errorf("Top: %v allocations per call", allocs)
	}
}

func TestTopKConcurrent(t *testing.T) {
	tk := NewTopK(16, 8, nil)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			key := []byte("partition")
			for i := range 5000 {
				tk.Observe(int64(g*1000+i%50), Label(i%2), key)
			}
		})
	}
	wg.Go(func() {
		var top []HotEntry
		for range 50 {
			top = tk.Top(top)
			checkTop(t, top, 16, 8)
		}
	})
	wg.Wait()
	tk.check(t)
}

func TestNewTopKClampsArguments(t *testing.T) {
	tk := NewTopK(0, -5, nil)
	tk.Observe(1, 0, []byte("x"))
	tk.Observe(2, 0, []byte("y"))
	tk.check(t)
	if top := tk.Top(nil); len(top) != 1 || top[0].Token != 2 || len(top[0].Key) != 0 || !top[0].Truncated {
		t.Fatalf("got %+v", top)
	}
}

// FuzzTopK observes a sequence decoded from the input, with a clock that
// jumps, steps back and idles, and checks the sketch's invariants, and
// that counts are exact while no more partitions were seen than it tracks.
//
// Input: byte 0 gives k (low 4 bits, plus 1) and the key bytes kept (high
// 4 bits); then 4-byte records: token (low 4 bits of byte 0), label (bit
// 4), clock unit (bits 5-6: ns, ms, s, 2^50 ns), signed clock step (byte
// 1), key length (byte 2, low 5 bits) filled with byte 3; bit 7 of byte 0
// asks for Top afterwards.
func FuzzTopK(f *testing.F) {
	f.Add([]byte{0x23, 0x01, 0x00, 0x05, 'a', 0x12, 0x10, 0x03, 'b', 0x83, 0xff, 0x1f, 'c'})
	f.Add([]byte{0x00, 0x61, 0x80, 0x02, 'x', 0x41, 0x7f, 0x00, 0, 0xc2, 0x01, 0x1f, 'y'})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		k, maxKey := int(data[0]&15)+1, int(data[0]>>4)
		clk := &fakeClock{ns: epoch}
		tk := NewTopK(k, maxKey, clk.now)
		seen := map[[2]int64]bool{}
		var top []HotEntry
		for rec := data[1:]; len(rec) >= 4; rec = rec[4:] {
			tok, label := int64(rec[0]&15), Label(rec[0]>>4&1)
			unit := []int64{1, 1e6, 1e9, 1 << 50}[rec[0]>>5&3]
			clk.ns += int64(int8(rec[1])) * unit
			key := bytes.Repeat([]byte{rec[3]}, int(rec[2]&31))
			tk.Observe(tok, label, key)
			seen[[2]int64{tok, int64(label)}] = true
			if rec[0]&0x80 != 0 {
				top = tk.Top(top)
				checkTop(t, top, k, maxKey)
				for _, e := range top {
					if len(seen) <= k && e.Error != 0 {
						t.Fatalf("%d partitions, k = %d, yet error %v", len(seen), k, e.Error)
					}
					if !bytes.Equal(e.Key, bytes.Repeat(e.Key[:min(1, len(e.Key))], len(e.Key))) {
						t.Fatalf("key %q not one of those observed", e.Key)
					}
				}
			}
		}
		tk.check(t)
		if tk.Len() != min(len(seen), k) {
			t.Fatalf("%d tracked, %d seen, k = %d", tk.Len(), len(seen), k)
		}
	})
}

// BenchmarkTopKObserve measures one observation with k = 1,024: "hit"
// cycles over 512 tracked partitions, "zipf" draws from 1,000,000 with
// skew 1.1 (most hit, some replace), "distinct" never repeats a partition,
// so every observation replaces the least counted one.
func BenchmarkTopKObserve(b *testing.B) {
	const n = 1 << 16
	streams := map[string][]int64{"hit": make([]int64, n), "zipf": make([]int64, n), "distinct": nil}
	z := rand.NewZipf(rand.New(rand.NewPCG(3, 4)), 1.1, 1, 1e6)
	for i := range n {
		streams["hit"][i] = int64(mix(uint64(i % 512)))
		streams["zipf"][i] = int64(mix(z.Uint64()))
	}
	key := []byte("a partition key of 32 bytes.....")
	for _, name := range []string{"hit", "zipf", "distinct"} {
		b.Run(name, func(b *testing.B) {
			tk := NewTopK(1024, 64, nil)
			s := streams[name]
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				tok := int64(i)
				if s != nil {
					tok = s[i&(n-1)]
				}
				tk.Observe(tok, 0, key)
			}
		})
	}
}

// BenchmarkTopKObserveParallel measures observations from GOMAXPROCS
// goroutines on the one lock, on the Zipf stream.
func BenchmarkTopKObserveParallel(b *testing.B) {
	tk := NewTopK(1024, 64, nil)
	key := []byte("a partition key of 32 bytes.....")
	var seed sync.Mutex
	next := uint64(0)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		seed.Lock()
		next++
		z := rand.NewZipf(rand.New(rand.NewPCG(next, 5)), 1.1, 1, 1e6)
		seed.Unlock()
		for pb.Next() {
			tk.Observe(int64(mix(z.Uint64())), 0, key)
		}
	})
}

// BenchmarkTopKTop measures reading the top of a full k = 1,024 sketch,
// as the admin endpoint does.
func BenchmarkTopKTop(b *testing.B) {
	tk := NewTopK(1024, 64, nil)
	key := []byte("a partition key of 32 bytes.....")
	for i := range 10_000 {
		tk.Observe(int64(mix(uint64(i))), 0, key)
	}
	var top []HotEntry
	b.ReportAllocs()
	for b.Loop() {
		top = tk.Top(top)
	}
}

// A partition that takes the place of another in the sketch inherits that
// one's count as its overestimate, which ObserveAt leaves out: a cold
// partition is not reported hot.
func TestTopKObserveAtLowerBound(t *testing.T) {
	clk := &fakeClock{ns: epoch}
	tk := NewTopK(2, 0, clk.now)
	var hot float64
	for range 40_000 { // long enough for the decayed rate to settle
		hot = tk.ObserveAt(clk.ns, 1, 0, nil)
		tk.ObserveAt(clk.ns, 2, 0, nil)
		clk.ns += int64(time.Millisecond)
	}
	if !nearly(hot, 1000, 1e-2) {
		t.Fatalf("a partition at 1000/s observed at %v/s", hot)
	}
	if cold := tk.ObserveAt(clk.ns, 3, 0, nil); cold > 1 {
		t.Errorf("a partition observed once, replacing one at 1000/s, observed at %v/s", cold)
	}
	if top := tk.Top(nil); top[len(top)-1].Rate < 900 {
		t.Errorf("Top still reports the replacement's possible overestimate: %+v", top)
	}
}

func TestTopKTags(t *testing.T) {
	clk := &fakeClock{ns: epoch}
	tk := NewTopK(4, 0, clk.now)
	tk.ObserveTaggedAt(clk.ns, 1, 0, nil, 3)
	tk.ObserveTaggedAt(clk.ns, 1, 0, nil, 5) // the last one counts
	tk.ObserveAt(clk.ns, 2, 0, nil)
	for _, e := range tk.Top(nil) {
		if want := map[int64]uint16{1: 5, 2: 0}[e.Token]; e.Tag != want {
			t.Errorf("partition %d: tag %d, want %d", e.Token, e.Tag, want)
		}
	}
}
