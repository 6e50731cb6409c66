package frame

// Tests of the RESULT Prepared decoder against the oracle: bound variables
// and result columns of every type, with and without partition key
// indexes, global or per-column table specs, in v3, v4 and v5.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/datastax/go-cassandra-native-protocol/datatype"
	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"
)

// oracleTypes returns a type of every kind valid in protocol version v,
// collections, tuples and UDTs nested in each other.
func oracleTypes(tb testing.TB, v uint8) []datatype.DataType {
	tb.Helper()
	address, err := datatype.NewUserDefined("ks", "address", []string{"street", "zip", "tags"},
		[]datatype.DataType{datatype.Varchar, datatype.Int, datatype.NewSet(datatype.Varchar)})
	if err != nil {
		tb.Fatal(err)
	}
	person, err := datatype.NewUserDefined("ks", "person", []string{"name", "home", "history"},
		[]datatype.DataType{datatype.Varchar, address, datatype.NewList(datatype.NewTuple(datatype.Timestamp, address))})
	if err != nil {
		tb.Fatal(err)
	}
	types := []datatype.DataType{
		datatype.Ascii, datatype.Bigint, datatype.Blob, datatype.Boolean, datatype.Counter, datatype.Decimal,
		datatype.Double, datatype.Float, datatype.Int, datatype.Timestamp, datatype.Uuid, datatype.Varchar,
		datatype.Varint, datatype.Timeuuid, datatype.Inet,
		datatype.NewList(datatype.Int),
		datatype.NewSet(datatype.Varchar),
		datatype.NewMap(datatype.Varchar, datatype.NewList(datatype.NewMap(datatype.Int, datatype.NewSet(datatype.Blob)))),
		datatype.NewTuple(datatype.Int, datatype.Varchar, datatype.NewList(datatype.Int)),
		datatype.NewTuple(),
		address, person,
		datatype.NewCustom("org.apache.cassandra.db.marshal.VectorType(org.apache.cassandra.db.marshal.FloatType,3)"),
		datatype.NewList(datatype.NewCustom("org.apache.cassandra.db.marshal.DynamicCompositeType")),
	}
	if v >= 4 {
		types = append(types, datatype.Date, datatype.Time, datatype.Smallint, datatype.Tinyint)
	}
	if v >= 5 {
		types = append(types, datatype.Duration)
	}
	return types
}

// oracleType returns the oracle's encoding of t.
func oracleType(tb testing.TB, t datatype.DataType, v uint8) []byte {
	tb.Helper()
	var b bytes.Buffer
	if err := datatype.WriteDataType(t, &b, primitive.ProtocolVersion(v)); err != nil {
		tb.Fatalf("oracle encoding %v: %v", t, err)
	}
	return b.Bytes()
}

// oracleColumns returns one column of each type, all in ks.t or, when
// mixed, every other one in ks2.t2.
func oracleColumns(tb testing.TB, v uint8, mixed bool) []*message.ColumnMetadata {
	var cols []*message.ColumnMetadata
	for i, typ := range oracleTypes(tb, v) {
		col := &message.ColumnMetadata{Keyspace: "ks", Table: "t", Name: fmt.Sprint("c", i), Index: int32(i), Type: typ}
		if mixed && i%2 == 1 {
			col.Keyspace, col.Table = "ks2", "t2"
		}
		cols = append(cols, col)
	}
	return cols
}

