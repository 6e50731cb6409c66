package frame

// Round trips against go-cassandra-native-protocol, the oracle: frames it
// encodes must parse here field by field, bodies it compresses must
// decompress here to its uncompressed encoding, what this package
// compresses and segments must decode there to the same messages, and
// segments it encodes must read here.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"reflect"
	"testing"

	plz4 "github.com/datastax/go-cassandra-native-protocol/compression/lz4"
	psnappy "github.com/datastax/go-cassandra-native-protocol/compression/snappy"
	"github.com/datastax/go-cassandra-native-protocol/datatype"
	pframe "github.com/datastax/go-cassandra-native-protocol/frame"
	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"
	psegment "github.com/datastax/go-cassandra-native-protocol/segment"
)

// oracleMessages returns one message of every opcode (several for ERROR
// and RESULT) valid in protocol version v.
func oracleMessages(v primitive.ProtocolVersion) []message.Message {
	col := &message.ColumnMetadata{Keyspace: "ks", Table: "t", Name: "k", Index: 0, Type: datatype.Int}
	opts := &message.QueryOptions{Consistency: primitive.ConsistencyLevelQuorum, PositionalValues: []*primitive.Value{primitive.NewValue([]byte{0, 0, 0, 7})}, PageSize: 500}
	prepared := &message.PreparedResult{PreparedQueryId: []byte{1, 2, 3, 4},
		VariablesMetadata: &message.VariablesMetadata{Columns: []*message.ColumnMetadata{col}},
		ResultMetadata:    &message.RowsMetadata{ColumnCount: 1, Columns: []*message.ColumnMetadata{col}}}
	execute := &message.Execute{QueryId: []byte{1, 2, 3, 4}, Options: opts}
	if v >= primitive.ProtocolVersion4 {
		prepared.VariablesMetadata.PkIndices = []uint16{0}
	}
	if v >= primitive.ProtocolVersion5 {
		prepared.ResultMetadataId = []byte{9, 9}
		execute.ResultMetadataId = []byte{9, 9}
	}
	return []message.Message{
		&message.Startup{Options: map[string]string{"CQL_VERSION": "3.0.0", "COMPRESSION": "lz4"}},
		&message.Options{},
		&message.Query{Query: "SELECT * FROM ks.t WHERE k = ?", Options: opts},
		&message.Prepare{Query: "SELECT * FROM ks.t WHERE k = ?"},
		execute,
		&message.Batch{Type: primitive.BatchTypeUnlogged, Children: []*message.BatchChild{
			{Query: "INSERT INTO ks.t (k) VALUES (?)", Values: []*primitive.Value{primitive.NewValue([]byte{0, 0, 0, 1})}},
			{Id: []byte{1, 2, 3, 4}, Values: []*primitive.Value{primitive.NewValue([]byte{0, 0, 0, 2})}},
		}, Consistency: primitive.ConsistencyLevelOne},
		&message.Register{EventTypes: []primitive.EventType{primitive.EventTypeSchemaChange, primitive.EventTypeTopologyChange}},
		&message.AuthResponse{Token: []byte("\x00cassandra\x00cassandra")},
		&message.ServerError{ErrorMessage: "boom"},
		&message.ProtocolError{ErrorMessage: "bad"},
		&message.Invalid{ErrorMessage: "unconfigured table missing"},
		&message.ConfigError{ErrorMessage: "Per-partition rate limit reached"},
		&message.Unprepared{ErrorMessage: "unknown", Id: []byte{1, 2, 3, 4}},
		&message.ReadTimeout{ErrorMessage: "timeout", Consistency: primitive.ConsistencyLevelQuorum, Received: 1, BlockFor: 2},
		&message.Ready{},
		&message.Authenticate{Authenticator: "org.apache.cassandra.auth.PasswordAuthenticator"},
		&message.Supported{Options: map[string][]string{"COMPRESSION": {"lz4", "snappy"}, "CQL_VERSION": {"3.4.7"}}},
		&message.VoidResult{},
		&message.RowsResult{Metadata: &message.RowsMetadata{ColumnCount: 1, Columns: []*message.ColumnMetadata{col}},
			Data: message.RowSet{{{0, 0, 0, 1}}, {{0, 0, 0, 2}}}},
		&message.SetKeyspaceResult{Keyspace: "ks"},
		prepared,
		&message.SchemaChangeResult{ChangeType: primitive.SchemaChangeTypeCreated, Target: primitive.SchemaChangeTargetTable, Keyspace: "ks", Object: "t"},
		&message.SchemaChangeEvent{ChangeType: primitive.SchemaChangeTypeDropped, Target: primitive.SchemaChangeTargetKeyspace, Keyspace: "ks"},
		&message.StatusChangeEvent{ChangeType: primitive.StatusChangeTypeUp, Address: &primitive.Inet{Addr: []byte{127, 0, 0, 2}, Port: 9042}},
		&message.TopologyChangeEvent{ChangeType: primitive.TopologyChangeTypeNewNode, Address: &primitive.Inet{Addr: []byte{127, 0, 0, 3}, Port: 9042}},
		&message.AuthChallenge{Token: []byte("challenge")},
		&message.AuthSuccess{Token: []byte("ok")},
	}
}

