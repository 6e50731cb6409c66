// Package frame reads and writes CQL native protocol frames.
//
// Supported: protocol versions 3, 4 and 5. For v3 and v4 a frame is a 9-byte
// header and a body, the body optionally compressed with LZ4 or Snappy as the
// frame's flag says. For v5 the same envelopes travel inside segments (see
// segment.go) once the STARTUP handshake is done; segments may be
// self-contained (whole frames) or carry one part of a large frame, and may
// be LZ4 compressed.
//
// Not supported: protocol versions 1 and 2 (8-byte headers) and DSE versions;
// ParseHeader reports them as *UnsupportedVersionError so the caller can
// answer with a protocol error the way Cassandra does (AppendVersionError).
//
// The package knows bytes, not sockets: it parses from and appends to byte
// slices and reads from a bufio.Reader, reusing its buffers so that reading a
// frame allocates nothing once the buffers have grown.
package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// HeaderSize is the size of a v3, v4 or v5 frame header.
const HeaderSize = 9

// MaxBodySize is the protocol's own limit on a frame body (256 MiB).
const MaxBodySize = 256 << 20

// Opcode says which message a frame holds.
type Opcode uint8

// Opcodes of protocol v3 to v5.
const (
	OpError         Opcode = 0x00
	OpStartup       Opcode = 0x01
	OpReady         Opcode = 0x02
	OpAuthenticate  Opcode = 0x03
	OpOptions       Opcode = 0x05
	OpSupported     Opcode = 0x06
	OpQuery         Opcode = 0x07
	OpResult        Opcode = 0x08
	OpPrepare       Opcode = 0x09
	OpExecute       Opcode = 0x0A
	OpRegister      Opcode = 0x0B
	OpEvent         Opcode = 0x0C
	OpBatch         Opcode = 0x0D
	OpAuthChallenge Opcode = 0x0E
	OpAuthResponse  Opcode = 0x0F
	OpAuthSuccess   Opcode = 0x10
)

var opcodeNames = [...]string{
	OpError: "ERROR", OpStartup: "STARTUP", OpReady: "READY", OpAuthenticate: "AUTHENTICATE",
	0x04: "", OpOptions: "OPTIONS", OpSupported: "SUPPORTED", OpQuery: "QUERY", OpResult: "RESULT",
	OpPrepare: "PREPARE", OpExecute: "EXECUTE", OpRegister: "REGISTER", OpEvent: "EVENT",
	OpBatch: "BATCH", OpAuthChallenge: "AUTH_CHALLENGE", OpAuthResponse: "AUTH_RESPONSE",
	OpAuthSuccess: "AUTH_SUCCESS",
}

// String returns the opcode's name as the spec writes it, or "UNKNOWN".
func (o Opcode) String() string {
	if int(o) < len(opcodeNames) && opcodeNames[o] != "" {
		return opcodeNames[o]
	}
	return "UNKNOWN"
}

// Valid reports whether o is an opcode of protocol v3 to v5.
func (o Opcode) Valid() bool { return o.String() != "UNKNOWN" }

// Header flags.
const (
	FlagCompression   uint8 = 0x01
	FlagTracing       uint8 = 0x02
	FlagCustomPayload uint8 = 0x04
	FlagWarning       uint8 = 0x08
	FlagBeta          uint8 = 0x10
)

// responseBit marks a frame sent by the server.
const responseBit = 0x80

// Header is a decoded frame header.
type Header struct {
	Version  uint8 // 3, 4 or 5, without the direction bit
	Response bool  // sent by the server
	Flags    uint8
	Stream   int16
	Opcode   Opcode
	Length   int // body length in bytes
}

// Compressed reports whether the body is compressed. Only v3 and v4 frames
// compress bodies; in v5 the flag is ignored because segments compress.
func (h Header) Compressed() bool { return h.Flags&FlagCompression != 0 && h.Version < 5 }

// UnsupportedVersionError reports a frame whose version cqlguard does not speak.
type UnsupportedVersionError struct {
	Version uint8 // without the direction bit
}

func (e *UnsupportedVersionError) Error() string {
	return fmt.Sprintf("Invalid or unsupported protocol version (%d); supported versions are (3/v3, 4/v4, 5/v5)", e.Version)
}

// ErrShortHeader means fewer than HeaderSize bytes were given to ParseHeader.
var ErrShortHeader = errors.New("frame: short header")

// ParseHeader decodes the header at the start of b.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, ErrShortHeader
	}
	v := b[0] &^ responseBit
	if v < 3 || v > 5 {
		return Header{}, &UnsupportedVersionError{Version: v}
	}
	n := binary.BigEndian.Uint32(b[5:9])
	h := Header{
		Version:  v,
		Response: b[0]&responseBit != 0,
		Flags:    b[1],
		Stream:   int16(binary.BigEndian.Uint16(b[2:4])),
		Opcode:   Opcode(b[4]),
		Length:   int(n),
	}
	if n > MaxBodySize {
		return h, fmt.Errorf("frame: body length %d exceeds the protocol's 256 MiB", n)
	}
	return h, nil
}

// AppendHeader appends the encoded header h to dst.
func AppendHeader(dst []byte, h Header) []byte {
	v := h.Version
	if h.Response {
		v |= responseBit
	}
	return append(dst, v, h.Flags, byte(uint16(h.Stream)>>8), byte(h.Stream), byte(h.Opcode),
		byte(h.Length>>24), byte(h.Length>>16), byte(h.Length>>8), byte(h.Length))
}

// SetLength rewrites the body length of the encoded frame f to match len(f).
func SetLength(f []byte) {
	binary.BigEndian.PutUint32(f[5:9], uint32(len(f)-HeaderSize))
}

// SetStream sets the stream id in the header of frame f, which must hold
// at least HeaderSize bytes of a v3 to v5 frame: the answer to one request
// made the answer to another, identical one.
func SetStream(f []byte, stream int16) {
	binary.BigEndian.PutUint16(f[2:4], uint16(stream))
}
