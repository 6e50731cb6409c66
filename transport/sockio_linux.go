//go:build linux && !race && !msan && !asan

package transport

import (
	"syscall"
	"unsafe"
)

// rawCalls reports whether readRaw and writeRaw make system calls.
const rawCalls = true

// readRaw is read(2) on fd, retried on EINTR, without the runtime's
// blocking system call bookkeeping (see sockio.go). b is not empty.
func readRaw(fd uintptr, b []byte) (int, syscall.Errno) {
	for {
		n, _, errno := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		if errno != syscall.EINTR {
			return int(n), errno
		}
	}
}

// writeRaw is write(2) on fd, retried on EINTR, as readRaw. b is not
// empty.
func writeRaw(fd uintptr, b []byte) (int, syscall.Errno) {
	for {
		n, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		if errno != syscall.EINTR {
			return int(n), errno
		}
	}
}