var oracleCodecs = map[Compression]pframe.Codec{
	CompressionNone:   pframe.NewCodec(),
	CompressionLZ4:    pframe.NewCodecWithCompression(plz4.Compressor{}),
	CompressionSnappy: pframe.NewCodecWithCompression(psnappy.Compressor{}),
}

func oracleEncode(t *testing.T, v primitive.ProtocolVersion, msg message.Message, comp Compression) []byte {
	t.Helper()
	stream := int16(42)
	if msg.GetOpCode() == primitive.OpCodeEvent {
		stream = -1
	}
	f := pframe.NewFrame(v, stream, msg)
	if comp != CompressionNone {
		f.SetCompress(true)
	}
	var b bytes.Buffer
	if err := oracleCodecs[comp].EncodeFrame(f, &b); err != nil {
		t.Fatalf("oracle encoding %v: %v", msg, err)
	}
	return b.Bytes()
}

func oracleDecode(t *testing.T, raw []byte, comp Compression) *pframe.Frame {
	t.Helper()
	f, err := oracleCodecs[comp].DecodeFrame(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("oracle decoding: %v", err)
	}
	return f
}

func TestOracleFrames(t *testing.T) {
	for _, v := range []primitive.ProtocolVersion{3, 4, 5} {
		comps := []Compression{CompressionNone, CompressionLZ4, CompressionSnappy}
		if v == 5 {
			comps = comps[:1] // v5 compresses segments, not bodies
		}
		for _, comp := range comps {
			for _, msg := range oracleMessages(v) {
				t.Run(fmt.Sprintf("v%d/%d/%T", v, comp, msg), func(t *testing.T) {
					raw := oracleEncode(t, v, msg, comp)

					// The header parses field by field.
					h, err := ParseHeader(raw)
					if err != nil {
						t.Fatal(err)
					}
					want := oracleDecode(t, raw, comp)
					if h.Version != uint8(v) || h.Response != msg.IsResponse() || h.Stream != want.Header.StreamId ||
						h.Opcode != Opcode(msg.GetOpCode()) || h.Length != len(raw)-HeaderSize ||
						h.Flags != uint8(want.Header.Flags) || h.Compressed() != want.Header.Flags.Contains(primitive.HeaderFlagCompressed) {
						t.Fatalf("header %+v, oracle %+v", h, want.Header)
					}
					if !h.Compressed() {
						comp = CompressionNone // the oracle never compresses the handshake
					}

					// The Reader returns the frame's bytes unchanged.
					got, _, err := NewReader(bufio.NewReader(bytes.NewReader(raw)), MaxBodySize).Next()
					if err != nil || !bytes.Equal(got, raw) {
						t.Fatalf("Reader: %v", err)
					}

					// The decompressed body decodes to the oracle's message.
					var d Decompressor
					body, err := d.Body(comp, raw[HeaderSize:], MaxBodySize)
					if err != nil {
						t.Fatalf("decompressing: %v", err)
					}
					plainHeader := h
					plainHeader.Flags &^= FlagCompression
					plainHeader.Length = len(body)
					plain := append(AppendHeader(nil, plainHeader), body...)
					if got := oracleDecode(t, plain, CompressionNone); !reflect.DeepEqual(got.Body.Message, want.Body.Message) {
						t.Fatalf("decompressed body decodes to %v, want %v", got.Body.Message, want.Body.Message)
					}

					// What this package compresses, the oracle decodes to the same message.
					if comp != CompressionNone {
						var z Compressor
						mine := AppendHeader(nil, h)
						mine = z.AppendBody(mine, comp, plain[HeaderSize:])
						SetLength(mine)
						back := oracleDecode(t, mine, comp)
						if !reflect.DeepEqual(back.Body.Message, want.Body.Message) {
							t.Fatalf("oracle decodes %v, want %v", back.Body.Message, want.Body.Message)
						}
					}
				})
			}
		}
	}
}

