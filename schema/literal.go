package schema

// Serialization of CQL literals: the bytes Cassandra computes from a literal
// in a statement's text, which are the bytes a driver would have bound for
// it (protocol v3 and later collection format), and so the bytes the
// partition key's token is computed from.
//
// Supported, following Cassandra 4 and 5 (Constants.Literal and the types'
// fromString):
//   - integers (-?[0-9]+) for tinyint, smallint, int, bigint, counter and
//     varint of any size, and for decimal, float, double, date (days, with
//     the epoch at 2^31), time (nanoseconds of the day) and timestamp
//     (milliseconds since the epoch);
//   - floating point literals (1.5, 5., 3e10, 2.5E-3), NaN, -NaN, Infinity
//     and -Infinity (any case) for float and double, the finite ones for
//     decimal;
//   - true and false (any case); blobs 0x...; uuids, version 1 only for
//     timeuuid;
//   - strings ('it''s', $$raw$$) for ascii, text, inet (IPv4, including
//     Java's short forms such as 127.1, and IPv6, IPv4-mapped addresses
//     becoming IPv4), date (yyyy-mm-dd or a number of days), time
//     (hh:mm:ss[.fffffffff] or nanoseconds) and timestamp (milliseconds,
//     or the date-time forms of Cassandra's TimestampSerializer:
//     y-M-d[Th]H:m[:s][.fraction][zone] and yyyy-MM-dd[zone], with zones Z,
//     +hh, +hhmm, +hh:mm, and after a space also UTC, GMT and UT);
//   - lists [..], sets {..} (sorted and deduplicated as Cassandra's element
//     comparator says), maps {k: v, ..} (sorted by key; a key given twice
//     is refused, because which value Cassandra 5 keeps depends on the
//     order of the other entries), tuples (..) (trailing components
//     may be left out), user type literals {field: value, ..} (any order,
//     missing fields null) and vectors [..], nested, with null allowed in
//     tuples and user types; white space and comments between tokens.
//
// Not supported, reported as errors although Cassandra accepts them:
// literals whose value depends on the server rather than the text (the
// string 'now' for timestamps, host names for inet), time zone names other
// than UTC, GMT and UT, dates with negative or five-digit years in zoned
// timestamps, duration literals, non-ASCII digits (Java's parsers accept
// them), function calls, casts, arithmetic and bind markers, and any
// literal for a custom type other than a blob. Strings must be valid
// UTF-8.
//
// A timestamp without a zone is read in UTC: Cassandra reads it in its JVM's
// default time zone, which is UTC wherever Cassandra is deployed as
// recommended.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"net/netip"
	"slices"
	"strconv"
	"unicode/utf8"
	"unsafe"
)

// AppendLiteral appends to dst the serialized value of the CQL literal lit
// for type t, exactly as Cassandra serializes it, and returns the extended
// buffer. Where Cassandra would reject the literal, or where its value
// cannot be known from the text, it returns dst unchanged and an error.
//
// Scalar literals are serialized without allocating once dst has room.
func AppendLiteral(dst []byte, t Type, lit []byte) ([]byte, error) {
	p := litParser{src: lit}
	start := len(dst)
	if p.null() {
		return dst, fmt.Errorf("schema: %s literal %q: null has no serialization", t, lit)
	}
	out, err := p.value(dst, t, 0)
	if err == nil {
		p.space()
		if p.pos < len(p.src) {
			err = fmt.Errorf("unexpected %q at offset %d", p.src[p.pos:], p.pos)
		}
	}
	if err != nil {
		return dst[:start], fmt.Errorf("schema: %s literal %q: %w", t, lit, err)
	}
	return out, nil
}

// errNotDeterministic reports a literal whose value the server computes.
var errNotDeterministic = errors.New("value depends on the server")

type litKind uint8

const (
	litEOF    litKind = iota
	litString         // text is the content; escaped when it held ''
	litNumber         // -?digits[.digits][e[+-]digits]
	litUUID
	litHex    // 0x...
	litWord   // an identifier, or -NaN / -Infinity
	litQuoted // a "quoted identifier"; text is its content
	litPunct
	litBad
)

type litToken struct {
	kind    litKind
	text    []byte
	escaped bool // a string or quoted identifier with doubled quotes
	pos     int
}

// litParser reads one literal. It does not allocate.
type litParser struct {
	src []byte
	pos int
}

// space skips white space and comments.
func (p *litParser) space() {
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		switch {
		case isSpace(c):
			p.pos++
		case c == '-' && p.at(p.pos+1, '-'), c == '/' && p.at(p.pos+1, '/'):
			for p.pos < len(p.src) && p.src[p.pos] != '\n' {
				p.pos++
			}
		case c == '/' && p.at(p.pos+1, '*'):
			end := bytes.Index(p.src[p.pos+2:], []byte("*/"))
			if end < 0 {
				p.pos = len(p.src)
				return
			}
			p.pos += 2 + end + 2
		default:
			return
		}
	}
}

