//go:build !linux

package ratelimit

// adviseHuge does nothing where large pages are not asked for.
func adviseHuge(b []byte) {}
