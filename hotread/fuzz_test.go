package hotread

import "testing"

// fuzzRead decodes a read from p, each fixed field from one bit so that the
// fuzzer often makes two reads equal but for one thing: bits 0-6 of p[0]
// are version, flags, opcode, compression, principal, table and token; bit
// 7 makes an empty keyspace nil rather than empty; p[1] % 4 is the
// keyspace's length, taken from the rest; bit 0 of p[2] is options, the
// body being what is left.
func fuzzRead(p []byte) *Read {
	var hdr [3]byte
	copy(hdr[:], p)
	p = p[min(len(p), 3):]
	bit := func(i uint) uint8 { return hdr[0] >> i & 1 }
	k := min(int(hdr[1]%4), len(p))
	r := &Read{
		Version: bit(0) + 3, Flags: bit(1), Opcode: bit(2), Compression: bit(3), Options: uint64(hdr[2] & 1),
		Principal: uint64(bit(4)), Table: uint32(bit(5)), Token: int64(bit(6)) - 1,
		Keyspace: p[:k], Body: p[k:],
	}
	if k == 0 && bit(7) == 1 {
		r.Keyspace = nil
	}
	return r
}

// readKey is a read as a comparable value, the test's own notion of two
// reads being the same, in which nil and empty are both "".
type readKey struct {
	version, flags, opcode, compression uint8
	options, principal                  uint64
	keyspace, body                      string
	table                               uint32
	token                               int64
}

func keyOf(r *Read) readKey {
	return readKey{r.Version, r.Flags, r.Opcode, r.Compression, r.Options, r.Principal,
		string(r.Keyspace), string(r.Body), r.Table, r.Token}
}

// FuzzIdentity: two reads share a cached answer and a flight exactly when
// all their fields are equal.
func FuzzIdentity(f *testing.F) {
	f.Add([]byte{0, 2, 'k', 's', 'b'}, []byte{0, 2, 'k', 's', 'b'})
	f.Add([]byte{0, 2, 'k', 's', 'b'}, []byte{0, 1, 'k', 's', 'b'})
	f.Add([]byte{0x80, 0, 'b'}, []byte{0, 0, 'b'})
	f.Add([]byte{0x7f, 3}, []byte{0x7f, 3})
	f.Add([]byte{0x01}, []byte{0x02})
	f.Add([]byte{}, []byte{0x40})
	f.Fuzz(func(t *testing.T, pa, pb []byte) {
		a, b := fuzzRead(pa), fuzzRead(pb)
		want := keyOf(a) == keyOf(b)
		if got := identical(a, b); got != want {
			t.Fatalf("identical(%+v, %+v) = %v, want %v", a, b, got, want)
		}

		c := NewCache(1<<16, 1024)
		c.Put(a, Gen{}, []byte("a"), 1)
		if _, ok := c.Get(nil, b, Gen{}, 0); ok != want {
			t.Fatalf("cache: Put %+v, Get %+v found %v, want %v", a, b, ok, want)
		}

		fl := NewFlights[int](4, 4)
		first, _ := fl.Join(a, Gen{}, 0)
		if first == nil {
			t.Fatal("flights: the first Join did not lead")
		}
		if lead, joined := fl.Join(b, Gen{}, 1); joined != want || lead == nil || (lead == first) != want {
			t.Fatalf("flights: Join %+v after %+v = %v, %v; want joined %v", b, a, lead, joined, want)
		}
	})
}

// FuzzCacheBound runs a sequence of operations decoded from the input on a
// small cache and checks after each that it stays within its bytes with
// exact accounting, and that a read is only served its own latest answer.
//
// Input: byte 0 picks the cache's size; then 3-byte records: the operation
// (low 2 bits of byte 0: Put, Get, Drop, a clock step) and the read (high 6
// bits), the answer's size (byte 1, times 8) and the read's body size
// (byte 2).
func FuzzCacheBound(f *testing.F) {
	f.Add([]byte{0, 0, 1, 1, 1, 1, 1})
	f.Add([]byte{3, 0x04, 0xff, 0, 0x08, 0x10, 0x40, 0x05, 0xff, 0, 0x03, 20, 0, 0x02, 0, 0})
	f.Add([]byte{200, 0x00, 0x80, 0x80, 0x04, 0x80, 0x80, 0x08, 0x20, 0x20, 0x01, 0x00, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		maxBytes := int64(data[0]) * 64
		c := NewCache(maxBytes, 1024)
		latest := map[[2]int][]byte{} // read, body size -> the answer last stored for it
		var now int64
		for rec := data[1:]; len(rec) >= 3; rec = rec[3:] {
			r := testRead(int(rec[0]>>2), int(rec[2]))
			k := [2]int{int(rec[0] >> 2), len(r.Body)}
			switch rec[0] & 3 {
			case 0:
				answer := testAnswer(r, int(rec[1])*8)
				stored := c.Stats().Stored
				c.Put(r, Gen{}, answer, now+100)
				if c.Stats().Stored > stored {
					latest[k] = answer
				}
			case 1:
				got, ok := c.Get(nil, r, Gen{}, now)
				if ok && (latest[k] == nil || string(got) != string(latest[k])) {
					t.Fatalf("read %v served an answer it was not last given", k)
				}
			case 2:
				c.Drop()
				clear(latest)
			case 3:
				now += int64(rec[1])
			}
			checkCache(t, c, maxBytes)
		}
	})
}