func (p *litParser) at(i int, c byte) bool { return i < len(p.src) && p.src[i] == c }

// next scans the next token.
func (p *litParser) next() litToken {
	p.space()
	start := p.pos
	src := p.src
	if start >= len(src) {
		return litToken{kind: litEOF, pos: start}
	}
	c := src[start]
	tok := litToken{kind: litBad, pos: start}
	switch {
	case c == '\'':
		tok.kind = litString
		for i := start + 1; i < len(src); i++ {
			if src[i] != '\'' {
				continue
			}
			if i+1 < len(src) && src[i+1] == '\'' {
				tok.escaped = true
				i++
				continue
			}
			tok.text = src[start+1 : i]
			p.pos = i + 1
			return tok
		}
		tok.kind = litBad
	case c == '$' && p.at(start+1, '$'):
		if end := bytes.Index(src[start+2:], []byte("$$")); end >= 0 {
			tok.kind = litString
			tok.text = src[start+2 : start+2+end]
			p.pos = start + 2 + end + 2
			return tok
		}
	case c == '"':
		tok.kind = litQuoted
		for i := start + 1; i < len(src); i++ {
			if src[i] != '"' {
				continue
			}
			if i+1 < len(src) && src[i+1] == '"' {
				tok.escaped = true
				i++
				continue
			}
			tok.text = src[start+1 : i]
			p.pos = i + 1
			return tok
		}
		tok.kind = litBad
	case isUUIDText(src[start:]):
		tok.kind, tok.text = litUUID, src[start:start+36]
		p.pos = start + 36
	case c == '0' && start+1 < len(src) && src[start+1]|0x20 == 'x':
		end := start + 2
		for end < len(src) && isHexDigit(src[end]) {
			end++
		}
		tok.kind, tok.text = litHex, src[start:end]
		p.pos = end
	case isDigit(c) || c == '-' && start+1 < len(src) && isDigit(src[start+1]):
		end := scanNumber(src, start)
		tok.kind, tok.text = litNumber, src[start:end]
		p.pos = end
	case isIdentStart(c) || c == '-' && start+1 < len(src) && isIdentStart(src[start+1]):
		end := start + 1
		for end < len(src) && isIdentByte(src[end]) {
			end++
		}
		tok.kind, tok.text = litWord, src[start:end]
		p.pos = end
		if c == '-' && !equalFold(tok.text, "-nan") && !equalFold(tok.text, "-infinity") {
			tok.kind = litBad
		}
	default:
		tok.kind, tok.text = litPunct, src[start:start+1]
		p.pos = start + 1
	}
	if tok.kind != litPunct && p.pos < len(src) && isIdentByte(src[p.pos]) {
		// 1h30m, 12abc, 0xcafez: one of Cassandra's other tokens
		// (durations), or none.
		tok.kind = litBad
	}
	return tok
}

// scanNumber returns the end of the integer or floating point literal at
// src[i] (CQL's INTEGER and FLOAT tokens).
func scanNumber(src []byte, i int) int {
	if src[i] == '-' {
		i++
	}
	for i < len(src) && isDigit(src[i]) {
		i++
	}
	if i < len(src) && src[i] == '.' {
		i++
		for i < len(src) && isDigit(src[i]) {
			i++
		}
	}
	if i < len(src) && src[i]|0x20 == 'e' {
		j := i + 1
		if j < len(src) && (src[j] == '+' || src[j] == '-') {
			j++
		}
		if j < len(src) && isDigit(src[j]) {
			for i = j; i < len(src) && isDigit(src[i]); i++ {
			}
		}
	}
	return i
}

// isIntegerText reports whether a number token is an INTEGER, not a FLOAT.
func isIntegerText(s []byte) bool {
	for _, c := range s {
		if c == '.' || c|0x20 == 'e' {
			return false
		}
	}
	return true
}

// null consumes a null literal if one is next.
func (p *litParser) null() bool {
	save := p.pos
	t := p.next()
	if t.kind == litWord && equalFold(t.text, "null") {
		return true
	}
	p.pos = save
	return false
}

// punct consumes the punctuation c if it is next.
func (p *litParser) punct(c byte) bool {
	p.space()
	if p.pos < len(p.src) && p.src[p.pos] == c {
		p.pos++
		return true
	}
	return false
}

func (p *litParser) expect(c byte) error {
	if p.punct(c) {
		return nil
	}
	p.space()
	if p.pos >= len(p.src) {
		return fmt.Errorf("expected %q, got end of literal", c)
	}
	return fmt.Errorf("expected %q at offset %d", c, p.pos)
}

func badToken(t litToken, want string) error {
	if t.kind == litEOF {
		return fmt.Errorf("expected %s, got end of literal", want)
	}
	return fmt.Errorf("expected %s at offset %d", want, t.pos)
}

// maxLiteralDepth bounds nesting, so that hostile text cannot exhaust the
// stack.
const maxLiteralDepth = 64

