package frame

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func TestQueryStringAndPreparedID(t *testing.T) {
	body := binary.BigEndian.AppendUint32(nil, 5)
	body = append(body, "hello"...)
	if q, err := QueryString(body); err != nil || string(q) != "hello" {
		t.Errorf("QueryString = %q, %v", q, err)
	}
	if _, err := QueryString(body[:6]); err == nil {
		t.Error("short body accepted")
	}
	id := append(binary.BigEndian.AppendUint16(nil, 3), 1, 2, 3, 9)
	if got, err := PreparedID(id); err != nil || !bytes.Equal(got, []byte{1, 2, 3}) {
		t.Errorf("PreparedID = %v, %v", got, err)
	}
	if _, err := PreparedID(id[:3]); err == nil {
		t.Error("short id accepted")
	}
}

func TestAppendError(t *testing.T) {
	f := AppendError(nil, 4, 12, ErrCodeProtocol, "bad")
	h, err := ParseHeader(f)
	if err != nil || !h.Response || h.Stream != 12 || h.Opcode != OpError || h.Length != len(f)-HeaderSize {
		t.Fatalf("header %+v, %v", h, err)
	}
	if code := int32(binary.BigEndian.Uint32(f[9:])); code != ErrCodeProtocol || string(f[15:]) != "bad" {
		t.Errorf("body % x", f[9:])
	}
}

func TestBytesMapLen(t *testing.T) {
	m := binary.BigEndian.AppendUint16(nil, 2)
	m = append(binary.BigEndian.AppendUint16(m, 1), 'k')
	m = append(binary.BigEndian.AppendUint32(m, 2), 'v', 'v')
	m = append(binary.BigEndian.AppendUint16(m, 1), 'n')
	m = binary.BigEndian.AppendUint32(m, 0xffffffff) // null value
	if n, ok := BytesMapLen(append(m, 0xAA)); !ok || n != len(m) {
		t.Errorf("BytesMapLen = %d, %v; want %d", n, ok, len(m))
	}
	if _, ok := BytesMapLen(m[:len(m)-1]); ok {
		t.Error("truncated map accepted")
	}
}

func FuzzBodies(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 'x'})
	f.Add([]byte{0, 1, 0, 1, 'k', 0, 0, 0, 1, 'v'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		if q, err := QueryString(b); err == nil && len(q) > len(b) {
			t.Fatal("query past body")
		}
		if id, err := PreparedID(b); err == nil && len(id) > len(b) {
			t.Fatal("id past body")
		}
		if n, ok := BytesMapLen(b); ok && n > len(b) {
			t.Fatal("map past body")
		}
	})
}
