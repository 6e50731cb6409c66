//go:build !linux

package transport

import "syscall"

// rawCalls reports whether readRaw and writeRaw make system calls: here
// they do not, and connections are read and written through net.Conn.
const rawCalls = false

func readRaw(fd uintptr, b []byte) (int, syscall.Errno)  { return 0, syscall.EINVAL }
func writeRaw(fd uintptr, b []byte) (int, syscall.Errno) { return 0, syscall.EINVAL }

func unreadRaw(fd int) (int, syscall.Errno) { return 0, syscall.EINVAL }