// oracleV5Frames encodes every v5 message, plus one frame too large for a
// single segment.
func oracleV5Frames(t *testing.T) [][]byte {
	var frames [][]byte
	for _, msg := range oracleMessages(5) {
		frames = append(frames, oracleEncode(t, 5, msg, CompressionNone))
	}
	big := &message.Query{Query: "INSERT INTO ks.t (k, v) VALUES (1, '" + string(bytes.Repeat([]byte("abc"), 150_000)) + "')",
		Options: &message.QueryOptions{}}
	return append(frames, oracleEncode(t, 5, big, CompressionNone))
}

func TestOracleSegmentsWritten(t *testing.T) {
	frames := oracleV5Frames(t)
	all := bytes.Join(frames, nil)
	for _, compressed := range []bool{false, true} {
		t.Run(fmt.Sprint("lz4=", compressed), func(t *testing.T) {
			wire := NewSegmentWriter(compressed).AppendFrames(nil, all)
			codec := psegment.NewCodec()
			if compressed {
				codec = psegment.NewCodecWithCompression(plz4.Compressor{})
			}
			src := bytes.NewReader(wire)
			var payloads []byte
			var selfContained, parts int
			for src.Len() > 0 {
				seg, err := codec.DecodeSegment(src)
				if err != nil {
					t.Fatalf("oracle decoding segment %d: %v", selfContained+parts, err)
				}
				if seg.Header.IsSelfContained {
					selfContained++
				} else {
					parts++
				}
				payloads = append(payloads, seg.Payload.UncompressedData...)
			}
			if !bytes.Equal(payloads, all) {
				t.Fatal("segment payloads differ from the frames")
			}
			if selfContained < 1 || parts < 4 {
				t.Errorf("%d self-contained segments and %d parts; want whole frames packed and the large one split", selfContained, parts)
			}
			// And every frame decodes to the oracle's message.
			r := NewReader(bufio.NewReader(bytes.NewReader(wire)), MaxBodySize)
			r.UseSegments(compressed)
			for i, want := range frames {
				got, _, err := r.Next()
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("frame %d read back differs: %v", i, err)
				}
			}
		})
	}
}

func TestOracleSegmentsRead(t *testing.T) {
	for _, compressed := range []bool{false, true} {
		codec := psegment.NewCodec()
		if compressed {
			codec = psegment.NewCodecWithCompression(plz4.Compressor{})
		}
		payloads := [][]byte{{}, []byte("x"), bytes.Repeat([]byte("compressible "), 1000), make([]byte, MaxSegmentPayload)}
		for i := range payloads[3] {
			payloads[3][i] = byte(i * 7919 >> 3)
		}
		var wire bytes.Buffer
		for i, p := range payloads {
			seg := &psegment.Segment{Header: &psegment.Header{IsSelfContained: i%2 == 0}, Payload: &psegment.Payload{UncompressedData: p}}
			if err := codec.EncodeSegment(seg, &wire); err != nil {
				t.Fatal(err)
			}
		}
		sr := NewSegmentReader(bufio.NewReader(&wire), compressed)
		for i, want := range payloads {
			got, self, err := sr.Next()
			if err != nil || !bytes.Equal(got, want) || self != (i%2 == 0) {
				t.Fatalf("lz4=%v segment %d: %v (self-contained %v)", compressed, i, err, self)
			}
		}
	}
}

