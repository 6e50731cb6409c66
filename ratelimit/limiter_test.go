package ratelimit

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable clock for deterministic tests.
type fakeClock struct{ ns int64 }

func (c *fakeClock) now() int64 { return c.ns }

// epoch is a second boundary to start simulations at.
const epoch = 1_700_000_000 * 1e9

// newTest returns a deterministic limiter on clk.
func newTest(t testing.TB, cfg Config, clk *fakeClock) *Limiter {
	t.Helper()
	cfg.Clock = clk.now
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestNewConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr bool
		entries uint64 // total capacity, if no error
	}{
		{"zero value", Config{Shards: 2}, false, DefaultMemoryBytes / scyllaEntrySize},
		{"token bucket", Config{Algorithm: AlgorithmTokenBucket, Shards: 2, MemoryBytes: 3 << 20}, false, 2 * 65536},
		{"rounds down to power of two", Config{Shards: 3, MemoryBytes: 3 << 20}, false, 3 * 65536},
		{"unknown algorithm", Config{Algorithm: "leaky"}, true, 0},
		{"negative shards", Config{Shards: -1}, true, 0},
		{"negative memory", Config{MemoryBytes: -1}, true, 0},
		{"too little memory", Config{Shards: 4, MemoryBytes: 4 * 63 * scyllaEntrySize}, true, 0},
		{"negative burst", Config{Algorithm: AlgorithmTokenBucket, Burst: -1}, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.cfg.Validate(); (err != nil) != tt.wantErr {
				t.Errorf("Validate: err = %v, want an error: %v", err, tt.wantErr)
			}
			l, err := New(tt.cfg)
			if tt.wantErr {
				if !errors.Is(err, ErrConfig) {
					t.Fatalf("New: err = %v, want ErrConfig", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if got := l.Stats().Capacity; got != tt.entries {
				t.Errorf("Capacity = %d, want %d", got, tt.entries)
			}
		})
	}
}

func TestDecisionString(t *testing.T) {
	tests := []struct {
		d        Decision
		s        string
		accepted bool
	}{
		{Accept, "accept", true},
		{Reject, "reject", false},
		{AcceptUntracked, "accept_untracked", true},
		{Decision(9), "Decision(9)", true},
	}
	for _, tt := range tests {
		if got := tt.d.String(); got != tt.s {
			t.Errorf("String() = %q, want %q", got, tt.s)
		}
		if got := tt.d.Accepted(); got != tt.accepted {
			t.Errorf("%v.Accepted() = %v, want %v", tt.d, got, tt.accepted)
		}
	}
}

// TestScyllaCounting checks the counting rules one operation at a time:
// nothing is rejected up to 2L within a window, halving at second
// boundaries, lazily and for every window missed, and decay to zero.
func TestScyllaCounting(t *testing.T) {
	tests := []struct {
		name  string
		ops   int   // operations in the first second
		later int64 // seconds later, one more operation
		want  uint32
	}{
		{"same window", 10, 0, 11},
		{"one window later", 10, 1, 6},             // 10/2 + 1
		{"two windows later", 100, 2, 26},          // 100/2/2 + 1
		{"eighteen windows later", 1 << 19, 18, 3}, // 2^19 >> 18 + 1
		{"nineteen windows later", 1 << 19, 19, 1},
		{"long idle", 1000, 100000, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &fakeClock{ns: epoch}
			l := newTest(t, Config{Shards: 1, MemoryBytes: 1 << 16}, clk)
			s := &l.scylla[0]
			st := l.stripes.get()
			h := mix(mix(7^l.tokenSalt) ^ 1 ^ l.slotSalt)
			// count, unlike allow, does no lossy counting, which
			// would blur the figures: these tests are about halving.
			for range tt.ops {
				s.count(st, 7, 1, h, s.clock.Load())
			}
			clk.ns += tt.later * 1e9
			c := s.advance(&l.stripes, 0, l.window(clk.ns))
			got, _, ok := s.count(st, 7, 1, h, c)
			if !ok || got != tt.want {
				t.Errorf("count = %d, %v; want %d", got, ok, tt.want)
			}
		})
	}
}

