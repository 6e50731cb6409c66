package ratelimit

import (
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
)

var algorithms = []string{AlgorithmScylla, AlgorithmTokenBucket}

// BenchmarkAllow measures one decision, cycling over 4,096 partitions at
// 1,000 operations per second each: on the system clock, and on a fixed
// clock, which shows the clock's share.
func BenchmarkAllow(b *testing.B) {
	fixed := func() int64 { return epoch }
	for _, alg := range algorithms {
		for _, clock := range []string{"system-clock", "fixed-clock", "caller-clock"} {
			b.Run(alg+"/"+clock, func(b *testing.B) {
				cfg := Config{Algorithm: alg}
				if clock == "fixed-clock" {
					cfg.Clock = fixed
				}
				l, err := New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				var i int64
				if clock == "caller-clock" {
					// The proxy passes the time it read when the request
					// arrived (AllowAt).
					now := int64(epoch)
					for b.Loop() {
						i++
						now += 1000
						l.AllowAt(now, i&4095, 0, 1000)
					}
					return
				}
				for b.Loop() {
					i++
					l.Allow(i&4095, 0, 1000)
				}
			})
		}
	}
}

// BenchmarkAllowParallel measures decisions from GOMAXPROCS goroutines,
// each on partitions of its own and on a clock of its own passed to
// AllowAt, as the proxy's connections do: "hot" cycles over 4,096
// partitions per goroutine, "distinct" never repeats a partition. Run it
// with -cpu 1,2,4... to see scaling. The "own-limiter" modes give each
// goroutine a limiter of its own, which shares nothing: the bound on
// scaling that the shared limiter's design can reach.
func BenchmarkAllowParallel(b *testing.B) {
	for _, alg := range algorithms {
		for _, mode := range []string{"hot", "distinct", "hot/own-limiter", "distinct/own-limiter"} {
			b.Run(alg+"/"+mode, func(b *testing.B) {
				shared, err := New(Config{Algorithm: alg})
				if err != nil {
					b.Fatal(err)
				}
				mask := int64(4095)
				if strings.HasPrefix(mode, "distinct") {
					mask = -1
				}
				var g atomic.Int64
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					base := g.Add(1) << 40
					l := shared
					if strings.HasSuffix(mode, "/own-limiter") {
						own, err := New(Config{Algorithm: alg})
						if err != nil {
							b.Error(err)
							return
						}
						l = own
					}
					now := int64(epoch)
					var i int64
					for pb.Next() {
						i++
						now += 1000
						l.AllowAt(now, int64(mix(uint64(base|i&mask))), 0, 1000)
					}
				})
			})
		}
	}
}

// TestMemoryConstant counts 10,000,000 distinct partitions and checks that
// the heap does not grow: the tables are allocated by New.
func TestMemoryConstant(t *testing.T) {
	n := int64(10_000_000)
	if raceEnabled || testing.Short() {
		n = 200_000
	}
	for _, alg := range algorithms {
		l, err := New(Config{Algorithm: alg})
		if err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range n {
			l.Allow(int64(mix(uint64(i))), Label(i&1), 100)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		st := l.Stats()
		grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
		t.Logf("%s: %d distinct partitions: heap %d -> %d bytes (%+d), %d mallocs; table %d entries, %d live, %d evictions, %d failed allocations",
			alg, n, before.HeapAlloc, after.HeapAlloc, grew, after.Mallocs-before.Mallocs,
			st.Capacity, st.Entries, st.Evictions, st.FailedAllocations)
		if grew > 64<<10 {
			t.Errorf("%s: heap grew by %d bytes over %d partitions", alg, grew, n)
		}
		runtime.KeepAlive(l)
	}
}

// BenchmarkMemory counts n distinct partitions before timing decisions over
// them, and reports the heap in use afterwards: it stays at the size of the
// tables whether one partition or ten million were seen.
func BenchmarkMemory(b *testing.B) {
	for _, alg := range algorithms {
		for _, n := range []int64{1, 1_000, 100_000, 10_000_000} {
			b.Run(fmt.Sprintf("%s/partitions=%d", alg, n), func(b *testing.B) {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				l, err := New(Config{Algorithm: alg})
				if err != nil {
					b.Fatal(err)
				}
				for i := range n {
					l.Allow(int64(mix(uint64(i))), 1, 100)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportAllocs()
				var i int64
				for b.Loop() {
					l.Allow(int64(mix(uint64(i%n))), 1, 100)
					i++
				}
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc), "heap-B")
				b.ReportMetric(float64(after.Mallocs-before.Mallocs), "setup-mallocs")
				runtime.KeepAlive(l)
			})
		}
	}
}
