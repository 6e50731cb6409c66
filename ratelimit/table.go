package ratelimit

import "unsafe"

// hugePage is the size of the large pages a table is laid out for.
const hugePage = 2 << 20

// makeTable returns a zeroed table of n entries. A table of a large page
// or more starts on a large page boundary and is offered the kernel's
// large pages (adviseHuge): decisions read it at random places, and with
// small pages nearly every one of them also misses the processor's page
// cache (TLB) and walks the page tables, which costs as much again as
// the read. The table then holds up to one large page more of address
// space than it uses.
func makeTable[T any](n int) []T {
	size := int(unsafe.Sizeof(*new(T)))
	if n*size < hugePage {
		return make([]T, n)
	}
	buf := make([]T, n+hugePage/size)
	at := uintptr(unsafe.Pointer(&buf[0]))
	off := int((at+hugePage-1)&^(hugePage-1)-at) / size
	t := buf[off : off+n : off+n]
	adviseHuge(unsafe.Slice((*byte)(unsafe.Pointer(&t[0])), n*size))
	return t
}