// oraclePrepared returns Prepared results with every combination of the
// layouts valid in v.
func oraclePrepared(tb testing.TB, v uint8) []*message.PreparedResult {
	var out []*message.PreparedResult
	for _, vars := range []string{"none", "global", "mixed"} {
		for _, pk := range [][]uint16{nil, {2}, {2, 0, 1}} {
			if pk != nil && (v < 4 || vars == "none") {
				continue
			}
			for _, result := range []string{"none", "count only", "global", "mixed", "paging"} {
				p := &message.PreparedResult{PreparedQueryId: []byte{0xDE, 0xAD, 0xBE, 0xEF}, VariablesMetadata: &message.VariablesMetadata{PkIndices: pk}}
				if vars != "none" {
					p.VariablesMetadata.Columns = oracleColumns(tb, v, vars == "mixed")
				}
				switch result {
				case "count only":
					p.ResultMetadata = &message.RowsMetadata{ColumnCount: 3}
				case "global", "mixed":
					cols := oracleColumns(tb, v, result == "mixed")
					p.ResultMetadata = &message.RowsMetadata{ColumnCount: int32(len(cols)), Columns: cols}
				case "paging":
					cols := oracleColumns(tb, v, false)[:2]
					p.ResultMetadata = &message.RowsMetadata{ColumnCount: 2, Columns: cols, PagingState: []byte{1, 2}}
					if v >= 5 {
						p.ResultMetadata.NewResultMetadataId = []byte{3, 4, 5}
					}
				}
				if v >= 5 {
					p.ResultMetadataId = []byte{0x11, 0x22}
				}
				out = append(out, p)
			}
		}
	}
	return out
}

// checkColumns compares decoded columns with the oracle's.
func checkColumns(t *testing.T, what string, cs Columns, want []*message.ColumnMetadata, v uint8) {
	t.Helper()
	if cs.Len() != len(want) {
		t.Fatalf("%s: %d columns, want %d", what, cs.Len(), len(want))
	}
	it := cs
	for i, w := range want {
		col, ok := it.Next()
		typ := oracleType(t, w.Type, v)
		if !ok || string(col.Keyspace) != w.Keyspace || string(col.Table) != w.Table || string(col.Name) != w.Name ||
			!bytes.Equal(col.Type, typ) || col.TypeID() != uint16(w.Type.Code()) {
			t.Fatalf("%s: column %d = %q %q %q % x, %v; want %v (% x)", what, i, col.Keyspace, col.Table, col.Name, col.Type, ok, w, typ)
		}
		if n, err := SkipTypeSpec(col.Type); err != nil || n != len(col.Type) {
			t.Fatalf("%s: column %d: SkipTypeSpec = %d, %v", what, i, n, err)
		}
	}
	if col, ok := it.Next(); ok {
		t.Fatalf("%s: extra column %+v", what, col)
	}
	if len(want) > 0 {
		last, ok := it.At(len(want) - 1)
		if !ok || string(last.Name) != want[len(want)-1].Name {
			t.Fatalf("%s: At(%d) = %+v, %v", what, len(want)-1, last, ok)
		}
	}
}

// checkPrepared compares p with the oracle's message.
func checkPrepared(t *testing.T, what string, p Prepared, m *message.PreparedResult, v uint8) {
	t.Helper()
	var ks, table string
	if cols := m.VariablesMetadata.Columns; len(cols) > 0 {
		ks, table = cols[0].Keyspace, cols[0].Table
	}
	if !bytes.Equal(p.ID, m.PreparedQueryId) || !bytes.Equal(p.ResultMetadataID, m.ResultMetadataId) ||
		string(p.Keyspace) != ks || string(p.Table) != table || p.PKIndexes.Len() != len(m.VariablesMetadata.PkIndices) {
		t.Fatalf("%s: got %+v", what, p)
	}
	for i, want := range m.VariablesMetadata.PkIndices {
		if got := p.PKIndexes.At(i); got != want {
			t.Fatalf("%s: pk index %d = %d, want %d", what, i, got, want)
		}
	}
	checkColumns(t, what+" variables", p.Variables, m.VariablesMetadata.Columns, v)
	var result []*message.ColumnMetadata
	if m.ResultMetadata != nil {
		result = m.ResultMetadata.Columns
	}
	checkColumns(t, what+" result", p.Result, result, v)
}

