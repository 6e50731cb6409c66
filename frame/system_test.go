package frame

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"reflect"
	"testing"

	"github.com/datastax/go-cassandra-native-protocol/datacodec"
	"github.com/datastax/go-cassandra-native-protocol/datatype"
	pframe "github.com/datastax/go-cassandra-native-protocol/frame"
	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"
)

// Prefixes of a response body to test with.
const (
	noPrefix       = iota
	tracedWarnings // a tracing id and warnings (v4 on)
	tracedPayload  // a tracing id and a custom payload (v4 on)
)

// oracleResponse encodes msg as a response frame of version v with the
// given prefix. The oracle is not asked for warnings and a custom payload
// together: it writes the payload first, where Cassandra writes (and the
// spec puts) the warnings.
func oracleResponse(tb testing.TB, v uint8, msg message.Message, prefix int) *pframe.Frame {
	tb.Helper()
	f := pframe.NewFrame(primitive.ProtocolVersion(v), 42, msg)
	if prefix != noPrefix {
		f.SetTracingId(&primitive.UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	}
	if prefix == tracedWarnings && v >= 4 {
		f.SetWarnings([]string{"careful", "very"})
	}
	if prefix == tracedPayload && v >= 4 {
		f.SetCustomPayload(map[string][]byte{"k": []byte("v")})
	}
	return f
}

func encodeOracle(tb testing.TB, f *pframe.Frame) []byte {
	tb.Helper()
	var b bytes.Buffer
	if err := pframe.NewCodec().EncodeFrame(f, &b); err != nil {
		tb.Fatalf("oracle encoding %v: %v", f.Body.Message, err)
	}
	return b.Bytes()
}

func decodeOracle(tb testing.TB, raw []byte) *pframe.Frame {
	tb.Helper()
	f, err := pframe.NewCodec().DecodeFrame(bytes.NewReader(raw))
	if err != nil {
		tb.Fatalf("oracle decoding: %v", err)
	}
	return f
}

// systemRows returns a RESULT Rows of a system table: a text key, two
// addresses, a port and tokens, in rows of the given peers.
func systemRows(peers ...byte) *message.RowsResult {
	cols := []*message.ColumnMetadata{
		{Keyspace: "system", Table: "peers", Name: "peer", Type: datatype.Inet},
		{Keyspace: "system", Table: "peers", Name: "rpc_address", Type: datatype.Inet},
		{Keyspace: "system", Table: "peers", Name: "native_port", Type: datatype.Int},
		{Keyspace: "system", Table: "peers", Name: "tokens", Type: datatype.NewSet(datatype.Varchar)},
		{Keyspace: "system", Table: "peers", Name: "data_center", Type: datatype.Varchar},
	}
	rows := &message.RowsResult{Metadata: &message.RowsMetadata{ColumnCount: int32(len(cols)), Columns: cols}, Data: message.RowSet{}}
	for _, p := range peers {
		rows.Data = append(rows.Data, message.Row{{10, 0, 0, p}, {10, 0, 1, p}, IntValue(9042), TextSetValue("1", "2"), {}})
	}
	return rows
}

func TestAppendRowsOracle(t *testing.T) {
	moved := func(r *Row) bool {
		peer, _ := r.Cell("peer")
		if peer[3] == 2 {
			return false
		}
		r.Set("rpc_address", net.IPv4(192, 168, 0, peer[3]).To4())
		r.Set("native_port", IntValue(9043))
		r.Set("tokens", TextSetValue("-9223372036854775808"))
		r.Set("data_center", nil)
		r.Set("no_such_column", []byte("ignored"))
		return true
	}
	movedRow := func(p byte) message.Row {
		return message.Row{{10, 0, 0, p}, {192, 168, 0, p}, IntValue(9043), TextSetValue("-9223372036854775808"), nil}
	}
	tests := []struct {
		name    string
		in      func() *message.RowsResult
		columns []string // stand-ins
		edit    func(*Row) bool
		want    func() *message.RowsResult
	}{
		{"unchanged", func() *message.RowsResult { return systemRows(1, 2) }, nil,
			func(*Row) bool { return true }, func() *message.RowsResult { return systemRows(1, 2) }},
		{"moved, one left out", func() *message.RowsResult { return systemRows(1, 2, 3) }, nil, moved,
			func() *message.RowsResult {
				r := systemRows()
				r.Data = message.RowSet{movedRow(1), movedRow(3)}
				return r
			}},
		{"all left out", func() *message.RowsResult { return systemRows(1, 2, 3) }, nil,
			func(*Row) bool { return false }, func() *message.RowsResult { return systemRows() }},
		{"no rows", func() *message.RowsResult { return systemRows() }, nil, moved,
			func() *message.RowsResult { return systemRows() }},
		{"paging state kept", func() *message.RowsResult {
			r := systemRows(1)
			r.Metadata.PagingState = []byte{7, 7}
			return r
		}, nil, moved, func() *message.RowsResult {
			r := systemRows()
			r.Metadata.PagingState = []byte{7, 7}
			r.Data = message.RowSet{movedRow(1)}
			return r
		}},
		{"no metadata, stand-in columns", func() *message.RowsResult {
			r := systemRows(1, 2)
			r.Metadata.Columns = nil
			return r
		}, []string{"peer", "rpc_address", "native_port", "tokens", "data_center"}, moved, func() *message.RowsResult {
			r := systemRows()
			r.Metadata.Columns = nil
			r.Data = message.RowSet{movedRow(1)}
			return r
		}},
		{"metadata over stand-ins", func() *message.RowsResult { return systemRows(3) }, []string{"a", "b", "c", "d", "e"}, moved,
			func() *message.RowsResult {
				r := systemRows()
				r.Data = message.RowSet{movedRow(3)}
				return r
			}},
	}
	for _, v := range parseVersions {
		for _, prefix := range []int{noPrefix, tracedWarnings, tracedPayload} {
			for _, tt := range tests {
				what := fmt.Sprintf("v%d prefix %d %s", v, prefix, tt.name)
				in := oracleResponse(t, v, tt.in(), prefix)
				raw := encodeOracle(t, in)
				h, err := ParseHeader(raw)
				if err != nil {
					t.Fatal(err)
				}
				dst := []byte("before")
				out, ok, err := AppendRows(dst, h, raw[HeaderSize:], tt.columns, tt.edit)
				if err != nil || !ok {
					t.Fatalf("%s: %v, %v", what, ok, err)
				}
				if !bytes.HasPrefix(out, []byte("before")) {
					t.Fatalf("%s: dst overwritten", what)
				}
				got := decodeOracle(t, out[len("before"):])
				want := oracleResponse(t, v, tt.want(), prefix)
				if !reflect.DeepEqual(got.Body, want.Body) || got.Header.Flags != want.Header.Flags || got.Header.StreamId != 42 {
					t.Errorf("%s: got %+v %#v, want %+v %#v", what, got.Header, got.Body, want.Header, want.Body)
				}
				checkTruncations(t, what, raw[HeaderSize:], func(b []byte) error {
					_, _, err := AppendRows(nil, h, b, tt.columns, tt.edit)
					return err
				})
			}
		}
	}
}

func TestAppendRowsOthers(t *testing.T) {
	for _, msg := range []message.Message{&message.VoidResult{}, &message.SetKeyspaceResult{Keyspace: "ks"}, oraclePrepared(t, 4)[0]} {
		raw := encodeOracle(t, oracleResponse(t, 4, msg, tracedPayload))
		h, _ := ParseHeader(raw)
		out, ok, err := AppendRows(nil, h, raw[HeaderSize:], nil, func(*Row) bool { t.Fatal("edit called"); return true })
		if ok || err != nil || out != nil {
			t.Errorf("%T: %v, %v, %v", msg, out, ok, err)
		}
	}

	// Metadata that does not say what the rows hold is refused.
	r := systemRows(1)
	r.Metadata.Columns = nil
	raw := encodeOracle(t, oracleResponse(t, 4, r, noPrefix))
	h, _ := ParseHeader(raw)
	if _, _, err := AppendRows(nil, h, raw[HeaderSize:], []string{"peer"}, func(*Row) bool { return true }); !errors.Is(err, ErrMalformed) {
		t.Errorf("5 columns, 1 stand-in: %v", err)
	}

	// A row count the body cannot hold is refused before anything is
	// allocated for it.
	body := append(wireInt(ResultKindRows), wireInt(int32(MetadataNoMetadata))...)
	body = append(body, wireInt(1000)...)
	for _, count := range []int32{1 << 30, -1} {
		b := append(bytes.Clone(body), wireInt(count)...)
		if _, _, err := AppendRows(nil, Header{Version: 4, Response: true, Opcode: OpResult}, b, make([]string, 1000), func(*Row) bool { return true }); err == nil {
			t.Errorf("row count %d accepted", count)
		}
	}
}

func TestValues(t *testing.T) {
	tests := []struct {
		got, want []byte
	}{
		{IntValue(9042), []byte{0, 0, 0x23, 0x52}},
		{IntValue(-1), []byte{0xff, 0xff, 0xff, 0xff}},
		{TextSetValue("-9223372036854775808"), append(append(wireInt(1), wireInt(20)...), "-9223372036854775808"...)},
		{TextSetValue(), wireInt(0)},
		{AppendValue(nil, nil), wireInt(-1)},
		{AppendValue(nil, []byte{}), wireInt(0)},
		{AppendValue([]byte{9}, []byte{1, 2}), append(append([]byte{9}, wireInt(2)...), 1, 2)},
	}
	for i, tt := range tests {
		if !bytes.Equal(tt.got, tt.want) {
			t.Errorf("%d: % x, want % x", i, tt.got, tt.want)
		}
	}
	// The oracle reads the set as the driver would.
	codec, err := datacodec.NewSet(datatype.NewSet(datatype.Varchar))
	if err != nil {
		t.Fatal(err)
	}
	var set []string
	if _, err := codec.Decode(TextSetValue("a", "b"), &set, primitive.ProtocolVersion4); err != nil || !reflect.DeepEqual(set, []string{"a", "b"}) {
		t.Errorf("set<text> decodes to %v, %v", set, err)
	}
}

func FuzzAppendRows(f *testing.F) {
	for _, v := range parseVersions {
		for _, prefix := range []int{noPrefix, tracedWarnings, tracedPayload} {
			raw := encodeOracle(f, oracleResponse(f, v, systemRows(1, 2), prefix))
			f.Add(raw[HeaderSize:], v, raw[1])
			r := systemRows(3)
			r.Metadata.Columns = nil
			raw = encodeOracle(f, oracleResponse(f, v, r, prefix))
			f.Add(raw[HeaderSize:], v, raw[1])
		}
	}
	stand := []string{"peer", "rpc_address", "native_port", "tokens", "data_center"}
	f.Fuzz(func(t *testing.T, body []byte, v, flags uint8) {
		h := Header{Version: 3 + v%3, Response: true, Flags: flags &^ FlagCompression, Opcode: OpResult}
		var seen, kept int
		out, ok, err := AppendRows(nil, h, body, stand, func(r *Row) bool {
			seen++
			if seen%2 == 0 {
				return false
			}
			kept++
			r.Set("rpc_address", []byte{1, 2, 3, 4})
			r.Set("data_center", nil)
			return true
		})
		if err != nil || !ok {
			return
		}
		// What it wrote reads back, with the rows it kept, unchanged by
		// an edit that keeps all.
		oh, err := ParseHeader(out)
		if err != nil || oh.Length != len(out)-HeaderSize {
			t.Fatalf("header %+v, %v", oh, err)
		}
		n := 0
		again, ok, err := AppendRows(nil, oh, out[HeaderSize:], stand, func(*Row) bool { n++; return true })
		if err != nil || !ok || n != kept || !bytes.Equal(again, out) {
			t.Fatalf("rewritten rows read back as %d rows of %d, %v, %v", n, kept, ok, err)
		}
	})
}