// TestScyllaNoRejectUpTo2L checks that within one window the first 2L
// operations are accepted and later ones are rejected about as often as
// L/(x ln 2) says.
func TestScyllaNoRejectUpTo2L(t *testing.T) {
	clk := &fakeClock{ns: epoch}
	l := newTest(t, Config{Shards: 1}, clk)
	const limit = 50
	for i := 1; i <= 2*limit; i++ {
		if d := l.Allow(1, 0, limit); d != Accept {
			t.Fatalf("op %d: %v, want accept", i, d)
		}
	}
	accepted := 0
	for range 100 * limit {
		if l.Allow(1, 0, limit) == Accept {
			accepted++
		}
	}
	// Expected: the sum of L/(x ln 2) for x from 2L+1 to 102L, about
	// L*log2(51) = 283.6.
	if accepted < 240 || accepted > 330 {
		t.Errorf("accepted %d of %d operations above 2L, want about 284", accepted, 100*limit)
	}
}

// TestLossyCounting checks that every bucketOps operations on a shard
// lower every count by one and free entries whose count reaches zero.
func TestLossyCounting(t *testing.T) {
	clk := &fakeClock{ns: epoch}
	l := newTest(t, Config{Shards: 1, MemoryBytes: 1 << 20}, clk)
	l.Allow(1, 0, 1000)
	l.Allow(1, 0, 1000)
	if st := l.Stats(); st.Entries != 1 {
		t.Fatalf("Entries = %d, want 1", st.Entries)
	}
	// Two operations so far; complete the first bucket.
	for i := range bucketOps - 2 {
		l.Allow(int64(1000+i%1000), 0, 1000) // 9 or 10 ops each
	}
	// Token 1 counted 2, minus one bucket: still live. The others counted
	// 10 each, minus one: live.
	if st := l.Stats(); st.Entries != 1001 {
		t.Fatalf("after one bucket: Entries = %d, want 1001", st.Entries)
	}
	for i := range bucketOps {
		l.Allow(int64(2000+i), 0, 1000) // one op each: freed at once
	}
	if st := l.Stats(); st.Entries != 1000 {
		t.Fatalf("after two buckets: Entries = %d, want 1000 (token 1 and the 1-op partitions expired)", st.Entries)
	}
}

// TestFailOpen fills a tiny table and checks that partitions which find no
// free entry are admitted untracked and counted.
func TestFailOpen(t *testing.T) {
	for _, alg := range []string{AlgorithmScylla, AlgorithmTokenBucket} {
		t.Run(alg, func(t *testing.T) {
			clk := &fakeClock{ns: epoch}
			l := newTest(t, Config{Algorithm: alg, Shards: 1, MemoryBytes: minShardEntries * bucketEntrySize}, clk)
			untracked := 0
			for tok := range int64(1000) {
				if l.Allow(tok, 0, 1) == AcceptUntracked {
					untracked++
				}
			}
			st := l.Stats()
			if untracked == 0 || st.FailedAllocations != uint64(untracked) {
				t.Errorf("untracked %d, FailedAllocations %d; want equal and > 0", untracked, st.FailedAllocations)
			}
			if st.Entries > st.Capacity || st.Accepted+st.Rejected+st.FailedAllocations != 1000 {
				t.Errorf("inconsistent stats %+v", st)
			}
		})
	}
}

func TestTokenBucket(t *testing.T) {
	const ms = 1e6
	tests := []struct {
		name  string
		burst float64
		limit uint32
		steps []int64 // clock advance before each operation, ns
		want  string  // one letter per operation: a(ccept) or r(eject)
	}{
		{"burst of one second", 1, 3, []int64{0, 0, 0, 0}, "aaar"},
		{"refill", 1, 2, []int64{0, 0, 0, 500 * ms, 0}, "aarar"},
		{"rejections take no tokens", 1, 1, []int64{0, 0, 0, 0, 1000 * ms}, "arrra"},
		{"capacity at least one token", 0.001, 1, []int64{0, 0, 1000 * ms}, "ara"},
		{"half-second burst", 0.5, 10, []int64{0, 0, 0, 0, 0, 0, 100 * ms}, "aaaaara"},
		{"clock stepping back", 1, 1, []int64{0, -5000 * ms, 6000 * ms}, "ara"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &fakeClock{ns: epoch}
			l := newTest(t, Config{Algorithm: AlgorithmTokenBucket, Shards: 1, Burst: tt.burst}, clk)
			got := make([]byte, 0, len(tt.steps))
			for _, step := range tt.steps {
				clk.ns += step
				if l.Allow(42, 3, tt.limit) == Accept {
					got = append(got, 'a')
				} else {
					got = append(got, 'r')
				}
			}
			if string(got) != tt.want {
				t.Errorf("decisions %s, want %s", got, tt.want)
			}
		})
	}
}

