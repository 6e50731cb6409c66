package ratelimit

import "syscall"

// adviseHuge asks the kernel to back b with large pages where it can
// (MADV_HUGEPAGE, for transparent huge pages in "madvise" mode). It is a
// hint: where the kernel refuses, b keeps small pages.
func adviseHuge(b []byte) {
	syscall.Madvise(b, syscall.MADV_HUGEPAGE)
}