// value appends the serialization of the next literal, of type t.
func (p *litParser) value(dst []byte, t Type, depth int) ([]byte, error) {
	if depth > maxLiteralDepth {
		return dst, fmt.Errorf("literal nested deeper than %d", maxLiteralDepth)
	}
	switch t.Kind {
	case List:
		return p.list(dst, t, depth)
	case Set:
		return p.set(dst, t, depth)
	case Map:
		return p.mapLiteral(dst, t, depth)
	case Tuple:
		return p.tuple(dst, t, depth)
	case UDT:
		return p.udt(dst, t, depth)
	case Vector:
		return p.vector(dst, t, depth)
	}
	tok := p.next()
	switch t.Kind {
	case Tinyint, Smallint, Int, Bigint, Counter:
		if tok.kind != litNumber || !isIntegerText(tok.text) {
			return dst, badToken(tok, "an integer")
		}
		v, ok := parseInt64(tok.text)
		size := fixedSize(t.Kind)
		if !ok || size < 8 && (v < -1<<(8*size-1) || v >= 1<<(8*size-1)) {
			return dst, fmt.Errorf("%s out of range for %s", tok.text, t.Kind)
		}
		return appendBigEndian(dst, uint64(v), size), nil
	case Varint:
		if tok.kind != litNumber || !isIntegerText(tok.text) {
			return dst, badToken(tok, "an integer")
		}
		neg, digits := tok.text[0] == '-', tok.text
		if neg {
			digits = digits[1:]
		}
		return appendVarint(dst, neg, digits, nil), nil
	case Decimal:
		if tok.kind != litNumber {
			return dst, badToken(tok, "a number")
		}
		return appendDecimal(dst, tok.text)
	case Float, Double:
		var f float64
		switch {
		case tok.kind == litNumber:
			bits := 64
			if t.Kind == Float {
				bits = 32
			}
			var err error
			f, err = strconv.ParseFloat(unsafeString(tok.text), bits)
			if err != nil && !errors.Is(err, strconv.ErrRange) {
				// Java saturates to infinity or zero, as the value
				// returned with ErrRange does.
				return dst, fmt.Errorf("bad number %s", tok.text)
			}
		case tok.kind == litWord && (equalFold(tok.text, "nan") || equalFold(tok.text, "-nan")):
			// Java's canonical NaNs, not Go's.
			if t.Kind == Float {
				return binary.BigEndian.AppendUint32(dst, 0x7fc00000), nil
			}
			return binary.BigEndian.AppendUint64(dst, 0x7ff8000000000000), nil
		case tok.kind == litWord && equalFold(tok.text, "infinity"):
			f = math.Inf(1)
		case tok.kind == litWord && equalFold(tok.text, "-infinity"):
			f = math.Inf(-1)
		default:
			return dst, badToken(tok, "a number")
		}
		if t.Kind == Float {
			return binary.BigEndian.AppendUint32(dst, math.Float32bits(float32(f))), nil
		}
		return binary.BigEndian.AppendUint64(dst, math.Float64bits(f)), nil
	case Boolean:
		switch {
		case tok.kind == litWord && equalFold(tok.text, "true"):
			return append(dst, 1), nil
		case tok.kind == litWord && equalFold(tok.text, "false"):
			return append(dst, 0), nil
		}
		return dst, badToken(tok, "true or false")
	case Text, Ascii:
		if tok.kind != litString {
			return dst, badToken(tok, "a string")
		}
		start := len(dst)
		dst = appendUnescaped(dst, tok)
		s := dst[start:]
		if t.Kind == Ascii {
			for _, c := range s {
				if c >= 0x80 {
					return dst[:start], fmt.Errorf("non-ASCII byte %#x in ascii string", c)
				}
			}
		} else if !utf8.Valid(s) {
			return dst[:start], errors.New("string is not valid UTF-8")
		}
		return dst, nil
	case Blob, Custom:
		if tok.kind != litHex {
			return dst, badToken(tok, "a blob (0x...)")
		}
		hex := tok.text[2:]
		if len(hex)%2 != 0 {
			return dst, errors.New("blob has an odd number of hex digits")
		}
		for i := 0; i < len(hex); i += 2 {
			dst = append(dst, unhex(hex[i])<<4|unhex(hex[i+1]))
		}
		return dst, nil
	case Uuid, Timeuuid:
		if tok.kind != litUUID {
			return dst, badToken(tok, "a uuid")
		}
		s := tok.text
		for i := 0; i < len(s); i += 2 {
			if s[i] == '-' {
				i--
				continue
			}
			dst = append(dst, unhex(s[i])<<4|unhex(s[i+1]))
		}
		if t.Kind == Timeuuid && unhex(s[14]) != 1 {
			return dst[:len(dst)-16], errors.New("timeuuid must be a version 1 uuid")
		}
		return dst, nil
	case Inet:
		if tok.kind != litString {
			return dst, badToken(tok, "a string")
		}
		if tok.escaped {
			return dst, errors.New("bad inet address")
		}
		return appendInet(dst, tok.text)
	case Date:
		switch {
		case tok.kind == litNumber && isIntegerText(tok.text):
			days, err := rawDays(tok.text)
			if err != nil {
				return dst, err
			}
			return binary.BigEndian.AppendUint32(dst, days), nil
		case tok.kind == litString && !tok.escaped:
			days, err := parseDate(tok.text)
			if err != nil {
				return dst, err
			}
			return binary.BigEndian.AppendUint32(dst, days), nil
		}
		return dst, badToken(tok, "a date")
	case Time:
		switch {
		case tok.kind == litNumber && isIntegerText(tok.text),
			tok.kind == litString && !tok.escaped:
			ns, err := parseTime(tok.text)
			if err != nil {
				return dst, err
			}
			return binary.BigEndian.AppendUint64(dst, uint64(ns)), nil
		}
		return dst, badToken(tok, "a time")
	case Timestamp:
		switch {
		case tok.kind == litNumber && isIntegerText(tok.text):
			v, ok := parseInt64(tok.text)
			if !ok {
				return dst, fmt.Errorf("%s out of range for timestamp", tok.text)
			}
			return binary.BigEndian.AppendUint64(dst, uint64(v)), nil
		case tok.kind == litString && !tok.escaped:
			if len(tok.text) == 0 {
				return dst, nil // Cassandra's empty value
			}
			ms, err := parseTimestamp(tok.text)
			if err != nil {
				return dst, err
			}
			return binary.BigEndian.AppendUint64(dst, uint64(ms)), nil
		}
		return dst, badToken(tok, "a timestamp")
	case Duration:
		return dst, errors.New("duration literals are not supported")
	}
	return dst, fmt.Errorf("no literal for type kind %s", t.Kind)
}

