package ratelimit

import (
	"sync"
	"testing"
)

func minHits(n uint32) func(uint32) uint32 { return func(uint32) uint32 { return n } }

func TestFleetShare(t *testing.T) {
	t.Parallel()
	const sec = int64(1e9)
	tests := []struct {
		name   string
		share  float64
		until  int64 // deadline, from now
		ops    int
		admits int
	}{
		{name: "no share yet", share: -1, ops: 100, admits: 100},
		{name: "a fifth", share: 0.2, until: sec, ops: 100, admits: 20},
		{name: "a third", share: 1.0 / 3, until: sec, ops: 300, admits: 100},
		{name: "all", share: 1, until: sec, ops: 50, admits: 50},
		{name: "over one", share: 3, until: sec, ops: 50, admits: 50},
		{name: "none", share: 0, until: sec, ops: 50, admits: 0},
		{name: "stale", share: 0, until: -1, ops: 50, admits: 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := NewFleet(64)
			now := int64(1_700_000_000) * sec
			f.Admit(now, 42, 7, 10) // tracked from here
			if tt.share >= 0 {
				got := f.Collect(nil, now, minHits(1), 10)
				if len(got) != 1 || got[0].Token != 42 || got[0].Label != 7 || got[0].Limit != 10 || got[0].Hits != 1 {
					t.Fatalf("collected %+v", got)
				}
				f.Set(got[0], tt.share, now+tt.until)
			}
			admits := 0
			for range tt.ops {
				if f.Admit(now, 42, 7, 10) {
					admits++
				}
			}
			if admits != tt.admits {
				t.Errorf("%d of %d admitted, want %d", admits, tt.ops, tt.admits)
			}
			if f.Admit(now, 43, 7, 10) != true || f.Admit(now, 42, 8, 10) != true {
				t.Error("another partition was not admitted")
			}
		})
	}
}

func TestFleetCollect(t *testing.T) {
	t.Parallel()
	// Room for far more than the 50 partitions: with 256 places, 4 to a
	// bucket and a random salt, a bucket took five of them in about one
	// run in twenty-five, and one went untracked.
	f := NewFleet(4096)
	for tok := range int64(50) {
		for range tok {
			f.Admit(0, tok, 1, 100)
		}
	}
	got := f.Collect(nil, 0, minHits(10), 5)
	if len(got) != 5 {
		t.Fatalf("collected %d, want 5", len(got))
	}
	for i, e := range got {
		if want := int64(49 - i); e.Token != want || e.Hits != uint32(want) {
			t.Errorf("entry %d: %+v, want token and hits %d", i, e, want)
		}
	}
	// Counts start again; the partitions under the bar are forgotten.
	if again := f.Collect(nil, 0, minHits(1), 100); len(again) != 0 {
		t.Errorf("collected again: %+v", again)
	}
	f.Admit(0, 3, 1, 100)
	if again := f.Collect(nil, 0, minHits(1), 100); len(again) != 1 || again[0].Hits != 1 {
		t.Errorf("a forgotten partition is not tracked again: %+v", again)
	}
}

// TestFleetSetAfterReuse: a share learned for a partition whose entry was
// since given to another is not applied to the other.
func TestFleetSetAfterReuse(t *testing.T) {
	t.Parallel()
	f := NewFleet(4)
	f.Admit(0, 1, 1, 10)
	got := f.Collect(nil, 0, minHits(1), 1)
	f.Collect(nil, 0, minHits(1), 1) // forgets it
	for tok := int64(2); tok < 10; tok++ {
		f.Admit(0, tok, 1, 10)
	}
	f.Set(got[0], 0, 1e12)
	for tok := int64(2); tok < 10; tok++ {
		if !f.Admit(0, tok, 1, 10) {
			t.Errorf("token %d refused by another's share", tok)
		}
	}
}

func TestFleetLocalLimit(t *testing.T) {
	t.Parallel()
	f := NewFleet(4)
	for _, tt := range []struct{ d, limit, want uint32 }{{1, 100, 100}, {0, 100, 100}, {3, 100, 33}, {3, 2, 1}} {
		f.SetDivisor(tt.d)
		if got := f.LocalLimit(tt.limit); got != tt.want {
			t.Errorf("divisor %d: LocalLimit(%d) = %d, want %d", tt.d, tt.limit, got, tt.want)
		}
	}
}

