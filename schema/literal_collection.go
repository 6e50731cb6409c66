package schema

// Collection, tuple, user type and vector literals (see literal.go).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// list appends a list literal [a, b, ...].
func (p *litParser) list(dst []byte, t Type, depth int) ([]byte, error) {
	et, err := elemType(t, 0)
	if err != nil {
		return dst, err
	}
	if err := p.expect('['); err != nil {
		return dst, err
	}
	at := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	n := 0
	if !p.punct(']') {
		for {
			if dst, err = p.element(dst, et, depth, false); err != nil {
				return dst, err
			}
			n++
			if p.punct(']') {
				break
			}
			if err := p.expect(','); err != nil {
				return dst, err
			}
		}
	}
	binary.BigEndian.PutUint32(dst[at:], uint32(n))
	return dst, nil
}

// span is an element's place in dst: start, the end of a map key, end.
type span struct{ start, mid, end int }

// set appends a set literal {a, b, ...}, its elements in their type's
// order and without duplicates, as Cassandra stores a set in a TreeSet.
func (p *litParser) set(dst []byte, t Type, depth int) ([]byte, error) {
	et, err := elemType(t, 0)
	if err != nil {
		return dst, err
	}
	if err := p.expect('{'); err != nil {
		return dst, err
	}
	at := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	var buf [16]span
	spans := buf[:0]
	if !p.punct('}') {
		for {
			s := len(dst)
			if dst, err = p.element(dst, et, depth, false); err != nil {
				return dst, err
			}
			spans = append(spans, span{start: s, end: len(dst)})
			if p.punct('}') {
				break
			}
			if err := p.expect(','); err != nil {
				return dst, err
			}
		}
	}
	slices.SortStableFunc(spans, func(a, b span) int {
		return compare(et, dst[a.start+4:a.end], dst[b.start+4:b.end])
	})
	// The first of equal elements stays, as TreeSet.add keeps it.
	spans = slices.CompactFunc(spans, func(a, b span) bool {
		return compare(et, dst[a.start+4:a.end], dst[b.start+4:b.end]) == 0
	})
	body, tail := at+4, len(dst)
	for _, s := range spans {
		dst = append(dst, dst[s.start:s.end]...)
	}
	dst = dst[:body+copy(dst[body:], dst[tail:])]
	binary.BigEndian.PutUint32(dst[at:], uint32(len(spans)))
	return dst, nil
}

// ErrDuplicateMapKey is returned for a map literal that gives a key twice.
var ErrDuplicateMapKey = errors.New("map literal gives a key twice")

// mapLiteral appends a map literal {k: v, ...}, its entries sorted by key.
// A key given twice is an error: Cassandra 5 keeps the first value or the
// last depending on the other entries, and a token must not be guessed.
func (p *litParser) mapLiteral(dst []byte, t Type, depth int) ([]byte, error) {
	kt, err := elemType(t, 0)
	if err != nil {
		return dst, err
	}
	vt, err := elemType(t, 1)
	if err != nil {
		return dst, err
	}
	if err := p.expect('{'); err != nil {
		return dst, err
	}
	at := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	var buf [16]span
	spans := buf[:0]
	if !p.punct('}') {
		for {
			s := len(dst)
			if dst, err = p.element(dst, kt, depth, false); err != nil {
				return dst, err
			}
			mid := len(dst)
			if err := p.expect(':'); err != nil {
				return dst, err
			}
			if dst, err = p.element(dst, vt, depth, false); err != nil {
				return dst, err
			}
			spans = append(spans, span{s, mid, len(dst)})
			if p.punct('}') {
				break
			}
			if err := p.expect(','); err != nil {
				return dst, err
			}
		}
	}
	keyCmp := func(a, b span) int {
		return compare(kt, dst[a.start+4:a.mid], dst[b.start+4:b.mid])
	}
	slices.SortStableFunc(spans, keyCmp)
	body, tail := at+4, len(dst)
	n := 0
	for i, sp := range spans {
		if i > 0 && keyCmp(spans[i-1], sp) == 0 {
			return dst, ErrDuplicateMapKey
		}
		dst = append(dst, dst[sp.start:sp.end]...)
		n++
	}
	dst = dst[:body+copy(dst[body:], dst[tail:])]
	binary.BigEndian.PutUint32(dst[at:], uint32(n))
	return dst, nil
}

// tuple appends a tuple literal (a, b, ...): each component's length and
// bytes, null as length -1. Cassandra accepts fewer components than the
// type has, and serializes only those given.
func (p *litParser) tuple(dst []byte, t Type, depth int) ([]byte, error) {
	if err := p.expect('('); err != nil {
		return dst, err
	}
	for i := 0; ; i++ {
		if i >= len(t.Elems) {
			return dst, fmt.Errorf("too many components for %s", t)
		}
		var err error
		if dst, err = p.element(dst, t.Elems[i], depth, true); err != nil {
			return dst, err
		}
		if p.punct(')') {
			return dst, nil
		}
		if err := p.expect(','); err != nil {
			return dst, err
		}
	}
}

