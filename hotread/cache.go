package hotread

import (
	"hash/maphash"
	"math/bits"
	"sync"
	"unsafe"
)

// maxCacheShards is how many locks a cache spreads its entries over, when
// its budget leaves room for several large entries in each.
const maxCacheShards = 64

// entryOverhead is what an entry costs beyond its bytes: its struct and its
// slot in the shard's map, counted against the cache's bound.
const entryOverhead = int64(unsafe.Sizeof(entry{})) + 32

// reuseSlack is how much larger than needed an evicted entry's buffer may be
// for Put to store a new answer in it: a buffer much larger than its entry
// would count against the bound for bytes nobody uses.
const reuseSlack = 256

// Cache is a short cache of answers to reads, bounded in bytes, least
// recently used evicted first, safe for concurrent use (its entries are
// spread over shards by hash, each with its own lock).
type Cache struct {
	seed      maphash.Seed
	maxAnswer int
	shift     uint // a hash's top bits pick its shard
	shards    []cacheShard
}

// cacheShard holds the entries whose hash falls in it, within its share of
// the cache's bytes.
type cacheShard struct {
	mu     sync.Mutex
	m      map[uint64]*entry
	lru    entry // sentinel: lru.next is the most recently used, lru.prev the least
	bytes  int64
	budget int64

	hits, misses, evictions, stored, tooLarge uint64

	_ [64]byte // keeps neighbouring shards' locks off one cache line
}

// entry is one stored answer. Its read's Keyspace and Body and its answer
// live in buf, which Put reuses for a later entry once this one is evicted.
type entry struct {
	hash       uint64
	read       Read
	gen        Gen
	expires    int64
	answer     []byte
	buf        []byte
	prev, next *entry
}

// cost returns what e counts against its shard's budget.
func (e *entry) cost() int64 { return int64(cap(e.buf)) + entryOverhead }

// NewCache returns a cache holding at most maxBytes of answers and
// identities together; answers larger than maxAnswer are not stored.
//
// The bound counts, for each entry, its read's Keyspace and Body, its answer
// and a fixed overhead. It is split evenly between shards, fewer of them
// when maxBytes is small next to maxAnswer, so that each still has room for
// several answers; an entry larger than a shard's share is not stored.
func NewCache(maxBytes int64, maxAnswer int) *Cache {
	maxAnswer = max(maxAnswer, 0)
	n := maxCacheShards
	for n > 1 && maxBytes/int64(n) < 8*(int64(maxAnswer)+entryOverhead) {
		n /= 2
	}
	c := &Cache{
		seed:      maphash.MakeSeed(),
		maxAnswer: maxAnswer,
		shift:     uint(64 - bits.TrailingZeros(uint(n))),
		shards:    make([]cacheShard, n),
	}
	for i := range c.shards {
		s := &c.shards[i]
		s.budget = max(maxBytes, 0) / int64(n)
		s.reset()
	}
	return c
}

// shard returns the shard of an entry hashed to h.
func (c *Cache) shard(h uint64) *cacheShard { return &c.shards[h>>c.shift] }

// Get appends to dst the answer stored for a read identical to r at
// generation gen that has not expired at now (nanoseconds, any monotonic
// clock the caller uses consistently), and returns it and true; else dst
// and false. It allocates nothing (beyond dst's growth). An entry found at
// another generation, or expired (now >= its expiry), is removed.
func (c *Cache) Get(dst []byte, r *Read, gen Gen, now int64) ([]byte, bool) {
	h := r.hash(c.seed)
	s := c.shard(h)
	s.mu.Lock()
	e := s.m[h]
	if e == nil || !identical(&e.read, r) {
		s.misses++
		s.mu.Unlock()
		return dst, false
	}
	if e.gen != gen || now >= e.expires {
		s.remove(e)
		s.misses++
		s.mu.Unlock()
		return dst, false
	}
	s.unlink(e)
	s.pushFront(e)
	s.hits++
	// The copy is made under the lock: once unlocked, e's buffer may be
	// evicted and reused.
	dst = append(dst, e.answer...)
	s.mu.Unlock()
	return dst, true
}

