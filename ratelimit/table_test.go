package ratelimit

import (
	"testing"
	"unsafe"
)

func TestMakeTable(t *testing.T) {
	for _, n := range []int{1, 64, hugePage/scyllaEntrySize - 1, hugePage / scyllaEntrySize, 3 * hugePage / scyllaEntrySize} {
		tab := makeTable[scyllaEntry](n)
		if len(tab) != n || cap(tab) != n {
			t.Fatalf("%d entries: len %d cap %d", n, len(tab), cap(tab))
		}
		at := uintptr(unsafe.Pointer(&tab[0]))
		if n*scyllaEntrySize >= hugePage && at%hugePage != 0 {
			t.Errorf("%d entries start at %#x, not on a large page", n, at)
		}
		for i := range tab {
			if tab[i].token.Load() != 0 || tab[i].word.Load() != 0 {
				t.Fatalf("%d entries: entry %d not zero", n, i)
			}
		}
	}
}

// Prefetch changes no count: a limiter that prefetched decides as one with
// the same seed that did not.
func TestPrefetchChangesNothing(t *testing.T) {
	for _, alg := range []string{AlgorithmScylla, AlgorithmTokenBucket} {
		clk := &fakeClock{ns: epoch}
		cfg := Config{Algorithm: alg, MemoryBytes: 64 << 10, Shards: 2, Seed: 7, Clock: clk.now}
		a, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5000 {
			token, label := int64(i%37)*1e15, Label(i%3)
			a.Prefetch(token, label)
			if da, db := a.AllowAt(clk.ns, token, label, 10), b.AllowAt(clk.ns, token, label, 10); da != db {
				t.Fatalf("%s: operation %d: %v after Prefetch, %v without", alg, i, da, db)
			}
			clk.ns += int64(1e6)
		}
		if sa, sb := a.Stats(), b.Stats(); sa != sb {
			t.Errorf("%s: stats %+v after Prefetch, %+v without", alg, sa, sb)
		}
	}
}