// fixedSize returns the size of a fixed-size integer kind.
func fixedSize(k Kind) int {
	switch k {
	case Tinyint:
		return 1
	case Smallint:
		return 2
	case Int:
		return 4
	}
	return 8
}

func appendBigEndian(dst []byte, v uint64, size int) []byte {
	for i := size - 1; i >= 0; i-- {
		dst = append(dst, byte(v>>(8*i)))
	}
	return dst
}

// appendUnescaped appends a string token's content, undoubling quotes.
func appendUnescaped(dst []byte, t litToken) []byte {
	if !t.escaped {
		return append(dst, t.text...)
	}
	s := t.text
	for i := 0; i < len(s); i++ {
		dst = append(dst, s[i])
		if s[i] == '\'' {
			i++
		}
	}
	return dst
}

// element appends a collection element: its 4-byte length and value.
func (p *litParser) element(dst []byte, t Type, depth int, nullable bool) ([]byte, error) {
	if p.null() {
		if !nullable {
			return dst, errors.New("null is not supported inside collections")
		}
		return binary.BigEndian.AppendUint32(dst, math.MaxUint32), nil
	}
	at := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst, err := p.value(dst, t, depth+1)
	if err != nil {
		return dst, err
	}
	binary.BigEndian.PutUint32(dst[at:], uint32(len(dst)-at-4))
	return dst, nil
}

func elemType(t Type, i int) (Type, error) {
	if i >= len(t.Elems) {
		return Type{}, fmt.Errorf("type %s lacks element types", t)
	}
	return t.Elems[i], nil
}

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

// putUvarint writes v in Cassandra's unsigned vint encoding: the count of
// extra bytes as leading one bits of the first byte, then big-endian.
func putUvarint(b []byte, v uint64) int {
	extra := 0
	for extra < 8 && v >= 1<<(7*(extra+1)) {
		extra++
	}
	if extra == 8 {
		b[0] = 0xff
		binary.BigEndian.PutUint64(b[1:], v)
		return 9
	}
	for i := extra; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
	b[0] |= ^byte(0xff >> extra)
	return extra + 1
}

// parseInt64 parses -?[0-9]+, reporting false on overflow.
func parseInt64(s []byte) (int64, bool) {
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	if len(s) == 0 {
		return 0, false
	}
	var u uint64
	for _, c := range s {
		if !isDigit(c) {
			return 0, false
		}
		if u > (math.MaxUint64-9)/10 {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
	}
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return -int64(u), true
	}
	if u > math.MaxInt64 {
		return 0, false
	}
	return int64(u), true
}