// TestTokenBucketKeepsDebt checks that a partition in debt keeps its entry
// while entries ahead of it on its probe sequence are freed and reused.
func TestTokenBucketKeepsDebt(t *testing.T) {
	clk := &fakeClock{ns: epoch}
	l := newTest(t, Config{Algorithm: AlgorithmTokenBucket, Shards: 1, MemoryBytes: 64 * bucketEntrySize}, clk)
	// Fill the table with short-lived partitions, then drain a hot one.
	for tok := range int64(40) {
		l.Allow(tok+100, 0, 1000)
	}
	for range 10 {
		l.Allow(1, 0, 10)
	}
	// The short-lived buckets refill within 1 ms; the hot one is 1 s in
	// debt. New partitions take the freed entries.
	clk.ns += 2e6
	for tok := range int64(40) {
		l.Allow(tok+200, 0, 1000)
	}
	if d := l.Allow(1, 0, 10); d != Reject {
		t.Errorf("hot partition after churn: %v, want reject (its debt forgotten)", d)
	}
}

func TestUnlimitedNotCounted(t *testing.T) {
	clk := &fakeClock{ns: epoch}
	l := newTest(t, Config{Shards: 1}, clk)
	for range 1000 {
		if d := l.Allow(1, 0, 0); d != Accept {
			t.Fatalf("limit 0: %v", d)
		}
	}
	if st := l.Stats(); st != (Stats{Capacity: st.Capacity}) {
		t.Errorf("limit 0 changed stats: %+v", st)
	}
}

func TestAllowAll(t *testing.T) {
	clk := &fakeClock{ns: epoch}
	l := newTest(t, Config{Algorithm: AlgorithmTokenBucket, Shards: 2}, clk)
	batch := []Request{{1, 0, 100}, {2, 0, 1}, {3, 0, 100}}
	if d := l.AllowAll(batch); d != Accept {
		t.Fatalf("first batch: %v", d)
	}
	if d := l.AllowAll(batch); d != Reject {
		t.Fatalf("second batch: %v, want reject (partition 2 is over 1/s)", d)
	}
	// Every partition was counted, the rejected batch included.
	if st := l.Stats(); st.Accepted != 5 || st.Rejected != 1 {
		t.Errorf("stats %+v, want 5 accepted, 1 rejected", st)
	}
}

