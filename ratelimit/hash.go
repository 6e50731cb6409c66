package ratelimit

// mix is the splitmix64 finalizer: a bijection on 64 bits whose every output
// bit depends on every input bit. It spreads tokens (already well mixed by
// Murmur3, but chosen by clients) and salted keys over table slots.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// splitmix is a per-shard pseudo-random generator. It lives under the
// shard's lock, so it needs no synchronization of its own, and it is a plain
// integer, so drawing from it never allocates.
type splitmix uint64

// next returns the next pseudo-random 64-bit value.
func (s *splitmix) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	return mix(uint64(*s))
}

// float returns a pseudo-random number uniform in [0, 1), from the top 53
// bits so that every value is exactly representable.
func (s *splitmix) float() float64 {
	return float64(s.next()>>11) * 0x1p-53
}
