package schema

// Partition keys of INSERT ... JSON: the value of a key column in the JSON
// object, serialized as Cassandra's fromJson would.
//
// Supported: a top-level JSON object; keys matched as Cassandra matches
// them (lower-cased, unless written quoted: "\"Key\"" is Key exactly);
// values of type text, ascii and varchar (JSON strings), int, bigint,
// smallint, tinyint and varint (JSON integers, or strings of one), boolean
// (true, false), uuid and timeuuid, inet, date and time (strings),
// timestamp (strings, or integers of milliseconds) and blob (strings
// "0x..."). Not supported, and so reported as not found: float, double,
// decimal, duration, collections, tuples and user types, a key matched by
// more than one member, null, and any document that is not well formed.
// What is not supported pins no partition: it is never guessed.

import "errors"

// errJSON is the error of a document, member or value JSONKey does not take.
var errJSON = errors.New("schema: JSON value not supported for a partition key")

// AppendJSONKey appends to dst the serialized value of column col (as
// stored: lower-case unless created quoted) of type t in the JSON object
// doc, as INSERT JSON would store it. scratch is space for decoding
// strings, returned grown for reuse. It allocates nothing once scratch
// has grown.
func AppendJSONKey(dst, scratch, doc []byte, col string, t Type) (out, scratchOut []byte, err error) {
	var value []byte
	found := 0
	s := jsonScanner{b: doc}
	if !s.punct('{') {
		return dst, scratch, errJSON
	}
	for first := true; ; first = false {
		if s.punct('}') {
			break
		}
		if !first && !s.punct(',') {
			return dst, scratch, errJSON
		}
		raw, ok := s.str()
		if !ok || !s.punct(':') {
			return dst, scratch, errJSON
		}
		if scratch, ok = appendJSONString(scratch[:0], raw); !ok {
			return dst, scratch, errJSON
		}
		v, ok := s.value()
		if !ok {
			return dst, scratch, errJSON
		}
		if jsonKeyIs(scratch, col) {
			value = v
			found++
		}
	}
	s.space()
	if s.i != len(s.b) || found != 1 {
		return dst, scratch, errJSON
	}
	return appendJSONValue(dst, scratch, value, t)
}

