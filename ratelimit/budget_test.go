package ratelimit

import (
	"sync"
	"testing"
	"time"
)

func TestBudget(t *testing.T) {
	const s = int64(time.Second)
	b := NewBudget(100, 2, 0) // 100 units/s, 200 at most
	steps := []struct {
		name   string
		at     int64
		charge float64
		allow  bool
		want   float64
	}{
		{"full", 0, 0, true, 200},
		{"spent", 0, 150, true, 50},
		{"into debt by one large request", 0, 250, false, -200},
		{"still in debt a second later", s, 0, false, -100},
		{"repaid after two seconds", 2 * s, 0, true, 0},
		{"refills to the burst, no more", 10 * s, 0, true, 200},
		{"time running back changes nothing", 5 * s, 0, true, 200},
		{"nothing charged for a negative cost", 10 * s, -5, true, 200},
		{"a debt is capped at a minute's rate", 10 * s, 1e9, false, -6000},
	}
	for _, st := range steps {
		b.Charge(st.at, st.charge)
		if got := b.Allow(st.at); got != st.allow {
			t.Errorf("%s: Allow = %v, want %v", st.name, got, st.allow)
		}
		if got := b.Balance(st.at); got != st.want {
			t.Errorf("%s: Balance = %v, want %v", st.name, got, st.want)
		}
	}
	// A smaller rate keeps the debt and lowers the burst.
	b.Set(10, 1, 10*s)
	if got := b.Balance(10 * s); got != -6000 {
		t.Errorf("after Set: Balance = %v, want the debt kept", got)
	}
	if got := b.Balance(1000 * s); got != 10 {
		t.Errorf("after Set and a long while: Balance = %v, want the new burst 10", got)
	}
}

func TestBudgetConcurrent(t *testing.T) {
	b := NewBudget(1000, 1, 0)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				now := int64(g*1000 + i)
				if b.Allow(now) {
					b.Charge(now, 1)
				}
			}
		})
	}
	wg.Wait()
	if got := b.Balance(0); got < -8 || got > 0 {
		t.Errorf("balance %v after 8 goroutines each spent while allowed", got)
	}
}

func BenchmarkBudget(b *testing.B) {
	bg := NewBudget(1e6, 1, 0)
	b.ReportAllocs()
	for i := range b.N {
		if bg.Allow(int64(i)) {
			bg.Charge(int64(i), 1)
		}
	}
}
