//go:build !race

package ratelimit

// raceEnabled shrinks the long simulations, which the race detector slows
// tenfold.
const raceEnabled = false
