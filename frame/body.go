package frame

import (
	"encoding/binary"
	"errors"
)

// ErrShortBody means a body ended before a field it announces.
var ErrShortBody = errors.New("frame: body too short")

// Error codes the proxy sends itself.
const (
	ErrCodeServer      int32 = 0x0000
	ErrCodeProtocol    int32 = 0x000A
	ErrCodeOverloaded  int32 = 0x1001
	ErrCodeConfig      int32 = 0x2300
	ErrCodeUnprepared  int32 = 0x2500
	ErrCodeInvalid     int32 = 0x2200
	ErrCodeSyntaxError int32 = 0x2000
	// ErrCodeRateLimit is the code cqlguard advertises in SUPPORTED for
	// ScyllaDB's SCYLLA_RATE_LIMIT_ERROR, and answers drivers that opted in
	// to it with: ScyllaDB's own.
	ErrCodeRateLimit int32 = 0xF000
)

// QueryString returns the CQL text at the start of a QUERY or PREPARE body
// (a [long string]), as a slice into body.
func QueryString(body []byte) ([]byte, error) {
	if len(body) < 4 {
		return nil, ErrShortBody
	}
	n := int(int32(binary.BigEndian.Uint32(body)))
	if n < 0 || n > len(body)-4 {
		return nil, ErrShortBody
	}
	return body[4 : 4+n], nil
}

// PreparedID returns the statement id at the start of an EXECUTE body (a
// [short bytes]), as a slice into body.
func PreparedID(body []byte) ([]byte, error) {
	if len(body) < 2 {
		return nil, ErrShortBody
	}
	n := int(binary.BigEndian.Uint16(body))
	if n > len(body)-2 {
		return nil, ErrShortBody
	}
	return body[2 : 2+n], nil
}

// AppendError appends a whole ERROR response frame with the given code and
// message on stream, in protocol version v.
func AppendError(dst []byte, v uint8, stream int16, code int32, msg string) []byte {
	start := len(dst)
	dst = AppendHeader(dst, Header{Version: v, Response: true, Stream: stream, Opcode: OpError})
	dst = binary.BigEndian.AppendUint32(dst, uint32(code))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(msg)))
	dst = append(dst, msg...)
	SetLength(dst[start:])
	return dst
}

// AppendUnprepared appends a whole Unprepared ERROR frame for statement
// id on stream, in protocol version v: the driver prepares it again.
func AppendUnprepared(dst []byte, v uint8, stream int16, msg string, id []byte) []byte {
	start := len(dst)
	dst = AppendHeader(dst, Header{Version: v, Response: true, Stream: stream, Opcode: OpError})
	dst = binary.BigEndian.AppendUint32(dst, uint32(ErrCodeUnprepared))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(msg)))
	dst = append(dst, msg...)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(id)))
	dst = append(dst, id...)
	SetLength(dst[start:])
	return dst
}

// AppendRateLimited appends a whole ERROR frame refusing a read (or a
// write) of keyspace.table over its per-partition limit, on stream in
// protocol version v, in ScyllaDB's words: with ScyllaDB's rate-limit error
// (its op type, and rejected by the coordinator) when the driver opted in,
// else with Config_error, which drivers do not retry. It allocates nothing.
func AppendRateLimited(dst []byte, v uint8, stream int16, optIn, write bool, keyspace, table string) []byte {
	start := len(dst)
	code, op, opType := ErrCodeConfig, "read", byte(0)
	if optIn {
		code = ErrCodeRateLimit
	}
	if write {
		op, opType = "write", 1
	}
	const prefix, middle, suffix = "Per-partition rate limit reached for ", " in table ", ", rejected by coordinator"
	dst = AppendHeader(dst, Header{Version: v, Response: true, Stream: stream, Opcode: OpError})
	dst = binary.BigEndian.AppendUint32(dst, uint32(code))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(prefix)+len(op)+len(middle)+len(keyspace)+1+len(table)+len(suffix)))
	dst = append(dst, prefix...)
	dst = append(dst, op...)
	dst = append(dst, middle...)
	dst = append(dst, keyspace...)
	dst = append(dst, '.')
	dst = append(dst, table...)
	dst = append(dst, suffix...)
	if optIn {
		dst = append(dst, opType, 1) // rejected_by_coordinator
	}
	SetLength(dst[start:])
	return dst
}