// TestFleetConcurrent: operations from many goroutines on one partition
// with a share admit exactly that share, and no count is lost.
func TestFleetConcurrent(t *testing.T) {
	t.Parallel()
	f := NewFleet(64)
	f.Admit(0, 5, 5, 10)
	e := f.Collect(nil, 0, minHits(1), 1)
	f.Set(e[0], 0.25, 1e12)
	var wg sync.WaitGroup
	var mu sync.Mutex
	admits := 0
	for range 8 {
		wg.Go(func() {
			n := 0
			for range 1000 {
				if f.Admit(0, 5, 5, 10) {
					n++
				}
			}
			mu.Lock()
			admits += n
			mu.Unlock()
		})
	}
	wg.Wait()
	if admits != 2000 {
		t.Errorf("%d of 8000 admitted, want 2000", admits)
	}
	if got := f.Collect(nil, 0, minHits(1), 1); len(got) != 1 || got[0].Hits != 8000 {
		t.Errorf("collected %+v, want 8000 hits", got)
	}
}

func BenchmarkFleetAdmit(b *testing.B) {
	f := NewFleet(16384)
	b.Run("tracked", func(b *testing.B) {
		f.Admit(0, 1, 1, 10)
		b.ReportAllocs()
		for b.Loop() {
			f.Admit(0, 1, 1, 10)
		}
	})
	b.Run("distinct", func(b *testing.B) {
		b.ReportAllocs()
		tok := int64(0)
		for b.Loop() {
			tok++
			f.Admit(0, tok, 1, 10)
			if tok%4096 == 0 {
				f.Collect(nil, 0, minHits(2), 0)
			}
		}
	})
}

// TestFleetLimitFollowsReload: a tracked partition reports the limit its
// operations name now, not the one it was first seen with.
func TestFleetLimitFollowsReload(t *testing.T) {
	t.Parallel()
	f := NewFleet(64)
	for range 10 {
		f.Admit(0, 1, 1, 100)
	}
	f.Collect(nil, 0, minHits(1), 10)
	for range 10 {
		f.Admit(0, 1, 1, 1000)
	}
	if got := f.Collect(nil, 0, minHits(1), 10); len(got) != 1 || got[0].Limit != 1000 {
		t.Errorf("collected %+v, want limit 1000", got)
	}
}

// TestFleetShareExpires: a share past its time is dropped by Collect, so
// that it does not come back once the milliseconds wrap, 24.8 days on.
func TestFleetShareExpires(t *testing.T) {
	t.Parallel()
	f := NewFleet(64)
	const ms = int64(1e6)
	f.Admit(0, 1, 1, 10)
	e := f.Collect(nil, 0, minHits(1), 10)
	f.Set(e[0], 0.1, 300*ms)
	f.Admit(0, 1, 1, 10)
	f.Collect(nil, 1000*ms, minHits(1), 10) // past its time; not Set again
	later := (1<<31 + 100) * ms
	admits := 0
	for range 100 {
		if f.Admit(later, 1, 1, 10) {
			admits++
		}
	}
	if admits != 100 {
		t.Errorf("%d of 100 admitted, want all: the share came back", admits)
	}
}

// TestFleetColdKeysRarelyTracked: a stream of partitions seen once each
// takes about one place in eight, while a partition seen again and again is
// tracked within a few operations.
func TestFleetColdKeysRarelyTracked(t *testing.T) {
	t.Parallel()
	f := NewFleet(1 << 14)
	now := int64(1_900_000_000) * 1e9
	for tok := range int64(8000) {
		now += 1 << 10 // a microsecond or so between operations
		f.Admit(now, tok, 1, 10)
	}
	cold := len(f.Collect(nil, now, minHits(1), 1<<14))
	if cold < 800 || cold > 1200 {
		t.Errorf("%d of 8000 cold partitions tracked, want about 1000", cold)
	}
	ops := 0
	for ; ops < 64 && len(f.Collect(nil, now, minHits(1), 1)) == 0; ops++ {
		now += 1 << 10
		f.Admit(now, 1<<40, 1, 10)
	}
	if ops > 16 {
		t.Errorf("a hot partition tracked after %d operations, want a few", ops)
	}
}
