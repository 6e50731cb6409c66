package transport

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// unreadRaw is ioctl(2) SIOCINQ on fd: the bytes a socket holds unread. It
// cannot block. Unlike readRaw and writeRaw it has no checked variant
// (sockio_checked_linux.go): the kernel writes only its result, a local.
func unreadRaw(fd int) (int, syscall.Errno) {
	var n int32
	_, _, errno := syscall.RawSyscall(syscall.SYS_IOCTL, uintptr(fd), unix.SIOCINQ, uintptr(unsafe.Pointer(&n)))
	return int(n), errno
}
