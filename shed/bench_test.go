package shed

import (
	"math/rand/v2"
	"testing"
)

func BenchmarkLatencyObserve(b *testing.B) {
	l, _ := NewLatency(LatencyConfig{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		now, v := int64(1e12), int64(1e6)
		for pb.Next() {
			now += 1000
			v = v*7%10_000_000 + 1
			l.Observe(now, v)
		}
	})
}

func BenchmarkQueueObserve(b *testing.B) {
	q, _ := NewQueue(QueueConfig{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		now := int64(1e12)
		for pb.Next() {
			now += 1000
			q.Observe(now, now%3)
		}
	})
}

func BenchmarkShed(b *testing.B) {
	c, _ := NewController(ControllerConfig{})
	for i := range 30 {
		c.Update(1e12+int64(i)*tick, slowReading(0.1), false)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		r := rand.New(rand.NewPCG(1, 2))
		n := 0
		for pb.Next() {
			if c.Shed(n%10, r.Float64()) {
				n++
			}
			n++
		}
	})
}

func BenchmarkRatio(b *testing.B) {
	l, _ := NewLatency(LatencyConfig{})
	now := int64(1e12)
	for i := range 100000 {
		l.Observe(now+int64(i)*400_000, int64(1e6+i%1000*1000))
	}
	now += 100000 * 400_000
	b.ReportAllocs()
	for b.Loop() {
		l.Ratio(now)
	}
}

// TestNoAllocs checks that recording, deciding and reading allocate nothing.
func TestNoAllocs(t *testing.T) {
	l, _ := NewLatency(LatencyConfig{})
	q, _ := NewQueue(QueueConfig{})
	c, _ := NewController(ControllerConfig{})
	now := int64(1e12)
	for name, f := range map[string]func(){
		"Latency.Observe": func() { now += 1e6; l.Observe(now, 2e6) },
		"Latency.Ratio":   func() { l.Ratio(now) },
		"Queue.Observe":   func() { now += 1e6; q.Observe(now, 0) },
		"Queue.Standing":  func() { q.Standing(now) },
		"Controller":      func() { now += tick; c.Update(now, slowReading(0.3), false); c.Shed(9, 0.5) },
	} {
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %v allocations", name, n)
		}
	}
}