// Put stores a copy of answer for reads identical to r at generation gen,
// until expires (same clock as Get). It replaces any entry for the same
// read; it evicts least recently used entries to stay within maxBytes; it
// stores nothing if answer is over maxAnswer. Put reuses the buffer of an
// entry it replaces or evicts when it is about the right size, and
// allocates otherwise.
func (c *Cache) Put(r *Read, gen Gen, answer []byte, expires int64) {
	h := r.hash(c.seed)
	s := c.shard(h)
	need := r.identityLen() + len(answer)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(answer) > c.maxAnswer || int64(need)+entryOverhead > s.budget {
		s.tooLarge++
		return
	}
	// An entry under the same hash is for the same read or, rarely, for
	// another that collides with it: either way it gives way.
	var spare *entry
	if old := s.m[h]; old != nil {
		s.remove(old)
		spare = old
	}
	for s.bytes+int64(need)+entryOverhead > s.budget {
		e := s.lru.prev
		s.remove(e)
		s.evictions++
		spare = fitter(spare, e, need)
	}
	e := spare
	if e == nil || cap(e.buf) < need || cap(e.buf) > 2*need+reuseSlack {
		e = &entry{buf: make([]byte, need)}
	}
	// A reused buffer counts for all its capacity, which may need more room.
	for s.bytes+e.cost() > s.budget && s.lru.prev != &s.lru {
		s.remove(s.lru.prev)
		s.evictions++
	}
	if s.bytes+e.cost() > s.budget {
		e = &entry{buf: make([]byte, need)}
	}
	buf := e.buf[:need]
	rest := r.copyInto(&e.read, buf)
	copy(rest, answer)
	e.answer = rest[:len(answer):len(answer)]
	e.hash, e.gen, e.expires = h, gen, expires
	s.m[h] = e
	s.pushFront(e)
	s.bytes += e.cost()
	s.stored++
}

// fitter returns whichever of a and b is the better buffer for need bytes:
// the smaller of those large enough, or a when neither is.
func fitter(a, b *entry, need int) *entry {
	switch {
	case a == nil:
		return b
	case cap(b.buf) < need:
		return a
	case cap(a.buf) < need || cap(b.buf) < cap(a.buf):
		return b
	}
	return a
}

// Drop removes every entry; for a reload that turns the cache off. The
// cache's memory goes with them.
func (c *Cache) Drop() {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		s.reset()
		s.mu.Unlock()
	}
}

// CacheStats are a cache's counts since it was made. Evictions counts the
// entries removed to make room, not those found stale by Get; TooLarge the
// answers Put did not store for their size.
type CacheStats struct {
	Entries                                   int
	Bytes                                     int64
	Hits, Misses, Evictions, Stored, TooLarge uint64
}

// Stats returns the cache's current size and counts.
func (c *Cache) Stats() CacheStats {
	var st CacheStats
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		st.Entries += len(s.m)
		st.Bytes += s.bytes
		st.Hits += s.hits
		st.Misses += s.misses
		st.Evictions += s.evictions
		st.Stored += s.stored
		st.TooLarge += s.tooLarge
		s.mu.Unlock()
	}
	return st
}

// reset empties s, letting its entries go.
func (s *cacheShard) reset() {
	s.m = make(map[uint64]*entry)
	s.lru.next, s.lru.prev = &s.lru, &s.lru
	s.bytes = 0
}

// remove takes e out of s.
func (s *cacheShard) remove(e *entry) {
	s.unlink(e)
	delete(s.m, e.hash)
	s.bytes -= e.cost()
}

// unlink takes e out of s's recency list.
func (s *cacheShard) unlink(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

// pushFront makes e the most recently used entry of s.
func (s *cacheShard) pushFront(e *entry) {
	e.prev, e.next = &s.lru, s.lru.next
	s.lru.next.prev = e
	s.lru.next = e
}