func TestParsePreparedOracle(t *testing.T) {
	for _, v := range parseVersions {
		for i, m := range oraclePrepared(t, v) {
			what := fmt.Sprintf("v%d PREPARED %d", v, i)
			body := oracleBody(t, v, m)
			p, err := ParsePrepared(body, v)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if p.LWT {
				t.Fatalf("%s: LWT without the mark", what)
			}
			checkPrepared(t, what, p, m, v)

			// ScyllaDB's LWT mark is bit 31 of the variables' flags.
			at := 4 + 2 + len(m.PreparedQueryId)
			if v >= 5 {
				at += 2 + len(m.ResultMetadataId)
			}
			lwt := bytes.Clone(body)
			lwt[at] |= 0x80
			if p, err = ParsePrepared(lwt, v); err != nil || !p.LWT {
				t.Fatalf("%s: with the LWT mark: LWT %v, %v", what, p.LWT, err)
			}
			checkPrepared(t, what+" LWT", p, m, v)

			checkTruncations(t, what, body, func(b []byte) error { _, err := ParsePrepared(b, v); return err })
		}
	}
}

func TestSkipTypeSpec(t *testing.T) {
	for _, v := range parseVersions {
		for _, typ := range oracleTypes(t, v) {
			b := oracleType(t, typ, v)
			if n, err := SkipTypeSpec(append(b, 0xFF, 0xFF)); err != nil || n != len(b) {
				t.Errorf("v%d %v: SkipTypeSpec = %d, %v; want %d", v, typ, n, err, len(b))
			}
			for n := range len(b) {
				if _, err := SkipTypeSpec(b[:n]); !errors.Is(err, ErrShortBody) {
					t.Errorf("v%d %v truncated to %d bytes: %v", v, typ, n, err)
				}
			}
		}
	}
	nested := func(depth int) []byte {
		b := bytes.Repeat([]byte{0, 0x20}, depth) // list<list<...
		return append(b, 0, 0x09)                 // ...<int>>
	}
	tests := []struct {
		name    string
		b       []byte
		n       int
		wantErr error
	}{
		{"text of v1 and v2", []byte{0, 0x0A}, 2, nil},
		{"nested to the limit", nested(maxTypeDepth), 2*maxTypeDepth + 2, nil},
		{"nested too deep", nested(maxTypeDepth + 1), 0, ErrMalformed},
		{"unknown id", []byte{0, 0x16}, 0, ErrMalformed},
		{"unknown collection", []byte{0, 0x23, 0, 9}, 0, ErrMalformed},
		{"tuple missing a component", []byte{0, 0x31, 0, 2, 0, 9}, 0, ErrShortBody},
		{"empty", nil, 0, ErrShortBody},
	}
	for _, tt := range tests {
		n, err := SkipTypeSpec(tt.b)
		if n != tt.n || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
			t.Errorf("%s: SkipTypeSpec = %d, %v; want %d, %v", tt.name, n, err, tt.n, tt.wantErr)
		}
	}
}

