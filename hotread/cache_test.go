package hotread

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// checkCache fails t unless c's accounting is exact and within maxBytes:
// each shard's bytes are the sum of its entries' costs, its map and its
// recency list hold the same entries, and every entry's cost covers its
// identity, its answer and the overhead.
func checkCache(t testing.TB, c *Cache, maxBytes int64) {
	t.Helper()
	var total int64
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		var sum int64
		n := 0
		for e := s.lru.next; e != &s.lru; e = e.next {
			n++
			if e.next.prev != e {
				t.Fatalf("shard %d: broken recency list", i)
			}
			if s.m[e.hash] != e {
				t.Fatalf("shard %d: an entry in the list is not in the map", i)
			}
			if used := int64(e.read.identityLen()+len(e.answer)) + entryOverhead; used > e.cost() {
				t.Fatalf("shard %d: an entry uses %d bytes and costs %d", i, used, e.cost())
			}
			sum += e.cost()
		}
		if n != len(s.m) {
			t.Fatalf("shard %d: %d entries in the list, %d in the map", i, n, len(s.m))
		}
		if sum != s.bytes || s.bytes > s.budget {
			t.Fatalf("shard %d: entries cost %d, bytes %d, budget %d", i, sum, s.bytes, s.budget)
		}
		total += s.bytes
		s.mu.Unlock()
	}
	if st := c.Stats(); total > maxBytes || st.Bytes != total {
		t.Fatalf("cache holds %d bytes (Stats says %d), bound %d", total, st.Bytes, maxBytes)
	}
}

func TestCacheGetPut(t *testing.T) {
	t.Parallel()
	c := NewCache(1<<20, 100)
	r := baseRead()
	if got, ok := c.Get([]byte("x"), r, Gen{}, 0); ok || string(got) != "x" {
		t.Fatalf("Get on an empty cache = %q, %v", got, ok)
	}
	answer := []byte("first")
	c.Put(r, Gen{}, answer, 10)
	answer[0] = 'F' // Put keeps a copy
	r.Body[0] ^= 0xff
	r.Body[0] ^= 0xff // and of the identity: a caller reuses its buffers
	if got, ok := c.Get(nil, baseRead(), Gen{}, 0); !ok || string(got) != "first" {
		t.Fatalf("Get = %q, %v; want first", got, ok)
	}
	c.Put(r, Gen{}, []byte("second"), 10)
	if got, ok := c.Get(nil, r, Gen{}, 0); !ok || string(got) != "second" {
		t.Fatalf("Get after a second Put = %q, %v; want second", got, ok)
	}
	want := CacheStats{Entries: 1, Hits: 2, Misses: 1, Stored: 2}
	st := c.Stats()
	want.Bytes = st.Bytes
	if st != want {
		t.Fatalf("Stats = %+v, want %+v", st, want)
	}
	checkCache(t, c, 1<<20)
	c.Drop()
	if got, ok := c.Get(nil, r, Gen{}, 0); ok {
		t.Fatalf("Get after Drop = %q", got)
	}
	if st := c.Stats(); st.Entries != 0 || st.Bytes != 0 {
		t.Fatalf("Stats after Drop = %+v", st)
	}
	checkCache(t, c, 1<<20)
}

// TestCacheExpiry: an answer is served before its expiry and not from it.
func TestCacheExpiry(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		now  int64
		want bool
	}{{-1 << 62, true}, {999, true}, {1000, false}, {1001, false}} {
		c := NewCache(1<<20, 100)
		c.Put(baseRead(), Gen{}, []byte("a"), 1000)
		if _, ok := c.Get(nil, baseRead(), Gen{}, tc.now); ok != tc.want {
			t.Errorf("expiry 1000, Get at %d: found %v, want %v", tc.now, ok, tc.want)
		}
		if want := map[bool]int{true: 1, false: 0}[tc.want]; c.Stats().Entries != want {
			t.Errorf("expiry 1000, Get at %d: %d entries left, want %d", tc.now, c.Stats().Entries, want)
		}
	}
}

func TestCacheMaxAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		maxAnswer, size int
		stored          bool
	}{
		{100, 0, true}, {100, 100, true}, {100, 101, false},
		{0, 0, true}, {0, 1, false}, {-1, 0, true}, {-1, 1, false},
	} {
		c := NewCache(1<<20, tc.maxAnswer)
		c.Put(baseRead(), Gen{}, make([]byte, tc.size), 10)
		_, ok := c.Get(nil, baseRead(), Gen{}, 0)
		st := c.Stats()
		if ok != tc.stored || st.Stored+st.TooLarge != 1 || (st.TooLarge == 1) == tc.stored {
			t.Errorf("maxAnswer %d, answer of %d: found %v, stats %+v; want stored %v", tc.maxAnswer, tc.size, ok, st, tc.stored)
		}
	}
	// An entry larger than the whole cache is not stored either.
	c := NewCache(entryOverhead+10, 1000)
	c.Put(baseRead(), Gen{}, make([]byte, 100), 10)
	if st := c.Stats(); st.TooLarge != 1 || st.Entries != 0 {
		t.Errorf("an answer larger than the cache: %+v", st)
	}
}

// TestCacheLRU: the least recently used entry, Get or Put, goes first.
func TestCacheLRU(t *testing.T) {
	t.Parallel()
	const body, answer = 32, 64
	cost := int64(testRead(0, body).identityLen()+answer) + entryOverhead
	maxBytes := 3*cost + cost/2 // room for three
	c := NewCache(maxBytes, answer)
	if len(c.shards) != 1 {
		t.Fatalf("%d shards, want 1", len(c.shards))
	}
	put := func(i int) { c.Put(testRead(i, body), Gen{}, testAnswer(testRead(i, body), answer), 10) }
	has := func(i int) bool {
		got, ok := c.Get(nil, testRead(i, body), Gen{}, 0)
		if ok && string(got) != string(testAnswer(testRead(i, body), answer)) {
			t.Fatalf("read %d got another read's answer", i)
		}
		return ok
	}
	put(0)
	put(1)
	put(2)
	has(0) // 1 is now the least recently used
	put(3) // evicts 1
	put(2) // replaces 2, which becomes the most recent: 0 is the least
	put(4) // evicts 0
	checkCache(t, c, maxBytes)
	for i, want := range []bool{false, false, true, true, true} {
		if got := has(i); got != want {
			t.Errorf("read %d cached = %v, want %v", i, got, want)
		}
	}
	if st := c.Stats(); st.Evictions != 2 || st.Entries != 3 {
		t.Errorf("Stats = %+v, want 2 evictions and 3 entries", st)
	}
}

// TestCacheBound: however answers and identities vary in size, the cache
// stays within its bytes, and each read is served its own answer.
func TestCacheBound(t *testing.T) {
	t.Parallel()
	for _, maxBytes := range []int64{0, 1000, 5000, 1 << 16, 1 << 20} {
		t.Run(fmt.Sprint(maxBytes), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(maxBytes), 1))
			c := NewCache(maxBytes, 2000)
			sizes := make(map[int]int) // read -> its answer's size
			for i := range 5000 {
				k := rng.IntN(200)
				r := testRead(k, 8+k*k%300)
				if rng.IntN(3) == 0 {
					if got, ok := c.Get(nil, r, Gen{}, 0); ok && string(got) != string(testAnswer(r, sizes[k])) {
						t.Fatalf("op %d: read %d got another answer", i, k)
					}
				} else {
					// An answer too large to store leaves the one
					// before it, which is still good at its Gen.
					size, stored := rng.IntN(2100), c.Stats().Stored
					c.Put(r, Gen{}, testAnswer(r, size), 10)
					if c.Stats().Stored > stored {
						sizes[k] = size
					}
				}
				checkCache(t, c, maxBytes)
			}
		})
	}
}