// appendVarint appends the minimal two's complement big-endian encoding of
// the integer whose decimal digits are digits then more (skipping any '.'),
// negative if neg. It works in dst's spare capacity, allocating nothing
// once dst has room.
func appendVarint(dst []byte, neg bool, digits, more []byte) []byte {
	for len(digits) > 0 && (digits[0] == '0' || digits[0] == '.') {
		digits = digits[1:]
	}
	if len(digits) == 0 {
		for len(more) > 0 && (more[0] == '0' || more[0] == '.') {
			more = more[1:]
		}
		digits, more = more, nil
	}
	n := len(digits) + len(more)
	if n == 0 {
		return append(dst, 0)
	}
	if n <= 18 {
		var u uint64
		for _, part := range [2][]byte{digits, more} {
			for _, c := range part {
				if c != '.' {
					u = u*10 + uint64(c-'0')
				}
			}
		}
		v := int64(u)
		if neg {
			v = -v
		}
		return appendMinimalInt64(dst, v)
	}
	// Schoolbook: w = w*10^9 + chunk, over a big-endian buffer in dst
	// sized for n digits (log2(10)/8 < 0.4153 bytes a digit) and a sign.
	size := n*4153/10000 + 2
	start := len(dst)
	dst = slices.Grow(dst, size)[:start+size]
	w := dst[start:]
	clear(w)
	var chunk uint64
	var k int
	flush := func() {
		mul := uint64(1)
		for range k {
			mul *= 10
		}
		carry := chunk
		for i := len(w) - 1; i >= 0; i-- {
			x := uint64(w[i])*mul + carry
			w[i] = byte(x)
			carry = x >> 8
		}
		chunk, k = 0, 0
	}
	for _, part := range [2][]byte{digits, more} {
		for _, c := range part {
			if c == '.' {
				continue
			}
			chunk = chunk*10 + uint64(c-'0')
			if k++; k == 9 {
				flush()
			}
		}
	}
	if k > 0 {
		flush()
	}
	if neg {
		carry := uint16(1)
		for i := len(w) - 1; i >= 0; i-- {
			x := uint16(^w[i]) + carry
			w[i] = byte(x)
			carry = x >> 8
		}
	}
	// Drop sign-extension bytes that the next byte's top bit repeats.
	i := 0
	for i < len(w)-1 && (w[i] == 0 && w[i+1]&0x80 == 0 || w[i] == 0xff && w[i+1]&0x80 != 0) {
		i++
	}
	copy(w, w[i:])
	return dst[:len(dst)-i]
}

// appendMinimalInt64 appends v as the shortest big-endian two's complement.
func appendMinimalInt64(dst []byte, v int64) []byte {
	n := 8
	for n > 1 {
		top := byte(v >> (8 * (n - 1)))
		next := byte(v >> (8 * (n - 2)))
		if top == 0 && next&0x80 == 0 || top == 0xff && next&0x80 != 0 {
			n--
			continue
		}
		break
	}
	return appendBigEndian(dst, uint64(v), n)
}

// appendDecimal appends a decimal as Java's BigDecimal(String) reads it: a
// 4-byte scale, then the unscaled value as a varint. 1.50 keeps its scale
// 2; 1e3 is 1 with scale -3.
func appendDecimal(dst []byte, s []byte) ([]byte, error) {
	neg := s[0] == '-'
	m := s
	if neg {
		m = m[1:]
	}
	var exp int64
	if e := bytes.IndexAny(m, "eE"); e >= 0 {
		es := m[e+1:]
		m = m[:e]
		if len(es) > 0 && es[0] == '+' {
			es = es[1:]
		}
		v, ok := parseInt64(es)
		if !ok || v > math.MaxInt32*2 || v < math.MinInt32*2 {
			return dst, fmt.Errorf("exponent of %s out of range", s)
		}
		exp = v
	}
	intPart, frac := m, []byte(nil)
	if dot := bytes.IndexByte(m, '.'); dot >= 0 {
		intPart, frac = m[:dot], m[dot+1:]
	}
	scale := int64(len(frac)) - exp
	if scale < math.MinInt32 || scale > math.MaxInt32 {
		return dst, fmt.Errorf("scale of %s out of range", s)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(int32(scale)))
	return appendVarint(dst, neg, intPart, frac), nil
}

// appendInet appends an IP address the way Java's InetAddress.getByName
// reads a literal: IPv4 in one to four parts, IPv6 (bracketed or not),
// IPv4-mapped IPv6 as IPv4. The empty string is Cassandra's empty value.
func appendInet(dst []byte, s []byte) ([]byte, error) {
	if len(s) == 0 {
		return dst, nil
	}
	if s[0] == '[' {
		if s[len(s)-1] != ']' {
			return dst, fmt.Errorf("bad inet address %q", s)
		}
		s = s[1 : len(s)-1]
		if bytes.IndexByte(s, ':') < 0 {
			return dst, fmt.Errorf("bad inet address %q", s)
		}
	}
	if bytes.IndexByte(s, ':') >= 0 {
		if bytes.IndexByte(s, '%') >= 0 {
			return dst, fmt.Errorf("inet address %q has a zone: %w", s, errNotDeterministic)
		}
		a, err := netip.ParseAddr(unsafeString(s))
		if err != nil {
			return dst, fmt.Errorf("bad inet address %q", s)
		}
		if a.Is4In6() {
			v4 := a.Unmap().As4()
			return append(dst, v4[:]...), nil
		}
		v6 := a.As16()
		return append(dst, v6[:]...), nil
	}
	return appendIPv4(dst, s)
}

