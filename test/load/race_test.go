//go:build race

package load

// raceEnabled is set under the race detector, whose sync.Pool drops a
// quarter of what is put back: a compressor borrowed from frame's pool is
// then allocated again, which says nothing of the loader's own allocations.
const raceEnabled = true
