package schema

// The order Cassandra sorts set elements and map keys in, for serializing
// set and map literals as it does (see literal.go).

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/big"
)

// compare orders two serialized values of type t as Cassandra's
// comparator for the type does, for sorting sets and map keys. Empty
// values sort first.
func compare(t Type, a, b []byte) int {
	if len(a) == 0 || len(b) == 0 {
		return cmpInt(len(a), len(b))
	}
	switch t.Kind {
	case Tinyint, Smallint, Int, Bigint, Counter, Timestamp, Time, Varint:
		return compareSigned(a, b)
	case Float:
		return compareFloat(float64(math.Float32frombits(binary.BigEndian.Uint32(a))), float64(math.Float32frombits(binary.BigEndian.Uint32(b))))
	case Double:
		return compareFloat(math.Float64frombits(binary.BigEndian.Uint64(a)), math.Float64frombits(binary.BigEndian.Uint64(b)))
	case Decimal:
		return compareDecimal(a, b)
	case Uuid:
		return compareUUID(a, b)
	case Timeuuid:
		if c := compareTimestampBytes(a, b); c != 0 {
			return c
		}
		for i := 8; i < 16; i++ {
			if c := cmpInt(int(int8(a[i])), int(int8(b[i]))); c != 0 {
				return c
			}
		}
		return 0
	case List, Set:
		return compareCollection(t.Elems, false, a, b)
	case Map:
		return compareCollection(t.Elems, true, a, b)
	case Tuple, UDT:
		return compareTuple(t.Elems, a, b)
	case Vector:
		return compareVector(t, a, b)
	}
	// ascii, text, blob, boolean, inet, date, custom: unsigned bytes.
	return bytes.Compare(a, b)
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// compareSigned compares big-endian two's complement integers of any
// length, minimal or not.
func compareSigned(a, b []byte) int {
	na, nb := a[0]&0x80 != 0, b[0]&0x80 != 0
	if na != nb {
		if na {
			return -1
		}
		return 1
	}
	// Sign-extend the shorter to the longer's length.
	ext := byte(0)
	if na {
		ext = 0xff
	}
	for len(a) < len(b) {
		if c := cmpInt(int(ext), int(b[0])); c != 0 {
			return c
		}
		b = b[1:]
	}
	for len(b) < len(a) {
		if c := cmpInt(int(a[0]), int(ext)); c != 0 {
			return c
		}
		a = a[1:]
	}
	return bytes.Compare(a, b)
}

// compareFloat orders as Java's Double.compare: -0 before 0, NaN last.
func compareFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	an, bn := math.IsNaN(a), math.IsNaN(b)
	switch {
	case an || bn:
		return cmpBool(an, bn)
	case a == 0 && b == 0:
		return cmpBool(!math.Signbit(a), !math.Signbit(b))
	}
	return 0
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// compareDecimal orders as BigDecimal.compareTo: by value, so that 1.0 and
// 1.00 are equal.
func compareDecimal(a, b []byte) int {
	if len(a) < 4 || len(b) < 4 {
		return bytes.Compare(a, b)
	}
	x, y := decimalRat(a), decimalRat(b)
	if x == nil || y == nil {
		return bytes.Compare(a, b)
	}
	return x.Cmp(y)
}

// decimalRat returns a serialized decimal's value, or nil when its scale
// is too large to expand.
func decimalRat(v []byte) *big.Rat {
	scale := int64(int32(binary.BigEndian.Uint32(v)))
	u := new(big.Int).SetBytes(v[4:])
	if len(v) > 4 && v[4]&0x80 != 0 {
		u.Sub(u, new(big.Int).Lsh(big.NewInt(1), uint(8*(len(v)-4))))
	}
	if scale > 1<<16 || scale < -(1<<16) {
		return nil
	}
	p := new(big.Int).Exp(big.NewInt(10), big.NewInt(abs(scale)), nil)
	r := new(big.Rat).SetInt(u)
	if scale > 0 {
		return r.Quo(r, new(big.Rat).SetInt(p))
	}
	return r.Mul(r, new(big.Rat).SetInt(p))
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// compareUUID orders as UUIDType: by version, then version 1 by time,
// then by unsigned bytes.
func compareUUID(a, b []byte) int {
	if len(a) != 16 || len(b) != 16 {
		return cmpInt(len(a), len(b))
	}
	va, vb := a[6]>>4, b[6]>>4
	if va != vb {
		return cmpInt(int(va), int(vb))
	}
	if va == 1 {
		if c := compareTimestampBytes(a, b); c != 0 {
			return c
		}
	}
	return bytes.Compare(a, b)
}

// compareTimestampBytes compares version 1 uuids' 60-bit timestamps:
// time_hi, time_mid, time_low.
func compareTimestampBytes(a, b []byte) int {
	if len(a) != 16 || len(b) != 16 {
		return cmpInt(len(a), len(b))
	}
	if c := cmpInt(int(a[6]&0xf), int(b[6]&0xf)); c != 0 {
		return c
	}
	for _, i := range [...]int{7, 4, 5, 0, 1, 2, 3} {
		if c := cmpInt(int(a[i]), int(b[i])); c != 0 {
			return c
		}
	}
	return 0
}

// nextValue splits a 4-byte length and value off b; a negative length is
// null, returned as nil with ok.
func nextValue(b []byte) (v, rest []byte, null, ok bool) {
	if len(b) < 4 {
		return nil, nil, false, false
	}
	n := int32(binary.BigEndian.Uint32(b))
	b = b[4:]
	if n < 0 {
		return nil, b, true, true
	}
	if int(n) > len(b) {
		return nil, nil, false, false
	}
	return b[:n], b[n:], false, true
}

// compareCollection orders frozen lists and sets (elems[0]) and maps (key
// and value) as CollectionType: element by element, then by size.
func compareCollection(elems []Type, isMap bool, a, b []byte) int {
	if len(a) < 4 || len(b) < 4 || len(elems) == 0 || isMap && len(elems) < 2 {
		return bytes.Compare(a, b)
	}
	na, nb := int32(binary.BigEndian.Uint32(a)), int32(binary.BigEndian.Uint32(b))
	a, b = a[4:], b[4:]
	for range min(na, nb) {
		for k := 0; k < 1 || isMap && k < 2; k++ {
			ea, ra, _, oka := nextValue(a)
			eb, rb, _, okb := nextValue(b)
			if !oka || !okb {
				return bytes.Compare(a, b)
			}
			if c := compare(elems[k], ea, eb); c != 0 {
				return c
			}
			a, b = ra, rb
		}
	}
	return cmpInt(int(na), int(nb))
}

// compareTuple orders tuples and user type values as TupleType: component
// by component with null first; trailing nulls and empties do not count.
func compareTuple(elems []Type, a, b []byte) int {
	for i := 0; i < len(elems) && len(a) > 0 && len(b) > 0; i++ {
		ea, ra, nulla, oka := nextValue(a)
		eb, rb, nullb, okb := nextValue(b)
		if !oka || !okb {
			return bytes.Compare(a, b)
		}
		a, b = ra, rb
		if nulla || nullb {
			if nulla && nullb {
				continue
			}
			return cmpBool(nullb, nulla)
		}
		if c := compare(elems[i], ea, eb); c != 0 {
			return c
		}
	}
	for len(a) > 0 {
		v, r, _, ok := nextValue(a)
		if !ok || len(v) > 0 {
			return 1
		}
		a = r
	}
	for len(b) > 0 {
		v, r, _, ok := nextValue(b)
		if !ok || len(v) > 0 {
			return -1
		}
		b = r
	}
	return 0
}

// compareVector orders vectors element by element.
func compareVector(t Type, a, b []byte) int {
	if len(t.Elems) != 1 {
		return bytes.Compare(a, b)
	}
	et := t.Elems[0]
	fixed := valueLengthIfFixed(et)
	for range t.Dim {
		var ea, eb []byte
		var ok bool
		if fixed >= 0 {
			if len(a) < fixed || len(b) < fixed {
				return bytes.Compare(a, b)
			}
			ea, a, eb, b = a[:fixed], a[fixed:], b[:fixed], b[fixed:]
		} else {
			if ea, a, ok = splitUvarint(a); !ok {
				return bytes.Compare(a, b)
			}
			if eb, b, ok = splitUvarint(b); !ok {
				return bytes.Compare(a, b)
			}
		}
		if c := compare(et, ea, eb); c != 0 {
			return c
		}
	}
	return 0
}

// splitUvarint splits an unsigned-vint-prefixed value off b.
func splitUvarint(b []byte) (v, rest []byte, ok bool) {
	if len(b) == 0 {
		return nil, nil, false
	}
	extra := 0
	for extra < 8 && b[0]&(0x80>>extra) != 0 {
		extra++
	}
	if len(b) < 1+extra {
		return nil, nil, false
	}
	n := uint64(b[0] & (0xff >> (extra + 1)))
	if extra == 8 {
		n = 0
	}
	for i := 1; i <= extra; i++ {
		n = n<<8 | uint64(b[i])
	}
	b = b[1+extra:]
	if n > uint64(len(b)) {
		return nil, nil, false
	}
	return b[:n], b[n:], true
}
