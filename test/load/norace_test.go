//go:build !race

package load

// raceEnabled is set under the race detector (see race_test.go).
const raceEnabled = false