// SelectTable reports the keyspace (empty when unqualified) and table a
// SELECT statement reads from. It recognises just enough CQL for that:
// comments, any case, quoted identifiers; ok is false for anything else.
func SelectTable(q []byte) (keyspace, table []byte, ok bool) {
	i := skipSpace(q, 0)
	if !hasWordAt(q, i, "select") {
		return nil, nil, false
	}
	i += len("select")
	// Find FROM outside quotes and parentheses.
	depth := 0
	for i < len(q) {
		c := q[i]
		switch {
		case c == '\'' || c == '"':
			i = skipQuoted(q, i)
			continue
		case c == '(':
			depth++
		case c == ')':
			depth--
		case depth == 0 && (c == 'f' || c == 'F') && isBoundary(q, i-1) && hasWordAt(q, i, "from"):
			i = skipSpace(q, i+len("from"))
			first, j, ok := identifier(q, i)
			if !ok {
				return nil, nil, false
			}
			if j < len(q) && q[j] == '.' {
				second, _, ok := identifier(q, j+1)
				if !ok {
					return nil, nil, false
				}
				return first, second, true
			}
			return nil, first, true
		case c == '-' && i+1 < len(q) && q[i+1] == '-', c == '/' && i+1 < len(q) && q[i+1] == '/',
			c == '/' && i+1 < len(q) && q[i+1] == '*':
			i = skipSpace(q, i)
			continue
		}
		i++
	}
	return nil, nil, false
}

// identifier reads a possibly quoted identifier at q[i:], returning it
// unquoted when it needs no unescaping (a quoted name with "" is refused).
func identifier(q []byte, i int) ([]byte, int, bool) {
	if i >= len(q) {
		return nil, i, false
	}
	if q[i] == '"' {
		end := skipQuoted(q, i)
		if end > len(q) || end-i < 2 || q[end-1] != '"' {
			return nil, i, false
		}
		name := q[i+1 : end-1]
		for _, c := range name {
			if c == '"' {
				return nil, i, false
			}
		}
		return name, end, true
	}
	j := i
	for j < len(q) && isIdentByte(q[j]) {
		j++
	}
	return q[i:j], j, j > i
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isBoundary(q []byte, i int) bool { return i < 0 || !isIdentByte(q[i]) }

// hasWordAt reports whether q[i:] starts with the lower-case keyword w
// followed by a non-identifier byte, in any case.
func hasWordAt(q []byte, i int, w string) bool {
	if i+len(w) > len(q) {
		return false
	}
	for k := 0; k < len(w); k++ {
		if q[i+k]|0x20 != w[k] {
			return false
		}
	}
	return i+len(w) == len(q) || !isIdentByte(q[i+len(w)])
}

// skipQuoted returns the index after the quoted literal or identifier that
// starts at q[i]; a doubled quote stands for itself.
func skipQuoted(q []byte, i int) int {
	quote := q[i]
	for j := i + 1; j < len(q); j++ {
		if q[j] == quote {
			if j+1 < len(q) && q[j+1] == quote {
				j++
				continue
			}
			return j + 1
		}
	}
	return len(q) + 1
}

// skipSpace returns the index of the first byte at or after i that is not
// white space or inside a comment.
func skipSpace(q []byte, i int) int {
	for i < len(q) {
		switch c := q[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case (c == '-' && i+1 < len(q) && q[i+1] == '-') || (c == '/' && i+1 < len(q) && q[i+1] == '/'):
			for i < len(q) && q[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			i += 2
			for i+1 < len(q) && !(q[i] == '*' && q[i+1] == '/') {
				i++
			}
			i += 2
		default:
			return i
		}
	}
	return len(q)
}

// BytesMapLen returns the encoded length of the [bytes map] at the start of
// b, as custom payloads carry it.
func BytesMapLen(b []byte) (int, bool) {
	if len(b) < 2 {
		return 0, false
	}
	n := int(binary.BigEndian.Uint16(b))
	i := 2
	for range n {
		if len(b)-i < 2 {
			return 0, false
		}
		i += 2 + int(binary.BigEndian.Uint16(b[i:])) // key: [string]
		if len(b)-i < 4 {
			return 0, false
		}
		v := int(int32(binary.BigEndian.Uint32(b[i:]))) // value: [bytes]
		i += 4
		if v > 0 {
			i += v
		}
		if i > len(b) {
			return 0, false
		}
	}
	return i, true
}
