//go:build !amd64 && !arm64

package ratelimit

// prefetch does nothing where no prefetch instruction is wired up.
func prefetch(addr uintptr) {}