// udt appends a user type literal {field: value, ...}: every field of the
// type in the type's order, the missing ones null.
func (p *litParser) udt(dst []byte, t Type, depth int) ([]byte, error) {
	if len(t.Fields) != len(t.Elems) {
		return dst, fmt.Errorf("user type %s has %d field names and %d field types", t.Name, len(t.Fields), len(t.Elems))
	}
	if err := p.expect('{'); err != nil {
		return dst, err
	}
	start := len(dst)
	var buf [16]span
	spans := buf[:0] // mid is the field's index
	for {
		name := p.next()
		if name.kind != litWord && name.kind != litQuoted {
			return dst, badToken(name, "a field name")
		}
		f := fieldIndex(t.Fields, name)
		if f < 0 {
			return dst, fmt.Errorf("unknown field %s in %s", name.text, t.Name)
		}
		for _, s := range spans {
			if s.mid == f {
				return dst, fmt.Errorf("duplicate field %s in %s", name.text, t.Name)
			}
		}
		if err := p.expect(':'); err != nil {
			return dst, err
		}
		s := len(dst)
		var err error
		if dst, err = p.element(dst, t.Elems[f], depth, true); err != nil {
			return dst, err
		}
		spans = append(spans, span{s, f, len(dst)})
		if p.punct('}') {
			break
		}
		if err := p.expect(','); err != nil {
			return dst, err
		}
	}
	tail := len(dst)
	for f := range t.Fields {
		i := slices.IndexFunc(spans, func(s span) bool { return s.mid == f })
		if i < 0 {
			dst = binary.BigEndian.AppendUint32(dst, math.MaxUint32)
			continue
		}
		dst = append(dst, dst[spans[i].start:spans[i].end]...)
	}
	return dst[:start+copy(dst[start:], dst[tail:])], nil
}

// fieldIndex finds a field by the name as written in a literal: an
// unquoted name is case-insensitive, as CQL lower-cases it.
func fieldIndex(fields []string, name litToken) int {
	for i, f := range fields {
		if name.kind == litQuoted {
			if quotedEqual(name.text, f, name.escaped) {
				return i
			}
			continue
		}
		if len(f) != len(name.text) {
			continue
		}
		match := true
		for j := range len(f) {
			c := name.text[j]
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != f[j] {
				match = false
				break
			}
		}
		if match {
			return i
		}
	}
	return -1
}

// quotedEqual reports whether a quoted identifier's content is s.
func quotedEqual(q []byte, s string, escaped bool) bool {
	if !escaped {
		return string(q) == s
	}
	j := 0
	for i := 0; i < len(q); i++ {
		if j >= len(s) || q[i] != s[j] {
			return false
		}
		if q[i] == '"' {
			i++
		}
		j++
	}
	return j == len(s)
}

// vector appends a vector literal [a, b, ...] of exactly Dim elements:
// fixed-size elements back to back, others each after its length as an
// unsigned vint.
func (p *litParser) vector(dst []byte, t Type, depth int) ([]byte, error) {
	et, err := elemType(t, 0)
	if err != nil {
		return dst, err
	}
	if err := p.expect('['); err != nil {
		return dst, err
	}
	fixed := valueLengthIfFixed(et)
	for i := 0; ; i++ {
		if i >= t.Dim {
			return dst, fmt.Errorf("too many elements for %s", t)
		}
		if p.null() {
			return dst, errors.New("null is not supported inside vectors")
		}
		if fixed >= 0 {
			if dst, err = p.value(dst, et, depth+1); err != nil {
				return dst, err
			}
		} else {
			// The length goes first and its size depends on the value:
			// write the value, then move it past its length.
			at := len(dst)
			if dst, err = p.value(dst, et, depth+1); err != nil {
				return dst, err
			}
			n := len(dst) - at
			var vint [9]byte
			l := putUvarint(vint[:], uint64(n))
			dst = append(dst, vint[:l]...)
			copy(dst[at+l:], dst[at:at+n])
			copy(dst[at:], vint[:l])
		}
		if p.punct(']') {
			if i+1 != t.Dim {
				return dst, fmt.Errorf("%d elements for %s", i+1, t)
			}
			return dst, nil
		}
		if err := p.expect(','); err != nil {
			return dst, err
		}
	}
}

// valueLengthIfFixed returns the size of every value of t, or -1 when
// values differ in size (Cassandra's AbstractType.valueLengthIfFixed).
func valueLengthIfFixed(t Type) int {
	switch t.Kind {
	case Boolean:
		return 1
	case Int, Float:
		return 4
	case Bigint, Counter, Double, Timestamp:
		return 8
	case Uuid, Timeuuid:
		return 16
	case Vector:
		if len(t.Elems) == 1 {
			if n := valueLengthIfFixed(t.Elems[0]); n >= 0 {
				return n * t.Dim
			}
		}
	}
	return -1
}
