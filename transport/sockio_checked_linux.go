//go:build linux && (race || msan || asan)

package transport

import "syscall"

// Under the race detector and the memory sanitizers the raw paths read and
// write through syscall.Read and syscall.Write, which tell the checker
// what the kernel read and wrote, and order the two ends of a socket for
// it; syscall.RawSyscall does neither. The waiting, deadlines and errors
// stay those of sockio.go, so tests under -race still run its paths.

// rawCalls reports whether readRaw and writeRaw make system calls.
const rawCalls = true

func readRaw(fd uintptr, b []byte) (int, syscall.Errno) {
	for {
		n, err := syscall.Read(int(fd), b)
		if err != syscall.EINTR {
			return n, errnoOf(err)
		}
	}
}

func writeRaw(fd uintptr, b []byte) (int, syscall.Errno) {
	for {
		n, err := syscall.Write(int(fd), b)
		if err != syscall.EINTR {
			return n, errnoOf(err)
		}
	}
}

// errnoOf is err, which syscall.Read and Write give only as an Errno, as
// one; 0 for nil.
func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	return err.(syscall.Errno)
}
