package ratelimit

import (
	"sync"
	"testing"
	"time"
)

func TestUnits(t *testing.T) {
	const s = int64(time.Second)
	u := NewUnits(64 << 10)
	const rate = 100.0 // units a second, a second's burst
	type step struct {
		name   string
		at     int64
		token  int64
		charge float64
		allow  bool
	}
	for _, st := range []step{
		{"never spent", 0, 1, 0, true},
		{"a large request takes it into debt", 0, 1, 250, false},
		{"another partition is not affected", 0, 2, 0, true},
		{"another label is another partition", 0, 1, 0, false},
		{"a second later still in debt", s, 1, 0, false},
		{"repaid", 2*s + s/2, 1, 0, true},
	} {
		u.Charge(st.at, st.token, 7, rate, st.charge)
		label := Label(7)
		if st.name == "another label is another partition" {
			label = 8
			if !u.Allow(st.at, st.token, label, rate) {
				t.Errorf("%s: refused", st.name)
			}
			continue
		}
		if got := u.Allow(st.at, st.token, label, rate); got != st.allow {
			t.Errorf("%s: Allow = %v, want %v", st.name, got, st.allow)
		}
	}
	// A debt is capped at a minute's rate.
	u.Charge(10*s, 3, 7, rate, 1e12)
	if u.Allow(69*s, 3, 7, rate) || !u.Allow(71*s, 3, 7, rate) {
		t.Errorf("a huge charge is not capped at a minute's debt")
	}
}

// Partitions whose buckets are full again give their entries up: a table
// of a few entries serves any number of partitions spread over time, and a
// full table fails open.
func TestUnitsFixedMemory(t *testing.T) {
	const s = int64(time.Second)
	u := NewUnits(0) // the least: one probe sequence a shard
	for i := range int64(10_000) {
		now := i * 2 * s // each partition's bucket is full by the next
		u.Charge(now, i, 1, 10, 5)
		if u.Allow(now, i, 1, 10) != true {
			t.Fatalf("partition %d refused after spending half its burst", i)
		}
	}
	if u.Failed() != 0 {
		t.Errorf("%d charges failed with entries free to reuse", u.Failed())
	}
	// All at once, in debt: the table fills, and the rest fail open.
	for i := range int64(10_000) {
		u.Charge(1e15, 100_000+i, 1, 10, 100)
	}
	if u.Failed() == 0 {
		t.Errorf("no charge failed with 10,000 partitions in debt in %d entries", 16*unitProbe)
	}
}

func TestUnitsConcurrent(t *testing.T) {
	u := NewUnits(1 << 20)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 10_000 {
				tok := int64(i % 100)
				if u.Allow(int64(i), tok, Label(g), 1000) {
					u.Charge(int64(i), tok, Label(g), 1000, 1)
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkUnits(b *testing.B) {
	u := NewUnits(1 << 20)
	b.ReportAllocs()
	for i := range b.N {
		tok := int64(i & 1023)
		if u.Allow(int64(i), tok, 1, 1e6) {
			u.Charge(int64(i), tok, 1, 1e6, 1)
		}
	}
}