// appendIPv4 appends an IPv4 literal of one to four decimal parts, the
// last filling the remaining bytes (127.1 is 127.0.0.1), as Java reads it:
// leading zeros are decimal (010.0.0.1 is 10.0.0.1), and text longer than
// 15 bytes is no literal but a host name.
func appendIPv4(dst []byte, s []byte) ([]byte, error) {
	if len(s) > 15 {
		return dst, fmt.Errorf("bad inet address %q (host names are not supported)", s)
	}
	var parts [4]uint64
	n := 0
	for i := 0; i <= len(s); {
		j := i
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		if j == i || n == 4 {
			return dst, fmt.Errorf("bad inet address %q (host names are not supported)", s)
		}
		var v uint64
		for _, c := range s[i:j] {
			v = v*10 + uint64(c-'0')
		}
		parts[n] = v
		n++
		if j == len(s) {
			break
		}
		if s[j] != '.' {
			return dst, fmt.Errorf("bad inet address %q (host names are not supported)", s)
		}
		i = j + 1
		if i == len(s) {
			return dst, fmt.Errorf("bad inet address %q", s)
		}
	}
	var addr uint64
	for i := 0; i < n-1; i++ {
		if parts[i] > 0xff {
			return dst, fmt.Errorf("bad inet address %q", s)
		}
		addr |= parts[i] << (8 * (3 - i))
	}
	if parts[n-1] >= 1<<(8*(5-n)) {
		return dst, fmt.Errorf("bad inet address %q", s)
	}
	addr |= parts[n-1]
	return binary.BigEndian.AppendUint32(dst, uint32(addr)), nil
}

// Date and time arithmetic, proleptic Gregorian as java.time.

const (
	msPerDay  = 86_400_000
	nsPerDay  = 86_400_000_000_000
	maxDigits = 19 // java.time reads at most 19 digits a field
)

// daysFromCivil returns the days since 1970-01-01 of y-m-d.
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 && y%400 != 0 {
		era--
	}
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

func isLeap(y int64) bool { return y%4 == 0 && (y%100 != 0 || y%400 == 0) }

