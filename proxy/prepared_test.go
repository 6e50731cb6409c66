package proxy

import (
	"crypto/md5"
	"fmt"
	"testing"
)

func TestPreparedRegistryBounded(t *testing.T) {
	r := newPreparedRegistry(640)
	id := func(i int) []byte { s := md5.Sum([]byte(fmt.Sprint(i))); return s[:] }
	for i := range 10000 {
		r.put(id(i), &preparedStatement{table: replyLocal})
	}
	if n := r.len(); n > 640+preparedShards {
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
