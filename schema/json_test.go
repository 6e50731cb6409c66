package schema

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func TestAppendJSONKey(t *testing.T) {
	typ := func(k Kind) Type { return Type{Kind: k} }
	i32 := func(v int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }
	i64 := func(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }
	cases := []struct {
		doc  string
		col  string
		t    Type
		want []byte // nil: refused
	}{
		{`{"k": 42, "v": "x"}`, "k", typ(Int), i32(42)},
		{`{"v": "x", "k": -7}`, "k", typ(Int), i32(-7)},
		{`{"K": 42}`, "k", typ(Int), i32(42)},     // keys are lower-cased
		{`{"\"K\"": 42}`, "K", typ(Int), i32(42)}, // unless quoted
		{`{"\"K\"": 42}`, "k", typ(Int), nil},     // which keeps the case
		{`{"k": "42"}`, "k", typ(Int), i32(42)},   // an integer in a string
		{`{"k": 4.0}`, "k", typ(Int), nil},        // not an integer
		{`{"k": 1e3}`, "k", typ(Int), nil},        // nor this
		{`{"k": 3000000000}`, "k", typ(Int), nil}, // out of range
		{`{"k": 3000000000}`, "k", typ(Bigint), i64(3000000000)},
		{`{"k": 1, "K": 2}`, "k", typ(Int), nil}, // matched twice
		{`{"v": 1}`, "k", typ(Int), nil},         // missing
		{`{"k": null}`, "k", typ(Int), nil},      // null
		{`{"k": "caf\u00e9 \"q\" \ud83d\ude00"}`, "k", typ(Text), []byte("café \"q\" 😀")},
		{`{"k": 5}`, "k", typ(Text), nil}, // text wants a string
		{`{"k": true}`, "k", typ(Boolean), []byte{1}},
		{`{"k": "0xCAFE"}`, "k", typ(Blob), []byte{0xca, 0xfe}},
		{`{"k": "cafe"}`, "k", typ(Blob), nil},
		{`{"k": "123e4567-e89b-12d3-a456-426614174000"}`, "k", typ(Uuid), []byte{0x12, 0x3e, 0x45, 0x67, 0xe8, 0x9b, 0x12, 0xd3, 0xa4, 0x56, 0x42, 0x66, 0x14, 0x17, 0x40, 0x00}},
		{`{"k": "1.2.3.4"}`, "k", typ(Inet), []byte{1, 2, 3, 4}},
		{`{"k": 1577836800000}`, "k", typ(Timestamp), i64(1577836800000)},
		{`{"k": "2020-01-01 00:00:00+0000"}`, "k", typ(Timestamp), i64(1577836800000)},
		{`{"k": "it's"}`, "k", typ(Inet), nil},
		{`{"k": 1.5}`, "k", typ(Double), nil}, // not supported
		{`{"k": [1, {"a": [2]}], "j": 3}`, "j", typ(Int), i32(3)},
		{`{"k": 1} x`, "k", typ(Int), nil},
		{`[1]`, "k", typ(Int), nil},
		{`{"k": 1,}`, "k", typ(Int), nil},
		{`{"k" 1}`, "k", typ(Int), nil},
		{`{"k": "\x01"}`, "k", typ(Text), nil},
	}
	for _, tc := range cases {
		got, _, err := AppendJSONKey(nil, nil, []byte(tc.doc), tc.col, tc.t)
		if tc.want == nil {
			if err == nil {
				t.Errorf("%s [%s %v]: %x, want refused", tc.doc, tc.col, tc.t.Kind, got)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, tc.want) {
			t.Errorf("%s [%s %v]: %x %v, want %x", tc.doc, tc.col, tc.t.Kind, got, err, tc.want)
		}
	}
}

func TestAppendJSONKeyAllocs(t *testing.T) {
	doc := []byte(`{"name": "a \"quoted\" value", "k": 42, "tags": [1, 2, {"x": "y"}]}`)
	var dst, scratch []byte
	dst, scratch, _ = AppendJSONKey(dst, scratch, doc, "k", Type{Kind: Int})
	if n := testing.AllocsPerRun(100, func() {
		dst, scratch, _ = AppendJSONKey(dst[:0], scratch, doc, "k", Type{Kind: Int})
	}); n != 0 {
		t.Errorf("%v allocations", n)
	}
}

func FuzzAppendJSONKey(f *testing.F) {
	for _, s := range []string{`{"k": 42}`, `{"\"K\"": "x"}`, `{"k": [1, {"a": "\u00e9"}], "j": "0xab"}`, `{"k": "\ud83d\ude00"}`, `{`, `{"k": [[[[`} {
		f.Add([]byte(s))
	}
	kinds := []Kind{Int, Bigint, Text, Blob, Uuid, Timestamp, Inet, Date, Time, Boolean, Varint}
	f.Fuzz(func(t *testing.T, doc []byte) {
		for _, k := range kinds {
			AppendJSONKey(nil, nil, doc, "k", Type{Kind: k})
		}
	})
}