func TestParsePreparedLayouts(t *testing.T) {
	head := func(kind int32) []byte { return append(wireInt(kind), wireString("id")...) }
	col := bytes.Join([][]byte{wireString("k"), {0, 9}}, nil)
	global := bytes.Join([][]byte{wireString("ks"), wireString("t")}, nil)
	noResult := bytes.Join([][]byte{wireInt(int32(MetadataNoMetadata)), wireInt(0)}, nil)
	tests := []struct {
		name    string
		v       uint8
		body    []byte
		ks      string
		wantErr error
	}{
		{"v4", 4, bytes.Join([][]byte{head(4), wireInt(1), wireInt(1), wireInt(1), wireShort(0), global, col, noResult}, nil), "ks", nil},
		{"v4 trailing bytes", 4, bytes.Join([][]byte{head(4), wireInt(1), wireInt(1), wireInt(1), wireShort(0), global, col, noResult, {1, 2}}, nil), "ks", nil},
		{"v4 global spec without columns", 4, bytes.Join([][]byte{head(4), wireInt(1), wireInt(0), wireInt(0), global, noResult}, nil), "ks", nil},
		{"v3 paging state in the variables", 3, bytes.Join([][]byte{head(4), wireInt(int32(MetadataGlobalTableSpec | MetadataHasMorePages)), wireInt(1), wireInt(1), {7}, global, col, noResult}, nil), "ks", nil},
		{"v3 no metadata in the variables", 3, bytes.Join([][]byte{head(4), noResult, noResult}, nil), "", nil},
		{"not Prepared", 4, bytes.Join([][]byte{head(2), wireInt(0), wireInt(0), wireInt(0), noResult}, nil), "", ErrMalformed},
		{"pk index past the variables", 4, bytes.Join([][]byte{head(4), wireInt(1), wireInt(1), wireInt(1), wireShort(1), global, col, noResult}, nil), "", ErrMalformed},
		{"negative pk count", 4, bytes.Join([][]byte{head(4), wireInt(1), wireInt(1), wireInt(-1), global, col, noResult}, nil), "", ErrMalformed},
		{"pk indexes past the body", 4, bytes.Join([][]byte{head(4), wireInt(1), wireInt(1), wireInt(1 << 30), wireShort(0)}, nil), "", ErrShortBody},
		{"negative column count", 4, bytes.Join([][]byte{head(4), wireInt(0), wireInt(-1), wireInt(0), noResult}, nil), "", ErrMalformed},
		{"negative result column count", 4, bytes.Join([][]byte{head(4), wireInt(0), wireInt(0), wireInt(0), wireInt(int32(MetadataNoMetadata)), wireInt(-1)}, nil), "", ErrMalformed},
		{"unknown column type", 4, bytes.Join([][]byte{head(4), wireInt(1), wireInt(1), wireInt(0), global, wireString("k"), {0, 0x40}, noResult}, nil), "", ErrMalformed},
	}
	for _, tt := range tests {
		p, err := ParsePrepared(tt.body, tt.v)
		if tt.wantErr != nil {
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("%s: error %v, want %v", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil || string(p.ID) != "id" || string(p.Keyspace) != tt.ks {
			t.Errorf("%s: %+v, %v", tt.name, p, err)
		}
	}
}

func TestAppendPreparedLWT(t *testing.T) {
	// A response prefix of warnings, which a frame with FlagWarning carries
	// before its message.
	warnings := bytes.Join([][]byte{wireShort(1), wireString("careful")}, nil)
	for _, v := range parseVersions {
		for i, m := range oraclePrepared(t, v) {
			if i%5 != 0 {
				continue
			}
			msg := oracleBody(t, v, m)
			for _, tt := range []struct {
				name   string
				flags  uint8
				prefix []byte
			}{
				{"plain", 0, nil},
				{"decompressed", FlagCompression, nil},
				{"with warnings", FlagWarning, warnings},
			} {
				what := fmt.Sprintf("v%d prepared %d %s", v, i, tt.name)
				body := append(slices.Clone(tt.prefix), msg...)
				h := Header{Version: v, Flags: tt.flags, Response: true, Stream: 7, Opcode: OpResult}
				f, err := AppendPreparedLWT([]byte("kept"), h, body)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if string(f[:4]) != "kept" {
					t.Fatalf("%s: dst overwritten", what)
				}
				f = f[4:]
				got, err := ParseHeader(f)
				if err != nil || got.Flags != tt.flags&^FlagCompression || got.Stream != 7 || got.Length != len(body) {
					t.Fatalf("%s: header %+v, %v", what, got, err)
				}
				out, _ := ResponseMessage(f[HeaderSize:], got)
				p, err := ParsePrepared(out, v)
				if err != nil || !p.LWT {
					t.Fatalf("%s: LWT %v, %v", what, p.LWT, err)
				}
				checkPrepared(t, what, p, m, v)
				// Only the mark changed: the first byte of the flags.
				var diff []int
				for j := range msg {
					if out[j] != msg[j] {
						diff = append(diff, j)
					}
				}
				at := 4 + 2 + len(m.PreparedQueryId)
				if v >= 5 {
					at += 2 + len(m.ResultMetadataId)
				}
				if !slices.Equal(diff, []int{at}) || out[at] != msg[at]|0x80 {
					t.Fatalf("%s: bytes %v changed, want only %d (the flags' top bit)", what, diff, at)
				}
			}
		}
	}
	for _, tt := range []struct {
		name string
		h    Header
		body []byte
	}{
		{"not Prepared", Header{Version: 4}, bytes.Join([][]byte{wireInt(2), wireInt(0), wireInt(0)}, nil)},
		{"short", Header{Version: 4}, wireInt(4)},
		{"prefix past the body", Header{Version: 4, Flags: FlagTracing}, []byte{1, 2, 3}},
	} {
		if f, err := AppendPreparedLWT(nil, tt.h, tt.body); err == nil {
			t.Errorf("%s: % x, want an error", tt.name, f)
		}
	}
}

// preparedBody is the v4 answer to preparing an INSERT of five columns
// into a table whose partition key is (b, a).
func preparedBody(tb testing.TB) []byte {
	var cols []*message.ColumnMetadata
	for i, typ := range []datatype.DataType{datatype.Varchar, datatype.Bigint, datatype.Timestamp, datatype.NewMap(datatype.Varchar, datatype.Int), datatype.Blob} {
		cols = append(cols, &message.ColumnMetadata{Keyspace: "app", Table: "events", Name: string(rune('a' + i)), Index: int32(i), Type: typ})
	}
	return oracleBody(tb, 4, &message.PreparedResult{
		PreparedQueryId:   bytes.Repeat([]byte{0x5A}, 16),
		VariablesMetadata: &message.VariablesMetadata{PkIndices: []uint16{1, 0}, Columns: cols},
		ResultMetadata:    &message.RowsMetadata{},
	})
}

func TestParsePreparedNoAllocation(t *testing.T) {
	body := preparedBody(t)
	allocs := testing.AllocsPerRun(100, func() {
		p, err := ParsePrepared(body, 4)
		if err != nil {
			panic(err)
		}
		for i := range p.PKIndexes.Len() {
			if _, ok := p.Variables.At(int(p.PKIndexes.At(i))); !ok {
				panic("no variable")
			}
		}
		for _, ok := p.Variables.Next(); ok; _, ok = p.Variables.Next() {
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per run, want 0", allocs)
	}
}

func BenchmarkParsePrepared(b *testing.B) {
	body := preparedBody(b)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		p, err := ParsePrepared(body, 4)
		if err != nil || p.PKIndexes.Len() != 2 || len(p.Table) == 0 {
			b.Fatal(p, err)
		}
	}
}

func FuzzParsePrepared(f *testing.F) {
	for _, v := range parseVersions {
		for i, m := range oraclePrepared(f, v) {
			if i%4 == 0 {
				f.Add(oracleBody(f, v, m), v)
			}
		}
	}
	f.Add(preparedBody(f), uint8(4))
	f.Fuzz(func(t *testing.T, body []byte, v uint8) {
		p, err := ParsePrepared(body, v)
		if err != nil {
			return
		}
		marked, err := AppendPreparedLWT(nil, Header{Version: v, Response: true, Opcode: OpResult}, body)
		if err != nil {
			t.Fatalf("marking a body ParsePrepared takes: %v", err)
		}
		if m, err := ParsePrepared(marked[HeaderSize:], v); err != nil || !m.LWT || !bytes.Equal(m.ID, p.ID) {
			t.Fatalf("marked: %+v, %v", m, err)
		}
		for i := range p.PKIndexes.Len() {
			if int(p.PKIndexes.At(i)) >= p.Variables.Len() {
				t.Fatalf("pk index %d past %d variables", p.PKIndexes.At(i), p.Variables.Len())
			}
		}
		for _, cs := range []Columns{p.Variables, p.Result} {
			n := 0
			for col, ok := cs.Next(); ok; col, ok = cs.Next() {
				if k, err := SkipTypeSpec(col.Type); err != nil || k != len(col.Type) {
					t.Fatalf("column %d type % x: %d, %v", n, col.Type, k, err)
				}
				n++
			}
			if n != cs.Len() {
				t.Fatalf("%d columns, Len %d", n, cs.Len())
			}
		}
	})
}

func FuzzSkipTypeSpec(f *testing.F) {
	for _, typ := range oracleTypes(f, 5) {
		f.Add(oracleType(f, typ, 5))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := SkipTypeSpec(b)
		if err == nil && (n < 2 || n > len(b)) {
			t.Fatalf("SkipTypeSpec = %d of %d bytes", n, len(b))
		}
		if len(b) >= 2 && binary.BigEndian.Uint16(b) == 0x0009 && (err != nil || n != 2) {
			t.Fatalf("int: %d, %v", n, err)
		}
	})
}
