//go:build amd64 || arm64

package ratelimit

// prefetch hints that the cache line at addr will be read soon. It never
// faults, whatever addr is.
func prefetch(addr uintptr)