func TestSegmentCorruption(t *testing.T) {
	f := AppendHeader(nil, Header{Version: 5, Stream: 1, Opcode: OpOptions})
	for _, compressed := range []bool{false, true} {
		wire := NewSegmentWriter(compressed).AppendFrames(nil, f)
		for i := range wire {
			bad := bytes.Clone(wire)
			bad[i] ^= 0x10
			_, _, err := NewSegmentReader(bufio.NewReader(bytes.NewReader(bad)), compressed).Next()
			if err == nil {
				t.Errorf("lz4=%v: flipping a bit of byte %d went unnoticed", compressed, i)
			}
		}
	}
}

// The answers the proxy writes itself decode, with the oracle library, to
// the messages they mean.
func TestOracleAnswers(t *testing.T) {
	for _, v := range []uint8{3, 4, 5} {
		cases := []struct {
			name string
			raw  []byte
			want message.Message
		}{
			{"unprepared", AppendUnprepared(nil, v, 7, "prepare it again", []byte{1, 2, 3}),
				&message.Unprepared{ErrorMessage: "prepare it again", Id: []byte{1, 2, 3}}},
			{"rate limited, Config_error", AppendRateLimited(nil, v, 9, false, true, "ks", "t"),
				&message.ConfigError{ErrorMessage: "Per-partition rate limit reached for write in table ks.t, rejected by coordinator"}},
			{"protocol error", AppendError(nil, v, -1, ErrCodeProtocol, "bad"),
				&message.ProtocolError{ErrorMessage: "bad"}},
		}
		for _, tc := range cases {
			f := oracleDecode(t, tc.raw, CompressionNone)
			if !reflect.DeepEqual(f.Body.Message, tc.want) {
				t.Errorf("v%d %s: %#v, want %#v", v, tc.name, f.Body.Message, tc.want)
			}
		}
	}
	// The oracle does not know ScyllaDB's error; its body is read by hand:
	// code, message, op type (write: 1), rejected by the coordinator.
	b := AppendRateLimited(nil, 4, 3, true, false, "ks", "t")[HeaderSize:]
	msg := "Per-partition rate limit reached for read in table ks.t, rejected by coordinator"
	want := binary.BigEndian.AppendUint32(nil, uint32(ErrCodeRateLimit))
	want = binary.BigEndian.AppendUint16(want, uint16(len(msg)))
	want = append(append(want, msg...), 0, 1)
	if !bytes.Equal(b, want) {
		t.Errorf("opted-in rate-limit error body % x, want % x", b, want)
	}
	if n := testing.AllocsPerRun(100, func() { b = AppendRateLimited(b[:0], 4, 3, true, true, "ks", "t") }); n != 0 {
		t.Errorf("AppendRateLimited allocates %v", n)
	}
}

// TestOracleRequests checks the requests the proxy makes itself against the
// oracle's decoding.
func TestOracleRequests(t *testing.T) {
	for _, v := range []uint8{3, 4, 5} {
		cases := []struct {
			name string
			raw  []byte
			want message.Message
		}{
			{"USE", AppendQueryRequest(nil, v, 7, []byte(`USE "Ks"`)),
				&message.Query{Query: `USE "Ks"`, Options: &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne}}},
			{"PREPARE", AppendPrepareRequest(nil, v, 8, []byte("SELECT * FROM t WHERE k = ?"), nil),
				&message.Prepare{Query: "SELECT * FROM t WHERE k = ?"}},
		}
		if v >= 5 {
			cases = append(cases, struct {
				name string
				raw  []byte
				want message.Message
			}{"PREPARE in a keyspace", AppendPrepareRequest(nil, v, 9, []byte("SELECT * FROM t"), []byte("ks")),
				&message.Prepare{Query: "SELECT * FROM t", Keyspace: "ks"}})
		}
		for _, tc := range cases {
			f := oracleDecode(t, tc.raw, CompressionNone)
			if !reflect.DeepEqual(f.Body.Message, tc.want) {
				t.Errorf("v%d %s: %#v, want %#v", v, tc.name, f.Body.Message, tc.want)
			}
		}
	}
}
