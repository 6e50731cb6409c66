package fakenode

import (
	"bytes"
	"fmt"

	pframe "github.com/datastax/go-cassandra-native-protocol/frame"
	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"

	"github.com/cqlguard/cqlguard/frame"
)

// answer is one response encoded whole for each protocol version (3 to 5)
// and each body compression, on stream 0: sending it is a copy and a
// two-byte patch of the stream id.
type answer [3][3][]byte

// frame returns the encoded answer for version v and body compression c.
// v5 bodies are never compressed: its segments are.
func (a *answer) frame(v uint8, c frame.Compression) []byte {
	if v >= 5 {
		c = frame.CompressionNone
	}
	return a[v-3][c]
}

// appendAnswer appends frame f to out with its stream id set to stream.
func appendAnswer(out, f []byte, stream int16) []byte {
	n := len(out)
	out = append(out, f...)
	out[n+2], out[n+3] = byte(uint16(stream)>>8), byte(stream)
	return out
}

// newAnswer encodes the response op whose body, in version v, is body(v).
func newAnswer(op frame.Opcode, body func(v uint8) []byte) *answer {
	var a answer
	var z frame.Compressor
	for v := uint8(3); v <= 5; v++ {
		b := body(v)
		for c := frame.CompressionNone; c <= frame.CompressionSnappy; c++ {
			h := frame.Header{Version: v, Response: true, Opcode: op}
			var f []byte
			if c == frame.CompressionNone || v >= 5 {
				f = frame.AppendHeader(nil, h)
				f = append(f, b...)
			} else {
				h.Flags = frame.FlagCompression
				f = frame.AppendHeader(nil, h)
				f = z.AppendBody(f, c, b)
			}
			frame.SetLength(f)
			a[v-3][c] = f
		}
	}
	return &a
}

var codec = pframe.NewCodec()

// messageAnswer encodes the message msg(v) returns, with the reference
// codec: answers are built once, off the request path.
func messageAnswer(msg func(v primitive.ProtocolVersion) message.Message) (*answer, error) {
	var err error
	a := newAnswer(0, func(v uint8) []byte {
		var b bytes.Buffer
		m := msg(primitive.ProtocolVersion(v))
		if e := codec.EncodeFrame(pframe.NewFrame(primitive.ProtocolVersion(v), 0, m), &b); e != nil && err == nil {
			err = fmt.Errorf("encoding %v in v%d: %w", m, v, e)
			return nil
		}
		return b.Bytes()[frame.HeaderSize:]
	})
	if err != nil {
		return nil, err
	}
	// The opcode was not known to newAnswer: copy it from the message.
	op := frame.Opcode(msg(4).GetOpCode())
	for v := range a {
		for c := range a[v] {
			a[v][c][4] = byte(op)
		}
	}
	return a, nil
}

// mustAnswer is messageAnswer for messages built from constants, where an
// encoding error is a bug in this package.
func mustAnswer(msg func(v primitive.ProtocolVersion) message.Message) *answer {
	a, err := messageAnswer(msg)
	if err != nil {
		panic("fakenode: " + err.Error())
	}
	return a
}

// same adapts a message that does not depend on the version.
func same(m message.Message) func(primitive.ProtocolVersion) message.Message {
	return func(primitive.ProtocolVersion) message.Message { return m }
}
