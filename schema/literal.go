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
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/cqlguard/cqlguard/cql"
)

// AppendLiteral appends to dst the serialized value of the CQL literal lit
// for type t, exactly as Cassandra serializes it, and returns the extended
// buffer. Where Cassandra would reject the literal, or where its value
// cannot be known from the text, it returns dst unchanged and an error.
//
// Scalar literals are serialized without allocating once dst has room.
func AppendLiteral(dst []byte, t Type, lit []byte) ([]byte, error) {
	var p litParser
	p.lex.Reset(lit)
	start := len(dst)
	if p.null() {
		return dst, fmt.Errorf("schema: %s literal %q: null has no serialization", t, lit)
	}
	out, err := p.value(dst, t, 0)
	if t := p.lex.Peek(); err == nil && t.Kind != cql.EOF {
		err = fmt.Errorf("unexpected %q at offset %d", lit[t.Start:], t.Start)
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

// litParser reads one literal with package cql's lexer, joining a '-' to
// the number, NaN or Infinity it touches. It does not allocate.
type litParser struct {
	lex cql.Lexer
}

// next reads the next token.
func (p *litParser) next() litToken {
	t := p.lex.Next()
	tok := litToken{kind: litBad, text: t.Text, pos: t.Start}
	switch t.Kind {
	case cql.EOF:
		tok.kind = litEOF
	case cql.String:
		tok.kind = litString
		tok.text, tok.escaped = t.Content()
	case cql.QuotedName:
		tok.kind = litQuoted
		tok.text, tok.escaped = t.Content()
	case cql.Number:
		if t.Text[0] != '.' { // .5 is no CQL number
			tok.kind = litNumber
		}
	case cql.UUID:
		tok.kind = litUUID
	case cql.Blob:
		tok.kind = litHex
	case cql.Word:
		tok.kind = litWord
	case cql.Punct:
		tok.kind = litPunct
		if !t.IsPunct('-') {
			break
		}
		// A sign is part of the number it touches: -5, -1.5e3, -NaN.
		n := p.lex.Peek()
		if n.Start != t.End {
			break
		}
		switch {
		case n.Kind == cql.Number && n.Text[0] != '.':
			tok.kind = litNumber
		case n.IsWord("nan") || n.IsWord("infinity"):
			tok.kind = litWord
		case n.Kind == cql.Word || n.Kind == cql.Number || n.Kind == cql.Duration:
			tok.kind = litBad
		default:
			return tok
		}
		p.lex.Next()
		tok.text = p.lex.Src()[t.Start:n.End]
	}
	// Durations (1h30m), markers and what does not lex are no literal of a
	// key column's type.
	return tok
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
	if p.lex.Peek().IsWord("null") {
		p.lex.Next()
		return true
	}
	return false
}

// punct consumes the punctuation c if it is next.
func (p *litParser) punct(c byte) bool {
	if p.lex.Peek().IsPunct(c) {
		p.lex.Next()
		return true
	}
	return false
}

func (p *litParser) expect(c byte) error {
	if p.punct(c) {
		return nil
	}
	t := p.lex.Peek()
	if t.Kind == cql.EOF {
		return fmt.Errorf("expected %q, got end of literal", c)
	}
	return fmt.Errorf("expected %q at offset %d", c, t.Start)
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

// value appends the serialization of the next literal, of type t. A
// collection's method reads its brackets and elements; every other literal
// is one token, read by the method for its family of kinds.
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
	case Tinyint, Smallint, Int, Bigint, Counter, Varint:
		return p.integer(dst, t.Kind)
	case Decimal:
		return p.decimal(dst)
	case Float, Double:
		return p.float(dst, t.Kind)
	case Boolean:
		return p.boolean(dst)
	case Text, Ascii:
		return p.text(dst, t.Kind)
	case Blob, Custom:
		return p.blob(dst)
	case Uuid, Timeuuid:
		return p.uuid(dst, t.Kind)
	case Inet:
		return p.inet(dst)
	case Date:
		return p.date(dst)
	case Time:
		return p.time(dst)
	case Timestamp:
		return p.timestamp(dst)
	case Duration:
		return dst, errors.New("duration literals are not supported")
	}
	return dst, fmt.Errorf("no literal for type kind %s", t.Kind)
}

// integer appends an integer of kind k (tinyint to counter, or varint):
// a number without fraction or exponent, in range for k.
func (p *litParser) integer(dst []byte, k Kind) ([]byte, error) {
	tok := p.next()
	if tok.kind != litNumber || !isIntegerText(tok.text) {
		return dst, badToken(tok, "an integer")
	}
	if k == Varint {
		neg, digits := tok.text[0] == '-', tok.text
		if neg {
			digits = digits[1:]
		}
		return appendVarint(dst, neg, digits, nil), nil
	}
	v, ok := parseInt64(tok.text)
	size := fixedSize(k)
	if !ok || size < 8 && (v < -1<<(8*size-1) || v >= 1<<(8*size-1)) {
		return dst, fmt.Errorf("%s out of range for %s", tok.text, k)
	}
	return appendBigEndian(dst, uint64(v), size), nil
}

// decimal appends a decimal, which takes any number, as BigDecimal does.
func (p *litParser) decimal(dst []byte) ([]byte, error) {
	tok := p.next()
	if tok.kind != litNumber {
		return dst, badToken(tok, "a number")
	}
	return appendDecimal(dst, tok.text)
}

// float appends a float or double (k): a number, or NaN or Infinity,
// signed or not, in any case.
func (p *litParser) float(dst []byte, k Kind) ([]byte, error) {
	tok := p.next()
	var f float64
	switch {
	case tok.kind == litNumber:
		bits := 64
		if k == Float {
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
		if k == Float {
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
	if k == Float {
		return binary.BigEndian.AppendUint32(dst, math.Float32bits(float32(f))), nil
	}
	return binary.BigEndian.AppendUint64(dst, math.Float64bits(f)), nil
}

// boolean appends true or false, in any case.
func (p *litParser) boolean(dst []byte) ([]byte, error) {
	tok := p.next()
	switch {
	case tok.kind == litWord && equalFold(tok.text, "true"):
		return append(dst, 1), nil
	case tok.kind == litWord && equalFold(tok.text, "false"):
		return append(dst, 0), nil
	}
	return dst, badToken(tok, "true or false")
}

// text appends a text or ascii string (k), refusing bytes the type
// cannot hold.
func (p *litParser) text(dst []byte, k Kind) ([]byte, error) {
	tok := p.next()
	if tok.kind != litString {
		return dst, badToken(tok, "a string")
	}
	start := len(dst)
	dst = appendUnescaped(dst, tok)
	s := dst[start:]
	if k == Ascii {
		for _, c := range s {
			if c >= 0x80 {
				return dst[:start], fmt.Errorf("non-ASCII byte %#x in ascii string", c)
			}
		}
	} else if !utf8.Valid(s) {
		return dst[:start], errors.New("string is not valid UTF-8")
	}
	return dst, nil
}

// blob appends a blob, which is also the one literal a custom type takes.
func (p *litParser) blob(dst []byte) ([]byte, error) {
	tok := p.next()
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
}

// uuid appends a uuid or timeuuid (k); a timeuuid must be a version 1
// uuid.
func (p *litParser) uuid(dst []byte, k Kind) ([]byte, error) {
	tok := p.next()
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
	if k == Timeuuid && unhex(s[14]) != 1 {
		return dst[:len(dst)-16], errors.New("timeuuid must be a version 1 uuid")
	}
	return dst, nil
}

// inet appends an address given as a string; one with a quote in it is
// no address.
func (p *litParser) inet(dst []byte) ([]byte, error) {
	tok := p.next()
	if tok.kind != litString {
		return dst, badToken(tok, "a string")
	}
	if tok.escaped {
		return dst, errors.New("bad inet address")
	}
	return appendInet(dst, tok.text)
}

// date appends a date given as a number of days or as a string.
func (p *litParser) date(dst []byte) ([]byte, error) {
	tok := p.next()
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
}

// time appends a time given as nanoseconds or as a string, both of which
// parseTime reads.
func (p *litParser) time(dst []byte) ([]byte, error) {
	tok := p.next()
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
}

// timestamp appends a timestamp given as milliseconds or as a string.
func (p *litParser) timestamp(dst []byte) ([]byte, error) {
	tok := p.next()
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
