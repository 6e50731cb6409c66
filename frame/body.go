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

// AppendQueryRequest appends a whole QUERY request frame for statement on
// stream, in protocol version v, at consistency ONE with no values or
// options. Its body is not compressed, which a node takes on a connection
// that negotiated compression.
func AppendQueryRequest(dst []byte, v uint8, stream int16, statement []byte) []byte {
	start := len(dst)
	dst = AppendHeader(dst, Header{Version: v, Stream: stream, Opcode: OpQuery})
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(statement)))
	dst = append(dst, statement...)
	dst = binary.BigEndian.AppendUint16(dst, 0x0001) // ONE
	if v >= 5 {
		dst = binary.BigEndian.AppendUint32(dst, 0) // flags are an [int] from v5
	} else {
		dst = append(dst, 0)
	}
	SetLength(dst[start:])
	return dst
}

// AppendPrepareRequest appends a whole PREPARE request frame for statement
// on stream, in protocol version v, its body not compressed. From v5 a
// keyspace, when not empty, is sent with it (the statement's unqualified
// tables are in it); before v5 keyspace must be empty: the connection's
// keyspace applies.
func AppendPrepareRequest(dst []byte, v uint8, stream int16, statement, keyspace []byte) []byte {
	start := len(dst)
	dst = AppendHeader(dst, Header{Version: v, Stream: stream, Opcode: OpPrepare})
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(statement)))
	dst = append(dst, statement...)
	if v >= 5 {
		if len(keyspace) > 0 {
			dst = binary.BigEndian.AppendUint32(dst, 0x01)
			dst = binary.BigEndian.AppendUint16(dst, uint16(len(keyspace)))
			dst = append(dst, keyspace...)
		} else {
			dst = binary.BigEndian.AppendUint32(dst, 0)
		}
	}
	SetLength(dst[start:])
	return dst
}

// AppendStartupRequest appends a whole STARTUP request frame on stream, in
// protocol version v, asking for CQL 3.0.0 and no compression.
func AppendStartupRequest(dst []byte, v uint8, stream int16) []byte {
	start := len(dst)
	dst = AppendHeader(dst, Header{Version: v, Stream: stream, Opcode: OpStartup})
	dst = binary.BigEndian.AppendUint16(dst, 1)
	dst = appendString(dst, "CQL_VERSION")
	dst = appendString(dst, "3.0.0")
	SetLength(dst[start:])
	return dst
}

// AppendAuthResponse appends a whole AUTH_RESPONSE request frame carrying
// token on stream, in protocol version v.
func AppendAuthResponse(dst []byte, v uint8, stream int16, token []byte) []byte {
	start := len(dst)
	dst = AppendHeader(dst, Header{Version: v, Stream: stream, Opcode: OpAuthResponse})
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(token)))
	dst = append(dst, token...)
	SetLength(dst[start:])
	return dst
}

// AppendRegisterRequest appends a whole REGISTER request frame for the
// event types on stream, in protocol version v.
func AppendRegisterRequest(dst []byte, v uint8, stream int16, types ...string) []byte {
	start := len(dst)
	dst = AppendHeader(dst, Header{Version: v, Stream: stream, Opcode: OpRegister})
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(types)))
	for _, t := range types {
		dst = appendString(dst, t)
	}
	SetLength(dst[start:])
	return dst
}
