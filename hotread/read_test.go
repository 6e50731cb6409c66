package hotread

import (
	"encoding/binary"
	"testing"
)

// baseRead returns a typical EXECUTE of a prepared read, fresh each time.
func baseRead() *Read {
	return &Read{
		Version:   4,
		Opcode:    0x0a,
		Principal: 0xfeedface,
		Keyspace:  []byte("shop"),
		Body:      []byte("\x00\x10prepared-id-0001\x00\x01\x00\x01\x00\x00\x00\x08user-042"),
		Table:     3,
		Token:     -4242,
	}
}

// testRead returns the i-th of a family of distinct reads, each of its own
// partition of table 1, with a body of about size bytes.
func testRead(i, size int) *Read {
	body := make([]byte, max(size, 8))
	binary.LittleEndian.PutUint64(body, uint64(i))
	return &Read{Version: 4, Opcode: 0x0a, Keyspace: []byte("ks"), Body: body, Table: 1, Token: int64(i)}
}

// testAnswer returns the answer the tests store for r: its body, reversed,
// padded to n bytes, so that an answer served for the wrong read shows.
func testAnswer(r *Read, n int) []byte {
	a := make([]byte, n)
	for i := range a {
		a[i] = r.Body[len(r.Body)-1-i%len(r.Body)]
	}
	return a
}

// variants are reads made from baseRead by changing one thing, and whether
// they are still identical to it.
var variants = []struct {
	name      string
	change    func(r *Read)
	identical bool
}{
	{"unchanged", func(r *Read) {}, true},
	{"version", func(r *Read) { r.Version = 5 }, false},
	{"flags", func(r *Read) { r.Flags = 0x02 }, false},
	{"opcode", func(r *Read) { r.Opcode = 0x07 }, false},
	{"compression", func(r *Read) { r.Compression = 1 }, false},
	{"options", func(r *Read) { r.Options = 1 }, false},
	{"principal", func(r *Read) { r.Principal++ }, false},
	{"no principal", func(r *Read) { r.Principal = 0 }, false},
	{"keyspace", func(r *Read) { r.Keyspace = []byte("shoq") }, false},
	{"no keyspace", func(r *Read) { r.Keyspace = nil }, false},
	// The keyspace's length is hashed and compared: its last byte moved
	// to the body is another read.
	{"keyspace byte moved to body", func(r *Read) {
		r.Body = append([]byte("p"), r.Body...)
		r.Keyspace = r.Keyspace[:len(r.Keyspace)-1]
	}, false},
	{"body first byte", func(r *Read) { r.Body[0] ^= 1 }, false},
	{"body last byte", func(r *Read) { r.Body[len(r.Body)-1] ^= 0x80 }, false},
	{"body longer", func(r *Read) { r.Body = append(r.Body, 0) }, false},
	{"body shorter", func(r *Read) { r.Body = r.Body[:len(r.Body)-1] }, false},
	// Table and Token are part of the identity, which keeps an answer
	// under the partition whose writes invalidate it.
	{"table", func(r *Read) { r.Table++ }, false},
	{"token", func(r *Read) { r.Token++ }, false},
	{"copied buffers", func(r *Read) {
		r.Keyspace = append([]byte(nil), r.Keyspace...)
		r.Body = append([]byte(nil), r.Body...)
	}, true},
}

// TestEmptyKeyspace: a nil and an empty keyspace are the same: no USE.
func TestEmptyKeyspace(t *testing.T) {
	t.Parallel()
	a, b := baseRead(), baseRead()
	a.Keyspace, b.Keyspace = nil, []byte{}
	seed := NewCache(1<<20, 1024).seed
	if !identical(a, b) || a.hash(seed) != b.hash(seed) {
		t.Fatal("a nil and an empty keyspace differ")
	}
	c := NewCache(1<<20, 1024)
	c.Put(a, Gen{}, []byte("answer"), 10)
	if got, ok := c.Get(nil, b, Gen{}, 0); !ok || string(got) != "answer" {
		t.Fatalf("Get with an empty keyspace = %q, %v; want the answer Put with a nil one", got, ok)
	}
	f := NewFlights[int](10, 10)
	if fl, _ := f.Join(a, Gen{}, 1); fl == nil {
		t.Fatal("first Join did not lead")
	}
	if _, joined := f.Join(b, Gen{}, 2); !joined {
		t.Fatal("a read with an empty keyspace did not join the same read with a nil one")
	}
}

// TestIdentity: a read is served the cached answer, and joins the flight,
// of exactly the reads identical to it.
func TestIdentity(t *testing.T) {
	t.Parallel()
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			r := baseRead()
			v.change(r)
			if got := identical(baseRead(), r); got != v.identical {
				t.Fatalf("identical = %v, want %v", got, v.identical)
			}

			c := NewCache(1<<20, 1024)
			c.Put(baseRead(), Gen{}, []byte("answer"), 10)
			got, ok := c.Get([]byte("dst:"), r, Gen{}, 0)
			if ok != v.identical {
				t.Fatalf("cache: Get found = %v, want %v", ok, v.identical)
			}
			if want := map[bool]string{true: "dst:answer", false: "dst:"}[ok]; string(got) != want {
				t.Fatalf("cache: Get = %q, want %q", got, want)
			}

			f := NewFlights[int](10, 10)
			first, joined := f.Join(baseRead(), Gen{}, 1)
			if first == nil || joined {
				t.Fatalf("flights: first Join = %v, %v; want to lead", first, joined)
			}
			fl, joined := f.Join(r, Gen{}, 2)
			if joined != v.identical || fl == nil || (fl == first) != v.identical {
				t.Fatalf("flights: second Join = %v, %v; want joined %v", fl, joined, v.identical)
			}
		})
	}
}
