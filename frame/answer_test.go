package frame

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"
)

func TestAppendVersionError(t *testing.T) {
	tests := []struct {
		version uint8
		header  []byte // the header the driver reads, up to the body length
	}{
		{1, []byte{0x81, 0, 0, 0}},
		{2, []byte{0x82, 0, 0, 0}},
		{6, []byte{0x84, 0, 0, 0, 0}},
		{0x41, []byte{0x84, 0, 0, 0, 0}}, // DSE v1
	}
	for _, tt := range tests {
		e := &UnsupportedVersionError{Version: tt.version}
		b := AppendVersionError([]byte("x"), e)[1:]
		msg := e.Error()
		body := append(wireInt(ErrCodeProtocol), wireString(msg)...)
		if want := append(append(bytes.Clone(tt.header), wireInt(int32(len(body)))...), body...); !bytes.Equal(b, want) {
			t.Errorf("v%d: % x, want % x", tt.version, b, want)
		}
		// The oracle reads v2 and v4 frames.
		if tt.version != 1 {
			f := oracleDecode(t, b, CompressionNone)
			if !reflect.DeepEqual(f.Body.Message, &message.ProtocolError{ErrorMessage: msg}) {
				t.Errorf("v%d: oracle reads %v", tt.version, f.Body.Message)
			}
		}
	}
}

func TestAppendStatementOracle(t *testing.T) {
	for _, v := range parseVersions {
		for i, o := range oracleOptions(v) {
			for _, prepare := range []bool{false, true} {
				var in, want message.Message = &message.Query{Query: "SELECT * FROM system.local USING TIMEOUT 5s", Options: o},
					&message.Query{Query: "SELECT * FROM system.local", Options: o}
				if prepare {
					in, want = &message.Prepare{Query: "SELECT * FROM system.local USING TIMEOUT 5s"}, &message.Prepare{Query: "SELECT * FROM system.local"}
				}
				raw := oracleEncode(t, primitive.ProtocolVersion(v), in, CompressionNone)
				h, _ := ParseHeader(raw)
				out, err := AppendStatement([]byte("x"), h, raw[HeaderSize:], []byte("SELECT * FROM system.local"))
				if err != nil || out[0] != 'x' {
					t.Fatalf("v%d options %d: %v", v, i, err)
				}
				got := oracleDecode(t, out[1:], CompressionNone)
				if !reflect.DeepEqual(got.Body.Message, want) || got.Header.StreamId != 42 {
					t.Errorf("v%d options %d: %v, want %v", v, i, got.Body.Message, want)
				}
			}
		}
	}
	raw := oracleEncode(t, 4, &message.Query{Query: "SELECT 1 USING TIMEOUT 1s", Options: &message.QueryOptions{}}, CompressionNone)
	h, _ := ParseHeader(raw)
	dst := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() { AppendStatement(dst, h, raw[HeaderSize:], []byte("SELECT 1")) }); n != 0 {
		t.Errorf("AppendStatement allocates %v", n)
	}
	if _, err := AppendStatement(nil, h, raw[HeaderSize:HeaderSize+6], nil); err == nil {
		t.Error("short body accepted")
	}
}

func TestResponseMessage(t *testing.T) {
	for _, v := range parseVersions {
		for _, prefix := range []int{noPrefix, tracedWarnings, tracedPayload} {
			raw := encodeOracle(t, oracleResponse(t, v, &message.SetKeyspaceResult{Keyspace: "Ks"}, prefix))
			h, _ := ParseHeader(raw)
			msg, ok := ResponseMessage(raw[HeaderSize:], h)
			if kind, kok := ResultKind(msg); !ok || !kok || kind != ResultKindSetKeyspace {
				t.Fatalf("v%d prefix %d: kind %d, %v, %v", v, prefix, kind, ok, kok)
			}
			if ks, ok := SetKeyspace(msg); !ok || string(ks) != "Ks" {
				t.Errorf("v%d prefix %d: keyspace %q, %v", v, prefix, ks, ok)
			}
			for n := range len(raw) - HeaderSize {
				body := raw[HeaderSize : HeaderSize+n]
				if msg, ok := ResponseMessage(body, h); ok {
					if _, ok := SetKeyspace(msg); ok {
						t.Fatalf("v%d prefix %d: keyspace read from %d of %d bytes", v, prefix, n, len(raw)-HeaderSize)
					}
				}
			}
		}
	}
	raw := encodeOracle(t, oracleResponse(t, 4, &message.VoidResult{}, noPrefix))
	if ks, ok := SetKeyspace(raw[HeaderSize:]); ok {
		t.Errorf("Void read as Set_keyspace %q", ks)
	}
}
func TestSetStream(t *testing.T) {
	f := AppendHeader(nil, Header{Version: 4, Response: true, Stream: 7, Opcode: OpResult, Length: 0})
	for _, id := range []int16{0, 1, 255, 256, 32767, -1} {
		SetStream(f, id)
		h, err := ParseHeader(f)
		if err != nil || h.Stream != id || h.Opcode != OpResult || h.Version != 4 || !h.Response {
			t.Errorf("SetStream(%d): header %+v, %v", id, h, err)
		}
	}
}
