package ratelimit

import "unsafe"

// Prefetch asks the processor to bring the counter of the partition with
// the given token, under label, towards its cache, without waiting for it.
// The counter sits at a random place in a table of megabytes, so the
// decision that reads it first waits on main memory; a caller that knows
// the partition some work before it calls Allow can start that wait
// beside the work. It counts nothing and changes nothing, and on an
// architecture without a prefetch instruction it does nothing.
func (l *Limiter) Prefetch(token int64, label Label) {
	th, h := l.hash(token, label)
	var p unsafe.Pointer
	if l.scylla != nil {
		s := &l.scylla[pick(th, len(l.scylla))]
		p = unsafe.Pointer(&s.entries[h&uint64(len(s.entries)-1)])
	} else {
		s := &l.bucket[pick(th, len(l.bucket))]
		p = unsafe.Pointer(&s.entries[h&uint64(len(s.entries)-1)])
	}
	prefetch(uintptr(p))
}
