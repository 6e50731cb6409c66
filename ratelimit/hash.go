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

// splitmixGamma is splitmix64's increment: the generator's state advances by
// it, and each output is the mix of the state.
const splitmixGamma = 0x9e3779b97f4a7c15

// splitmix is a pseudo-random generator for New, which derives salts and
// the stripes' seeds from one seed. Decisions draw from their stripe's.
type splitmix uint64

// next returns the next pseudo-random 64-bit value.
func (s *splitmix) next() uint64 {
	*s += splitmixGamma
	return mix(uint64(*s))
}