func monthLength(y, m int64) int64 {
	switch m {
	case 2:
		if isLeap(y) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// cursor reads date and time text.
type cursor struct {
	s   []byte
	pos int
}

func (c *cursor) done() bool { return c.pos == len(c.s) }

func (c *cursor) is(b byte) bool {
	if c.pos < len(c.s) && c.s[c.pos] == b {
		c.pos++
		return true
	}
	return false
}

// digits reads between min and max digits, reporting their value and
// count.
func (c *cursor) digits(min, max int) (int64, int, bool) {
	start := c.pos
	var v int64
	for c.pos < len(c.s) && isDigit(c.s[c.pos]) && c.pos-start < max {
		v = v*10 + int64(c.s[c.pos]-'0')
		c.pos++
	}
	n := c.pos - start
	return v, n, n >= min && n > 0
}

// rawDays reads a date given as a number: days with the epoch at 2^31.
func rawDays(s []byte) (uint32, error) {
	v, ok := parseInt64(s)
	if !ok || v < 0 || v > math.MaxUint32 {
		return 0, fmt.Errorf("date %s out of range", s)
	}
	return uint32(v), nil
}

// parseDate reads a date literal as SimpleDateSerializer does: a number of
// days, or ISO_LOCAL_DATE resolved strictly (no February 30).
func parseDate(s []byte) (uint32, error) {
	if isRawInteger(s) {
		return rawDays(s)
	}
	c := cursor{s: s}
	y, ok := c.isoYear(10)
	if !ok || !c.is('-') {
		return 0, fmt.Errorf("bad date %q", s)
	}
	m, _, ok1 := c.digits(2, 2)
	ok2 := c.is('-')
	d, _, ok3 := c.digits(2, 2)
	if !ok1 || !ok2 || !ok3 || !c.done() || m < 1 || m > 12 || d < 1 || d > monthLength(y, m) {
		return 0, fmt.Errorf("bad date %q", s)
	}
	days := daysFromCivil(y, m, d)
	if days < math.MinInt32 || days > math.MaxInt32 {
		return 0, fmt.Errorf("date %q out of range", s)
	}
	return uint32(days + 1<<31), nil
}

// isoYear reads java.time's year field of at least four digits: a sign is
// required beyond four, and refused with four or fewer unless negative.
func (c *cursor) isoYear(max int) (int64, bool) {
	sign := byte(0)
	if c.pos < len(c.s) && (c.s[c.pos] == '+' || c.s[c.pos] == '-') {
		sign = c.s[c.pos]
		c.pos++
	}
	y, n, ok := c.digits(4, max)
	if !ok || sign == 0 && n > 4 || sign == '+' && n <= 4 {
		return 0, false
	}
	if c.pos < len(c.s) && isDigit(c.s[c.pos]) {
		return 0, false
	}
	if sign == '-' {
		y = -y
	}
	return y, y >= -999_999_999 && y <= 999_999_999
}

// isRawInteger reports whether s matches ^-?\d+$.
func isRawInteger(s []byte) bool {
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
	}
	if len(s) == 0 {
		return false
	}
	for _, c := range s {
		if !isDigit(c) {
			return false
		}
	}
	return true
}

// parseTime reads a time literal as TimeSerializer does: nanoseconds of
// the day, or hh:mm:ss[.fffffffff] with each field as Integer.parseInt
// reads it (signs allowed) and the whole trimmed.
func parseTime(s []byte) (int64, error) {
	if isRawInteger(s) {
		v, ok := parseInt64(s)
		if !ok || v < 0 || v >= nsPerDay {
			return 0, fmt.Errorf("time %s out of range", s)
		}
		return v, nil
	}
	s = javaTrim(s)
	c1 := bytes.IndexByte(s, ':')
	c2 := -1
	if c1 >= 0 {
		if i := bytes.IndexByte(s[c1+1:], ':'); i >= 0 {
			c2 = c1 + 1 + i
		}
	}
	if c1 <= 0 || c2 <= 0 || c2 >= len(s)-1 {
		return 0, fmt.Errorf("bad time %q", s)
	}
	h, ok1 := parseJavaInt(s[:c1])
	m, ok2 := parseJavaInt(s[c1+1 : c2])
	if !ok1 || !ok2 || h < 0 || h >= 24 || m < 0 || m >= 60 {
		return 0, fmt.Errorf("bad time %q", s)
	}
	rest := s[c2+1:]
	var sec, nanos int64
	var ok bool
	if dot := bytes.IndexByte(rest, '.'); dot >= 0 {
		frac := rest[dot+1:]
		if dot == 0 || len(frac) == 0 || len(frac) > 9 || !isDigit(frac[0]) {
			return 0, fmt.Errorf("bad time %q", s)
		}
		if sec, ok = parseJavaInt(rest[:dot]); !ok {
			return 0, fmt.Errorf("bad time %q", s)
		}
		for i := range 9 {
			nanos *= 10
			if i < len(frac) {
				if !isDigit(frac[i]) {
					return 0, fmt.Errorf("bad time %q", s)
				}
				nanos += int64(frac[i] - '0')
			}
		}
	} else if sec, ok = parseJavaInt(rest); !ok {
		return 0, fmt.Errorf("bad time %q", s)
	}
	if sec < 0 || sec >= 60 {
		return 0, fmt.Errorf("bad time %q", s)
	}
	return ((h*60+m)*60+sec)*1e9 + nanos, nil
}

// javaTrim drops leading and trailing bytes <= ' ', as String.trim.
func javaTrim(s []byte) []byte {
	for len(s) > 0 && s[0] <= ' ' {
		s = s[1:]
	}
	for len(s) > 0 && s[len(s)-1] <= ' ' {
		s = s[:len(s)-1]
	}
	return s
}

// parseJavaInt reads an int as Integer.parseInt does (ASCII digits only).
func parseJavaInt(s []byte) (int64, bool) {
	if len(s) > 0 && s[0] == '+' {
		s = s[1:]
		if len(s) > 0 && s[0] == '-' {
			return 0, false
		}
	}
	v, ok := parseInt64(s)
	return v, ok && v >= math.MinInt32 && v <= math.MaxInt32
}

// parseTimestamp reads a timestamp string as TimestampSerializer does and
// returns milliseconds since the epoch.
func parseTimestamp(s []byte) (int64, error) {
	if equalFold(s, "now") {
		return 0, fmt.Errorf("timestamp 'now': %w", errNotDeterministic)
	}
	if isRawInteger(s) {
		v, ok := parseInt64(s)
		if !ok {
			return 0, fmt.Errorf("timestamp %s out of range", s)
		}
		return v, nil
	}
	if ms, ok, err := parseDateTime(s); ok || err != nil {
		return ms, err
	}
	if ms, ok, err := parseDateOnly(s); ok || err != nil {
		return ms, err
	}
	return 0, fmt.Errorf("bad timestamp %q", s)
}

// parseDateTime reads y-M-d('T'|' ')H:m[:s][.f{0,9}][zone], each field of
// one to 19 digits, resolved as java.time's SMART resolver does: a day past
// the month's end becomes its last day, and 24:00 is the next midnight.
func parseDateTime(s []byte) (int64, bool, error) {
	c := cursor{s: s}
	y, _, ok := c.digits(1, maxDigits)
	if !ok || !c.is('-') {
		return 0, false, nil
	}
	mo, _, ok1 := c.digits(1, maxDigits)
	ok2 := c.is('-')
	d, _, ok3 := c.digits(1, maxDigits)
	ok4 := c.is('T') || c.is(' ')
	h, _, ok5 := c.digits(1, maxDigits)
	ok6 := c.is(':')
	mi, _, ok7 := c.digits(1, maxDigits)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || !ok7 {
		return 0, false, nil
	}
	var sec, ms int64
	if c.pos+1 < len(s) && s[c.pos] == ':' && isDigit(s[c.pos+1]) {
		c.pos++
		sec, _, _ = c.digits(1, maxDigits)
	}
	nanoZero := true
	if c.is('.') {
		f, n, _ := c.digits(0, 9)
		for range 9 - n {
			f *= 10
		}
		nanoZero = f == 0
		ms = f / 1e6
	}
	off, ok := parseZone(s[c.pos:], false)
	if !ok {
		return 0, false, nil
	}
	if y < 1 || y > 999_999_999 || mo < 1 || mo > 12 || d < 1 || d > 31 ||
		h < 0 || h > 24 || mi > 59 || sec > 59 || h == 24 && (mi != 0 || sec != 0 || !nanoZero) {
		return 0, false, fmt.Errorf("timestamp %q out of range", s)
	}
	d = min(d, monthLength(y, mo))
	days := daysFromCivil(y, mo, d)
	return epochMillis(s, days, h*3600+mi*60+sec-off, ms)
}

// parseDateOnly reads a date: yyyy-MM-dd with a zone (the year of era,
// so positive), or ISO_DATE (the proleptic year, and only the zones Z and
// +hh:mm), at midnight, with SMART resolution.
func parseDateOnly(s []byte) (int64, bool, error) {
	c := cursor{s: s}
	y, ok := c.isoYear(maxDigits)
	if !ok || !c.is('-') {
		return 0, false, nil
	}
	yearDigits := c.pos - 1
	if s[0] == '+' || s[0] == '-' {
		yearDigits--
	}
	mo, _, ok1 := c.digits(2, 2)
	ok2 := c.is('-')
	d, _, ok3 := c.digits(2, 2)
	if !ok1 || !ok2 || !ok3 {
		return 0, false, nil
	}
	zone := s[c.pos:]
	isoZone := len(zone) == 0 || string(zone) == "Z" || len(zone) == 6 && zone[3] == ':'
	iso := yearDigits <= 10 && isoZone
	ofEra := y >= 1 && len(zone) > 0
	if !iso && !ofEra {
		return 0, false, nil
	}
	off, ok := parseZone(zone, true)
	if !ok {
		return 0, false, nil
	}
	if mo < 1 || mo > 12 || d < 1 || d > 31 {
		return 0, false, fmt.Errorf("timestamp %q out of range", s)
	}
	d = min(d, monthLength(y, mo))
	return epochMillis(s, daysFromCivil(y, mo, d), -off, 0)
}

// epochMillis returns days*86400000 + secs*1000 + ms, or an error where
// Java's toEpochMilli overflows.
func epochMillis(s []byte, days, secs, ms int64) (int64, bool, error) {
	const maxDays = math.MaxInt64/msPerDay - 1
	if days < -maxDays || days > maxDays {
		return 0, true, fmt.Errorf("timestamp %q out of range", s)
	}
	t := days*msPerDay + secs*1000 + ms
	return t, true, nil
}

// parseZone reads what follows a timestamp's time (or date): nothing (the
// server's zone, taken as UTC), Z, +hh, +hhmm or +hh:mm, or after a space
// also UTC, GMT and UT. It returns the offset in seconds east of UTC.
func parseZone(z []byte, dateOnly bool) (int64, bool) {
	if len(z) == 0 {
		return 0, true
	}
	if z[0] == ' ' {
		z = z[1:]
		switch string(z) {
		case "UTC", "GMT", "UT", "Z":
			return 0, true
		}
	}
	if string(z) == "Z" {
		return 0, true
	}
	if len(z) < 3 || z[0] != '+' && z[0] != '-' {
		return 0, false
	}
	c := cursor{s: z, pos: 1}
	h, _, ok := c.digits(2, 2)
	if !ok {
		return 0, false
	}
	var m int64
	if !c.done() {
		c.is(':')
		if m, _, ok = c.digits(2, 2); !ok || !c.done() {
			return 0, false
		}
	}
	if h > 18 || m > 59 || h == 18 && m > 0 {
		return 0, false
	}
	off := h*3600 + m*60
	if z[0] == '-' {
		off = -off
	}
	return off, true
}

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

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHexDigit(c byte) bool {
	return isDigit(c) || c|0x20 >= 'a' && c|0x20 <= 'f'
}

func unhex(c byte) byte {
	if isDigit(c) {
		return c - '0'
	}
	return c | 0x20 - 'a' + 10
}

// isUUIDText reports whether s starts with a uuid (8-4-4-4-12 hex digits).
func isUUIDText(s []byte) bool {
	if len(s) < 36 {
		return false
	}
	for i := range 36 {
		switch i {
		case 8, 13, 18, 23:
			if s[i] != '-' {
				return false
			}
		default:
			if !isHexDigit(s[i]) {
				return false
			}
		}
	}
	return true
}

// equalFold reports whether s is w (lower case) in any ASCII case.
func equalFold(s []byte, w string) bool {
	if len(s) != len(w) {
		return false
	}
	for i := range len(w) {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != w[i] {
			return false
		}
	}
	return true
}

// unsafeString views b as a string for parsers that do not keep it.
func unsafeString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