func TestAllowDoesNotAllocate(t *testing.T) {
	for _, alg := range []string{AlgorithmScylla, AlgorithmTokenBucket} {
		l, err := New(Config{Algorithm: alg})
		if err != nil {
			t.Fatal(err)
		}
		var tok int64
		allocs := testing.AllocsPerRun(10000, func() {
			tok++
			l.Allow(tok%5000, Label(tok%3), 100)
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per Allow", alg, allocs)
		}
	}
}

func TestDeterministicWithSeed(t *testing.T) {
	run := func() Stats {
		clk := &fakeClock{ns: epoch}
		l := newTest(t, Config{Shards: 4, Seed: 99}, clk)
		for i := range 100000 {
			clk.ns += 1e5
			l.Allow(int64(i%7), 0, 10)
		}
		return l.Stats()
	}
	if a, b := run(), run(); a != b {
		t.Errorf("same seed, different outcomes: %+v vs %+v", a, b)
	}
}

// TestConcurrentDecisions runs decisions from several goroutines on a
// frozen clock, some on one shared partition and some on partitions of
// their own, and checks that no count is lost: the token bucket admits
// exactly its burst of the shared partition, AlgorithmScylla admits at
// least twice the limit and counts every operation, and the statistics add
// up to the decisions.
func TestConcurrentDecisions(t *testing.T) {
	const (
		goroutines = 8
		perG       = 2000
		limit      = 100
	)
	for _, alg := range algorithms {
		t.Run(alg, func(t *testing.T) {
			frozen := func() int64 { return epoch }
			// No seed: the limiter hands out a stripe per processor.
			l, err := New(Config{Algorithm: alg, Shards: 2, Clock: frozen, MemoryBytes: 1 << 16})
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			accepted := make([]int, goroutines)
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range perG {
						tok := int64(1)
						if i%2 == 1 {
							tok = int64(g*perG + i + 10) // a partition of its own
						}
						if d := l.Allow(tok, 0, limit); d.Accepted() && tok == 1 {
							accepted[g]++
						}
					}
				}()
			}
			wg.Wait()
			hot := 0
			for _, a := range accepted {
				hot += a
			}
			switch alg {
			case AlgorithmTokenBucket:
				if hot != limit {
					t.Errorf("shared partition: %d accepted, want exactly %d", hot, limit)
				}
			case AlgorithmScylla:
				if hot < 2*limit {
					t.Errorf("shared partition: %d accepted, want at least %d", hot, 2*limit)
				}
				s := &l.scylla[pick(mix(1^l.tokenSalt), len(l.scylla))]
				st := l.stripes.get()
				n, _, _ := s.count(st, 1, 0, mix(mix(1^l.tokenSalt)^l.slotSalt), s.clock.Load())
				l.stripes.put(st)
				if want := uint32(goroutines*perG/2 + 1); n < want-uint32(s.clock.Load()) || n > want {
					t.Errorf("shared partition counted %d, want %d less at most the bucket %d", n, want, uint32(s.clock.Load()))
				}
			}
			st := l.Stats()
			if total := st.Accepted + st.Rejected + st.FailedAllocations; total != goroutines*perG {
				t.Errorf("stats count %d decisions, want %d: %+v", total, goroutines*perG, st)
			}
		})
	}
}

// TestLongRunNoStaleEntries runs a shard for thousands of windows, long
// enough for the 11-bit windows in its entries to wrap round, and checks
// that the sweep keeps every entry recognizably current and that decisions
// on new partitions then return at once. It also writes an entry with a
// clock reading taken before a jump of 1,500 windows, as a decision delayed
// across a pause would, and checks that the entry does not stall the
// decisions after it.
func TestLongRunNoStaleEntries(t *testing.T) {
	for _, windows := range []int{1030, 2100, 3500} {
		clk := &fakeClock{ns: epoch}
		l := newTest(t, Config{Shards: 1, MemoryBytes: 1 << 16}, clk)
		for range windows {
			clk.ns += 1e9
			l.Allow(1, 0, 1000)
		}
		s := &l.scylla[0]
		c := s.clock.Load()
		for j := range s.entries {
			if _, current := s.aged(s.entries[j].word.Load(), uint32(c>>32)); !current {
				t.Fatalf("after %d windows entry %d looks stamped in a later window", windows, j)
			}
		}
		decideSoon(t, l, 2, 2000)
	}

	clk := &fakeClock{ns: epoch}
	l := newTest(t, Config{Shards: 1, MemoryBytes: 1 << 16}, clk)
	s := &l.scylla[0]
	st := l.stripes.get()
	l.Allow(5, 0, 10)
	before := s.clock.Load()
	clk.ns += 1500 * 1e9
	l.Allow(5, 0, 10) // moves the clock on, zeroing the table
	if _, _, ok := s.count(st, 7, 0, mix(mix(7^l.tokenSalt)^l.slotSalt), before); !ok {
		t.Fatal("the delayed decision was not counted")
	}
	decideSoon(t, l, 7, 8)
}

// decideSoon decides operations on tokens [from, to) and fails if they do
// not all return within seconds.
func decideSoon(t *testing.T, l *Limiter, from, to int64) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for tok := from; tok < to; tok++ {
			l.Allow(tok, 0, 1000)
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("decisions on tokens %d to %d did not return", from, to-1)
	}
}
