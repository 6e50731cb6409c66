package frame

// Readers of what precedes and what starts a message, and the rewrite of
// a request's statement.
//
// Supported: the prefix of a response body in protocol v3 to v5 (a
// tracing id, warnings and a custom payload, in that order, as the flags
// say; a request carries only the custom payload), the kind of a RESULT and
// the keyspace of a RESULT Set_keyspace.

import "encoding/binary"

// Kinds of RESULT (the [int] that starts a RESULT message).
const (
	ResultKindVoid        = 0x0001
	ResultKindRows        = 0x0002
	ResultKindSetKeyspace = 0x0003
	// 0x0004 is ResultKindPrepared (prepared.go).
	ResultKindSchemaChange = 0x0005
)

// ResponseMessage returns the message of the uncompressed response body
// of a frame with header h: what follows its tracing id, warnings and
// custom payload, as h's flags say. ok is false when body ends inside them.
func ResponseMessage(body []byte, h Header) (msg []byte, ok bool) {
	if h.Flags&FlagTracing != 0 {
		if len(body) < 16 {
			return nil, false
		}
		body = body[16:]
	}
	if h.Flags&FlagWarning != 0 {
		if len(body) < 2 {
			return nil, false
		}
		n := int(binary.BigEndian.Uint16(body))
		body = body[2:]
		for range n {
			if len(body) < 2 || len(body) < 2+int(binary.BigEndian.Uint16(body)) {
				return nil, false
			}
			body = body[2+int(binary.BigEndian.Uint16(body)):]
		}
	}
	if h.Flags&FlagCustomPayload != 0 {
		n, ok := BytesMapLen(body)
		if !ok {
			return nil, false
		}
		body = body[n:]
	}
	return body, true
}

// ResultKind returns the kind of the RESULT message msg (see
// ResponseMessage); ok is false when msg is too short to say.
func ResultKind(msg []byte) (kind uint32, ok bool) {
	if len(msg) < 4 {
		return 0, false
	}
	return binary.BigEndian.Uint32(msg), true
}

// SetKeyspace returns the keyspace a RESULT message of kind Set_keyspace
// names, as a slice into msg; ok is false for any other message.
func SetKeyspace(msg []byte) (keyspace []byte, ok bool) {
	if kind, ok := ResultKind(msg); !ok || kind != ResultKindSetKeyspace || len(msg) < 6 {
		return nil, false
	}
	n := int(binary.BigEndian.Uint16(msg[4:]))
	if len(msg) < 6+n {
		return nil, false
	}
	return msg[6 : 6+n], true
}

// AppendStatement appends the QUERY or PREPARE frame of header h and
// uncompressed body with its statement, the [long string] that starts the
// body, replaced by stmt. The frame is uncompressed, which any v3 or v4
// frame may be whatever the connection negotiated; the body must carry no
// custom payload. It allocates nothing when dst has room.
func AppendStatement(dst []byte, h Header, body, stmt []byte) ([]byte, error) {
	q, err := QueryString(body)
	if err != nil {
		return dst, err
	}
	rest := body[4+len(q):]
	h.Flags &^= FlagCompression
	h.Length = 4 + len(stmt) + len(rest)
	dst = AppendHeader(dst, h)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(stmt)))
	dst = append(dst, stmt...)
	return append(dst, rest...), nil
}