// jsonKeyIs reports whether JSON key k names column col: a key in double
// quotes keeps its case, any other is lower-cased (in the US locale, as
// Cassandra does: ASCII letters only change).
func jsonKeyIs(k []byte, col string) bool {
	if len(k) >= 2 && k[0] == '"' && k[len(k)-1] == '"' {
		return string(k[1:len(k)-1]) == col
	}
	if len(k) != len(col) {
		return false
	}
	for i := range k {
		c := k[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != col[i] {
			return false
		}
	}
	return true
}

// appendJSONValue serializes the raw JSON value v as type t.
func appendJSONValue(dst, scratch, v []byte, t Type) ([]byte, []byte, error) {
	isString := len(v) > 0 && v[0] == '"'
	var str []byte
	if isString {
		var ok bool
		if scratch, ok = appendJSONString(scratch[:0], v[1:len(v)-1]); !ok {
			return dst, scratch, errJSON
		}
		str = scratch
	}
	var err error
	switch t.Kind {
	case Text, Ascii:
		if !isString {
			return dst, scratch, errJSON
		}
		return append(dst, str...), scratch, nil
	case Int, Bigint, Smallint, Tinyint, Varint, Timestamp:
		lit := v
		switch {
		case isString && t.Kind == Timestamp:
			// A date and time, as a CQL string literal would hold it.
			return appendQuoted(dst, scratch, str, t)
		case isString:
			lit = str
		case !isJSONInteger(v):
			return dst, scratch, errJSON
		}
		dst, err = AppendLiteral(dst, t, lit)
		return dst, scratch, err
	case Boolean:
		if string(v) != "true" && string(v) != "false" {
			return dst, scratch, errJSON
		}
		dst, err = AppendLiteral(dst, t, v)
		return dst, scratch, err
	case Uuid, Timeuuid:
		if !isString {
			return dst, scratch, errJSON
		}
		dst, err = AppendLiteral(dst, t, str)
		return dst, scratch, err
	case Blob:
		if !isString || len(str) < 2 || str[0] != '0' || (str[1] != 'x' && str[1] != 'X') {
			return dst, scratch, errJSON
		}
		dst, err = AppendLiteral(dst, t, str)
		return dst, scratch, err
	case Inet, Date, Time:
		if !isString {
			return dst, scratch, errJSON
		}
		return appendQuoted(dst, scratch, str, t)
	}
	return dst, scratch, errJSON
}

// appendQuoted serializes str as the CQL string literal holding it.
func appendQuoted(dst, scratch, str []byte, t Type) ([]byte, []byte, error) {
	n := len(str)
	scratch = append(scratch, '\'')
	for _, c := range str {
		if c == '\'' {
			scratch = append(scratch, '\'')
		}
		scratch = append(scratch, c)
	}
	scratch = append(scratch, '\'')
	dst, err := AppendLiteral(dst, t, scratch[n:])
	return dst, scratch, err
}

// isJSONInteger reports whether v is a JSON number without fraction or
// exponent: what Jackson reads as an integer.
func isJSONInteger(v []byte) bool {
	if len(v) > 0 && v[0] == '-' {
		v = v[1:]
	}
	if len(v) == 0 || len(v) > 1 && v[0] == '0' {
		return false
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// appendJSONString appends the decoded content of a JSON string (between
// its quotes) to dst.
func appendJSONString(dst, s []byte) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			if c < 0x20 {
				return dst, false
			}
			dst = append(dst, c)
			continue
		}
		i++
		if i == len(s) {
			return dst, false
		}
		switch s[i] {
		case '"', '\\', '/':
			dst = append(dst, s[i])
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(s[i+1:])
			if !ok {
				return dst, false
			}
			i += 4
			if 0xD800 <= r && r < 0xDC00 {
				// A surrogate pair, as JSON writes what UTF-16 needs two
				// units for.
				if i+6 >= len(s) || s[i+1] != '\\' || s[i+2] != 'u' {
					return dst, false
				}
				lo, ok := hex4(s[i+3:])
				if !ok || lo < 0xDC00 || lo > 0xDFFF {
					return dst, false
				}
				r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
				i += 6
			} else if 0xDC00 <= r && r <= 0xDFFF {
				return dst, false
			}
			dst = appendRune(dst, r)
		default:
			return dst, false
		}
	}
	return dst, true
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// appendRune appends r in UTF-8.
func appendRune(dst []byte, r rune) []byte {
	switch {
	case r < 0x80:
		return append(dst, byte(r))
	case r < 0x800:
		return append(dst, 0xC0|byte(r>>6), 0x80|byte(r)&0x3F)
	case r < 0x10000:
		return append(dst, 0xE0|byte(r>>12), 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F)
	}
	return append(dst, 0xF0|byte(r>>18), 0x80|byte(r>>12)&0x3F, 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F)
}

// jsonScanner reads a JSON document, member by member.
type jsonScanner struct {
	b     []byte
	i     int
	depth int
}

func (s *jsonScanner) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

// punct consumes c after white space, if it is next.
func (s *jsonScanner) punct(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str consumes a string and returns its content between the quotes.
func (s *jsonScanner) str() ([]byte, bool) {
	s.space()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false
	}
	start := s.i + 1
	for i := start; i < len(s.b); i++ {
		switch s.b[i] {
		case '\\':
			i++
		case '"':
			s.i = i + 1
			return s.b[start:i], true
		}
	}
	return nil, false
}

// maxJSONDepth bounds the nesting of values the scanner skips.
const maxJSONDepth = 64

// value consumes a value and returns its text: a string with its quotes,
// a number, a literal word, or a whole array or object.
func (s *jsonScanner) value() ([]byte, bool) {
	s.space()
	if s.i >= len(s.b) {
		return nil, false
	}
	start := s.i
	switch c := s.b[s.i]; {
	case c == '"':
		if _, ok := s.str(); !ok {
			return nil, false
		}
	case c == '{' || c == '[':
		if s.depth++; s.depth > maxJSONDepth {
			return nil, false
		}
		defer func() { s.depth-- }()
		s.i++
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		for first := true; ; first = false {
			if s.punct(end) {
				break
			}
			if !first && !s.punct(',') {
				return nil, false
			}
			if c == '{' {
				if _, ok := s.str(); !ok || !s.punct(':') {
					return nil, false
				}
			}
			if _, ok := s.value(); !ok {
				return nil, false
			}
		}
	default:
		for s.i < len(s.b) && (s.b[s.i] == '-' || s.b[s.i] == '+' || s.b[s.i] == '.' ||
			'0' <= s.b[s.i] && s.b[s.i] <= '9' || 'a' <= s.b[s.i] && s.b[s.i] <= 'z' || 'A' <= s.b[s.i] && s.b[s.i] <= 'Z') {
			s.i++
		}
		if s.i == start {
			return nil, false
		}
	}
	return s.b[start:s.i], true
}
