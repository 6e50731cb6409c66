package classify

import (
	"crypto/md5"
	"fmt"
	"testing"
)

func TestPreparedRegistryBounded(t *testing.T) {
	r := NewRegistry(640, 0)
	id := func(i int) []byte { s := md5.Sum([]byte(fmt.Sprint(i))); return s[:] }
	for i := range 10000 {
		r.put(id(i), &Prepared{topology: TopologyLocal})
	}
	if n := r.Len(); n > 640+preparedShards {
		t.Fatalf("%d statements held, bound 640", n)
	}
	if r.get(id(9999)) == nil {
		t.Error("newest statement forgotten")
	}
	if r.get(id(0)) != nil {
		t.Error("oldest statement kept")
	}
	if n := testing.AllocsPerRun(100, func() { r.get(id(5)) }); n > 1 { // id() itself allocates one
		t.Errorf("get allocates %v", n)
	}
}

// Statements large in memory are bounded by bytes as well as by count: a
// few PREPAREs of long IN lists of literals cannot hold more than
// max_prepared_bytes.
func TestPreparedRegistryBoundedInBytes(t *testing.T) {
	r := NewRegistry(100000, 4<<20)
	id := func(i int) []byte { s := md5.Sum([]byte(fmt.Sprint(i))); return s[:] }
	large := func() *Prepared {
		terms := make([]pkSource, 20000)
		for i := range terms {
			terms[i] = pkSource{index: -1, start: uint32(4 * i), end: uint32(4*i + 4)}
		}
		return &Prepared{op: OpRead, sources: [][]pkSource{terms}, literals: make([]byte, 4*len(terms))}
	}
	one := large().size()
	for i := range 20 {
		r.put(id(i), large())
	}
	if got := r.Size(); got > 4<<20 {
		t.Errorf("registry holds %d bytes of statements, bound %d", got, 4<<20)
	}
	if want := (4 << 20) / one; r.Len() > want {
		t.Errorf("%d statements of %d bytes held, want at most %d", r.Len(), one, want)
	}
	if r.get(id(19)) == nil || r.get(id(0)) != nil {
		t.Error("not the oldest forgotten first")
	}
	// One statement over the bound is kept alone, so that it can be
	// executed at all.
	r.maxBytes = one / 2
	r.put(id(100), large())
	if r.Len() != 1 || r.get(id(100)) == nil {
		t.Errorf("a statement over the bound: %d held", r.Len())
	}
	// Replacing a statement accounts for its new size.
	r.put(id(100), &Prepared{})
	if got := r.Size(); got > 1024 {
		t.Errorf("after replacing the large statement with a small one: %d bytes", got)
	}
}
