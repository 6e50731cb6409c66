package frame

// Tests of the QUERY, EXECUTE and BATCH decoders against the oracle: every
// combination of query options it can encode, in v3, v4 and v5, must
// decode here field by field, and every truncation must be an error.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	pframe "github.com/datastax/go-cassandra-native-protocol/frame"
	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"
)

var parseVersions = []uint8{3, 4, 5}

// oracleBody returns the body of msg as the oracle encodes it in version v.
func oracleBody(tb testing.TB, v uint8, msg message.Message) []byte {
	tb.Helper()
	var b bytes.Buffer
	if err := pframe.NewCodec().EncodeFrame(pframe.NewFrame(primitive.ProtocolVersion(v), 1, msg), &b); err != nil {
		tb.Fatalf("oracle encoding %v in v%d: %v", msg, v, err)
	}
	return b.Bytes()[HeaderSize:]
}

// oraclePositional returns positional values of every kind valid in v.
func oraclePositional(v uint8) []*primitive.Value {
	vals := []*primitive.Value{
		primitive.NewValue([]byte{0, 0, 0, 7}),
		primitive.NewValue([]byte{}),
		primitive.NewNullValue(),
		primitive.NewValue(bytes.Repeat([]byte("blob"), 100)),
	}
	if v >= 4 {
		vals = append(vals, primitive.NewUnsetValue())
	}
	return vals
}

// oracleNamed returns named values of every kind valid in v.
func oracleNamed(v uint8) map[string]*primitive.Value {
	vals := map[string]*primitive.Value{
		"k":     primitive.NewValue([]byte{0, 0, 0, 7}),
		"empty": primitive.NewValue([]byte{}),
		"n":     primitive.NewNullValue(),
	}
	if v >= 4 {
		vals["u"] = primitive.NewUnsetValue()
	}
	return vals
}

// oracleOptions returns query options with every combination of the
// optional fields valid in protocol version v.
func oracleOptions(v uint8) []*message.QueryOptions {
	serial := primitive.ConsistencyLevelLocalSerial
	ts := int64(1_700_000_000_123_456)
	now := int32(1_700_000_000)
	var out []*message.QueryOptions
	for values := range 3 {
		for mask := range 1 << 7 {
			has := func(bit int) bool { return mask&(1<<bit) != 0 }
			if v < 5 && (has(5) || has(6)) {
				continue // keyspace and now in seconds are v5 flags
			}
			o := &message.QueryOptions{Consistency: primitive.ConsistencyLevelLocalQuorum}
			switch values {
			case 1:
				o.PositionalValues = oraclePositional(v)
			case 2:
				o.NamedValues = oracleNamed(v)
			}
			o.SkipMetadata = has(0)
			if has(1) {
				o.PageSize = 5000
			}
			if has(2) {
				o.PagingState = []byte{0xCA, 0xFE, 0, 1}
			}
			if has(3) {
				o.SerialConsistency = &serial
			}
			if has(4) {
				o.DefaultTimestamp = &ts
			}
			if has(5) {
				o.Keyspace = "ks1"
			}
			if has(6) {
				o.NowInSeconds = &now
			}
			out = append(out, o)
		}
	}
	return out
}

func wantKind(pv *primitive.Value) ValueKind {
	switch pv.Type {
	case primitive.ValueTypeNull:
		return ValueNull
	case primitive.ValueTypeUnset:
		return ValueNotSet
	}
	return ValueSet
}

func sameValue(got Value, name string, pv *primitive.Value) bool {
	return string(got.Name) == name && got.Kind == wantKind(pv) && bytes.Equal(got.Bytes, pv.Contents) &&
		(got.Kind == ValueSet) == (got.Bytes != nil)
}

// checkValues compares decoded values with the oracle's, through Next, At
// and Lookup.
func checkValues(t *testing.T, what string, vs Values, positional []*primitive.Value, named map[string]*primitive.Value) {
	t.Helper()
	if named != nil {
		if !vs.Named() || vs.Len() != len(named) {
			t.Fatalf("%s: named %v, %d values; want %d named", what, vs.Named(), vs.Len(), len(named))
		}
		seen := 0
		for it := vs; ; seen++ {
			got, ok := it.Next()
			if !ok {
				break
			}
			if pv, found := named[string(got.Name)]; !found || !sameValue(got, string(got.Name), pv) {
				t.Fatalf("%s: value %d = %+v", what, seen, got)
			}
		}
		if seen != len(named) {
			t.Fatalf("%s: Next returned %d values, want %d", what, seen, len(named))
		}
		for name, pv := range named {
			if got, ok := vs.Lookup([]byte(name)); !ok || !sameValue(got, name, pv) {
				t.Fatalf("%s: Lookup(%q) = %+v, %v", what, name, got, ok)
			}
		}
		if _, ok := vs.Lookup([]byte("missing")); ok {
			t.Fatalf("%s: Lookup found a missing name", what)
		}
		return
	}
	if vs.Named() || vs.Len() != len(positional) {
		t.Fatalf("%s: named %v, %d values; want %d positional", what, vs.Named(), vs.Len(), len(positional))
	}
	it := vs
	for i, pv := range positional {
		if got, ok := it.Next(); !ok || !sameValue(got, "", pv) {
			t.Fatalf("%s: Next value %d = %+v, %v; want %v", what, i, got, ok, pv)
		}
	}
	if _, ok := it.Next(); ok {
		t.Fatalf("%s: Next returned more than %d values", what, len(positional))
	}
	for i := len(positional) - 1; i >= 0; i-- {
		if got, ok := it.At(i); !ok || !sameValue(got, "", positional[i]) {
			t.Fatalf("%s: At(%d) = %+v, %v", what, i, got, ok)
		}
	}
	for _, i := range []int{-1, len(positional)} {
		if _, ok := vs.At(i); ok {
			t.Fatalf("%s: At(%d) found a value", what, i)
		}
	}
	if _, ok := vs.Lookup([]byte("k")); ok {
		t.Fatalf("%s: Lookup found a name among positional values", what)
	}
}

// checkTimestampAt checks that q's TimestampAt is where body holds its
// timestamp.
func checkTimestampAt(t *testing.T, what string, q Query, body []byte) {
	t.Helper()
	if !q.HasTimestamp() {
		return
	}
	if q.TimestampAt <= 0 || q.TimestampAt+8 > len(body) || int64(binary.BigEndian.Uint64(body[q.TimestampAt:])) != q.Timestamp {
		t.Fatalf("%s: TimestampAt %d does not hold timestamp %d in %x", what, q.TimestampAt, q.Timestamp, body)
	}
}

// checkOptions compares the decoded parameters of q with the oracle's.
func checkOptions(t *testing.T, what string, q Query, o *message.QueryOptions, v uint8) {
	t.Helper()
	flags := uint32(o.Flags())
	if v < 5 {
		flags &= 0xff
	}
	wantPage := int32(-1)
	if o.PageSize > 0 {
		wantPage = o.PageSize
	}
	var serial uint16
	if o.SerialConsistency != nil {
		serial = uint16(*o.SerialConsistency)
	}
	var ts int64
	if o.DefaultTimestamp != nil {
		ts = *o.DefaultTimestamp
	}
	var now int32
	if o.NowInSeconds != nil {
		now = *o.NowInSeconds
	}
	if q.Consistency != uint16(o.Consistency) || q.Flags != flags || q.PageSize != wantPage ||
		!bytes.Equal(q.PagingState, o.PagingState) || q.SerialConsistency != serial ||
		q.HasTimestamp() != (o.DefaultTimestamp != nil) || q.Timestamp != ts ||
		string(q.Keyspace) != o.Keyspace || q.NowInSeconds != now {
		t.Fatalf("%s: got %+v\nwant %v", what, q, o)
	}
	if q.Flags&QueryFlagSkipMetadata != 0 != o.SkipMetadata {
		t.Fatalf("%s: skip metadata %v, want %v", what, !o.SkipMetadata, o.SkipMetadata)
	}
	checkValues(t, what, q.Values, o.PositionalValues, o.NamedValues)
}

// checkTruncations checks that every strict prefix of body fails to parse
// with ErrShortBody.
func checkTruncations(t *testing.T, what string, body []byte, parse func([]byte) error) {
	t.Helper()
	for n := range len(body) {
		if err := parse(body[:n:n]); !errors.Is(err, ErrShortBody) {
			t.Fatalf("%s: truncated to %d of %d bytes: %v", what, n, len(body), err)
		}
	}
}

func TestParseQueryOracle(t *testing.T) {
	for _, v := range parseVersions {
		for i, o := range oracleOptions(v) {
			what := fmt.Sprintf("v%d QUERY %d %v", v, i, o)
			text := "SELECT * FROM ks.t WHERE k = ?"
			body := oracleBody(t, v, &message.Query{Query: text, Options: o})
			q, err := ParseQuery(body, v)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if string(q.Text) != text || q.ID != nil || q.ResultMetadataID != nil {
				t.Fatalf("%s: text %q, id %x, result metadata id %x", what, q.Text, q.ID, q.ResultMetadataID)
			}
			checkOptions(t, what, q, o, v)
			checkTimestampAt(t, what, q, body)
			checkTruncations(t, what, body, func(b []byte) error { _, err := ParseQuery(b, v); return err })
		}
	}
}

func TestParseExecuteOracle(t *testing.T) {
	for _, v := range parseVersions {
		for i, o := range oracleOptions(v) {
			what := fmt.Sprintf("v%d EXECUTE %d %v", v, i, o)
			msg := &message.Execute{QueryId: []byte{0xAB, 1, 2, 3, 4, 5, 6, 7}, Options: o}
			if v >= 5 {
				msg.ResultMetadataId = []byte{9, 8, 7}
			}
			body := oracleBody(t, v, msg)
			q, err := ParseExecute(body, v)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if q.Text != nil || !bytes.Equal(q.ID, msg.QueryId) || !bytes.Equal(q.ResultMetadataID, msg.ResultMetadataId) {
				t.Fatalf("%s: text %q, id %x, result metadata id %x", what, q.Text, q.ID, q.ResultMetadataID)
			}
			checkOptions(t, what, q, o, v)
			checkTimestampAt(t, what, q, body)
			checkTruncations(t, what, body, func(b []byte) error { _, err := ParseExecute(b, v); return err })
		}
	}
}

// oracleBatches returns batches of every type with statements of both
// kinds and every combination of the trailer's fields valid in v.
func oracleBatches(v uint8) []*message.Batch {
	serial := primitive.ConsistencyLevelSerial
	ts := int64(-5) // negative timestamps are discouraged, not refused
	now := int32(42)
	children := []*message.BatchChild{
		{Query: "INSERT INTO ks.t (k, v) VALUES (?, ?)", Values: []*primitive.Value{
			primitive.NewValue([]byte{0, 0, 0, 1}), primitive.NewValue([]byte("v"))}},
		{Id: []byte{1, 2, 3, 4}, Values: oraclePositional(v)},
		{Query: "UPDATE ks.t SET v = 'x' WHERE k = 2"},
		{Id: []byte{5}, Values: []*primitive.Value{primitive.NewNullValue()}},
	}
	var out []*message.Batch
	for _, typ := range []primitive.BatchType{primitive.BatchTypeLogged, primitive.BatchTypeUnlogged, primitive.BatchTypeCounter} {
		for mask := range 1 << 4 {
			has := func(bit int) bool { return mask&(1<<bit) != 0 }
			if v < 5 && (has(2) || has(3)) {
				continue
			}
			b := &message.Batch{Type: typ, Children: children, Consistency: primitive.ConsistencyLevelEachQuorum}
			if mask == 0 {
				b.Children = children[:1]
			}
			if has(0) {
				b.SerialConsistency = &serial
			}
			if has(1) {
				b.DefaultTimestamp = &ts
			}
			if has(2) {
				b.Keyspace = "other_ks"
			}
			if has(3) {
				b.NowInSeconds = &now
			}
			out = append(out, b)
		}
	}
	return append(out, &message.Batch{Type: primitive.BatchTypeUnlogged, Consistency: primitive.ConsistencyLevelOne})
}

func TestParseBatchOracle(t *testing.T) {
	for _, v := range parseVersions {
		for i, m := range oracleBatches(v) {
			what := fmt.Sprintf("v%d BATCH %d", v, i)
			body := oracleBody(t, v, m)
			b, err := ParseBatch(body, v)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			var serial uint16
			if m.SerialConsistency != nil {
				serial = uint16(*m.SerialConsistency)
			}
			var ts int64
			if m.DefaultTimestamp != nil {
				ts = *m.DefaultTimestamp
			}
			var now int32
			if m.NowInSeconds != nil {
				now = *m.NowInSeconds
			}
			if b.Type != BatchType(m.Type) || b.Consistency != uint16(m.Consistency) || b.Flags != uint32(m.Flags()) ||
				b.SerialConsistency != serial || b.HasTimestamp() != (m.DefaultTimestamp != nil) || b.Timestamp != ts ||
				string(b.Keyspace) != m.Keyspace || b.NowInSeconds != now || b.Len() != len(m.Children) {
				t.Fatalf("%s: got %+v\nwant %+v", what, b, m)
			}
			for j, child := range m.Children {
				s, ok := b.Next()
				if !ok || s.Prepared != (child.Query == "") || string(s.Text) != child.Query || !bytes.Equal(s.ID, child.Id) {
					t.Fatalf("%s: statement %d = %+v, %v; want %+v", what, j, s, ok, child)
				}
				checkValues(t, fmt.Sprintf("%s statement %d", what, j), s.Values, child.Values, nil)
			}
			if s, ok := b.Next(); ok {
				t.Fatalf("%s: extra statement %+v", what, s)
			}
			checkTruncations(t, what, body, func(b []byte) error { _, err := ParseBatch(b, v); return err })
		}
	}
}

// params builds query parameters by hand, for layouts the oracle does not
// write.
func params(v uint8, consistency uint16, flags uint32, rest ...[]byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, consistency)
	if v >= 5 {
		b = binary.BigEndian.AppendUint32(b, flags)
	} else {
		b = append(b, byte(flags))
	}
	return append(b, bytes.Join(rest, nil)...)
}

func wireInt(n int32) []byte     { return binary.BigEndian.AppendUint32(nil, uint32(n)) }
func wireShort(n uint16) []byte  { return binary.BigEndian.AppendUint16(nil, n) }
func wireString(s string) []byte { return append(wireShort(uint16(len(s))), s...) }

func TestParseQueryLayouts(t *testing.T) {
	text := append(wireInt(1), 'x')
	tests := []struct {
		name    string
		v       uint8
		body    []byte
		values  []Value // nil: do not check
		ks      string
		wantErr error
	}{
		{"v3 negative lengths are null", 3, append(text, params(3, 1, QueryFlagValues, wireShort(3), wireInt(-1), wireInt(-2), wireInt(-100))...),
			[]Value{{Kind: ValueNull}, {Kind: ValueNull}, {Kind: ValueNull}}, "", nil},
		{"v4 not set", 4, append(text, params(4, 1, QueryFlagValues, wireShort(2), wireInt(-2), wireInt(0))...),
			[]Value{{Kind: ValueNotSet}, {Bytes: []byte{}}}, "", nil},
		{"v4 length -3", 4, append(text, params(4, 1, QueryFlagValues, wireShort(1), wireInt(-3))...), nil, "", ErrMalformed},
		{"v3 named values", 3, append(text, params(3, 1, QueryFlagValues|QueryFlagValueNames, wireShort(1), wireString("a"), wireInt(1), []byte{9})...),
			[]Value{{Name: []byte("a"), Bytes: []byte{9}}}, "", nil},
		{"names flag without values", 4, append(text, params(4, 1, QueryFlagValueNames)...), []Value{}, "", nil},
		{"v4 keyspace bit", 4, append(text, params(4, 1, QueryFlagWithKeyspace, wireString("ks"))...), []Value{}, "ks", nil},
		{"v5 unknown bits and trailing bytes", 5, append(text, params(5, 1, 0x0200|0x4000_0000|QueryFlagWithKeyspace, wireString("ks"), []byte{1, 2, 3})...),
			[]Value{}, "ks", nil},
		{"negative long string", 4, append(wireInt(-1), params(4, 1, 0)...), nil, "", ErrMalformed},
		{"value past the body", 4, append(text, params(4, 1, QueryFlagValues, wireShort(1), wireInt(5), []byte{1})...), nil, "", ErrShortBody},
		{"fewer values than announced", 4, append(text, params(4, 1, QueryFlagValues, wireShort(2), wireInt(0))...), nil, "", ErrShortBody},
		{"empty", 4, nil, nil, "", ErrShortBody},
	}
	for _, tt := range tests {
		q, err := ParseQuery(tt.body, tt.v)
		if tt.wantErr != nil {
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("%s: error %v, want %v", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil || string(q.Keyspace) != tt.ks || q.Values.Len() != len(tt.values) {
			t.Errorf("%s: %+v, %v", tt.name, q, err)
			continue
		}
		for i, want := range tt.values {
			got, ok := q.Values.At(i)
			if !ok || !bytes.Equal(got.Name, want.Name) || !bytes.Equal(got.Bytes, want.Bytes) || got.Kind != want.Kind ||
				(got.Bytes == nil) != (want.Bytes == nil) {
				t.Errorf("%s: value %d = %+v, want %+v", tt.name, i, got, want)
			}
		}
	}
}

func TestParseBatchLayouts(t *testing.T) {
	stmt := append([]byte{1}, wireString("id")...) // prepared, id "id"
	tests := []struct {
		name    string
		v       uint8
		body    []byte
		n       int
		ks      string
		wantErr error
	}{
		// The spec's 0x40 flag cannot apply to the statements before it:
		// their values stay positional, as Cassandra reads them.
		{"names flag", 4, bytes.Join([][]byte{{1}, wireShort(1), stmt, wireShort(1), wireInt(1), {7}, params(4, 1, QueryFlagValueNames)}, nil), 1, "", nil},
		{"v4 keyspace bit", 4, bytes.Join([][]byte{{0}, wireShort(0), params(4, 1, QueryFlagWithKeyspace, wireString("ks"))}, nil), 0, "ks", nil},
		{"values bit in the trailer", 5, bytes.Join([][]byte{{0}, wireShort(0), params(5, 1, QueryFlagValues|QueryFlagWithKeyspace, wireShort(1), wireInt(-1), wireString("ks"))}, nil), 0, "ks", nil},
		{"unknown type", 4, bytes.Join([][]byte{{7}, wireShort(0), params(4, 1, 0)}, nil), 0, "", nil},
		{"unknown statement kind", 4, bytes.Join([][]byte{{0}, wireShort(1), {2}, wireString("id"), wireShort(0), params(4, 1, 0)}, nil), 0, "", ErrMalformed},
		{"no trailer", 4, bytes.Join([][]byte{{0}, wireShort(1), stmt, wireShort(0)}, nil), 0, "", ErrShortBody},
	}
	for _, tt := range tests {
		b, err := ParseBatch(tt.body, tt.v)
		if tt.wantErr != nil {
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("%s: error %v, want %v", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil || string(b.Keyspace) != tt.ks || b.Len() != tt.n {
			t.Errorf("%s: %+v, %v", tt.name, b, err)
			continue
		}
		for i := range tt.n {
			if s, ok := b.Next(); !ok || s.Values.Named() {
				t.Errorf("%s: statement %d = %+v, %v", tt.name, i, s, ok)
			}
		}
	}
}

// executeBody is an EXECUTE of a statement with three bound values, the
// first two the partition key, as a v4 driver sends it.
func executeBody(tb testing.TB) []byte {
	return oracleBody(tb, 4, &message.Execute{QueryId: bytes.Repeat([]byte{0x5A}, 16), Options: &message.QueryOptions{
		Consistency: primitive.ConsistencyLevelLocalQuorum,
		PositionalValues: []*primitive.Value{
			primitive.NewValue([]byte("user-123")),
			primitive.NewValue([]byte{0, 0, 0, 0, 0, 0, 0, 42}),
			primitive.NewValue([]byte("some payload")),
		},
		PageSize:         5000,
		DefaultTimestamp: new(int64),
	}})
}

func batchBody(tb testing.TB) []byte {
	return oracleBody(tb, 4, oracleBatches(4)[1])
}

func TestRequestNoAllocation(t *testing.T) {
	exec, batch := executeBody(t), batchBody(t)
	allocs := testing.AllocsPerRun(100, func() {
		q, err := ParseExecute(exec, 4)
		if err != nil {
			panic(err)
		}
		if _, ok := q.Values.At(1); !ok {
			panic("no value 1")
		}
		if _, ok := q.Values.At(0); !ok {
			panic("no value 0")
		}
		b, err := ParseBatch(batch, 4)
		if err != nil {
			panic(err)
		}
		for s, ok := b.Next(); ok; s, ok = b.Next() {
			for _, ok := s.Values.Next(); ok; _, ok = s.Values.Next() {
			}
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per run, want 0", allocs)
	}
}

func BenchmarkParseExecute(b *testing.B) {
	body := executeBody(b)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		q, err := ParseExecute(body, 4)
		if err != nil {
			b.Fatal(err)
		}
		k0, _ := q.Values.At(0)
		k1, _ := q.Values.At(1)
		if len(k0.Bytes)+len(k1.Bytes) != 16 {
			b.Fatal("wrong values")
		}
	}
}

func BenchmarkParseBatch(b *testing.B) {
	body := batchBody(b)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		batch, err := ParseBatch(body, 4)
		if err != nil {
			b.Fatal(err)
		}
		for s, ok := batch.Next(); ok; s, ok = batch.Next() {
			if _, ok := s.Values.At(0); !ok && s.Values.Len() > 0 {
				b.Fatal("no value")
			}
		}
	}
}

// fuzzRequestSeeds adds oracle encodings of msgs in every version.
func fuzzRequestSeeds(f *testing.F, msgs func(v uint8) []message.Message) {
	for _, v := range parseVersions {
		for _, m := range msgs(v) {
			f.Add(oracleBody(f, v, m), v)
		}
	}
}

// drainValues iterates over vs and fails unless it yields Len values that
// lie inside body.
func drainValues(t *testing.T, vs Values, body []byte) {
	n := 0
	for v, ok := vs.Next(); ok; v, ok = vs.Next() {
		if len(v.Name)+len(v.Bytes) > len(body) || (v.Kind == ValueSet) != (v.Bytes != nil) {
			t.Fatalf("value %d = %+v", n, v)
		}
		n++
	}
	if n != vs.Len() {
		t.Fatalf("%d values, Len %d", n, vs.Len())
	}
}

func someOptions(v uint8) []message.Message {
	var msgs []message.Message
	for i, o := range oracleOptions(v) {
		if i%37 == 0 {
			msgs = append(msgs, &message.Query{Query: "SELECT * FROM t WHERE k = :k", Options: o})
		}
	}
	return msgs
}

func FuzzParseQuery(f *testing.F) {
	fuzzRequestSeeds(f, someOptions)
	f.Fuzz(func(t *testing.T, body []byte, v uint8) {
		q, err := ParseQuery(body, v)
		if err != nil {
			return
		}
		if len(q.Text) > len(body) {
			t.Fatal("text past the body")
		}
		drainValues(t, q.Values, body)
	})
}

func FuzzParseExecute(f *testing.F) {
	fuzzRequestSeeds(f, func(v uint8) []message.Message {
		var msgs []message.Message
		for _, m := range someOptions(v) {
			msgs = append(msgs, &message.Execute{QueryId: []byte{1, 2, 3}, ResultMetadataId: []byte{4}, Options: m.(*message.Query).Options})
		}
		return msgs
	})
	f.Fuzz(func(t *testing.T, body []byte, v uint8) {
		q, err := ParseExecute(body, v)
		if err != nil {
			return
		}
		if len(q.ID)+len(q.ResultMetadataID) > len(body) {
			t.Fatal("id past the body")
		}
		drainValues(t, q.Values, body)
	})
}

func FuzzParseBatch(f *testing.F) {
	fuzzRequestSeeds(f, func(v uint8) []message.Message {
		var msgs []message.Message
		for i, b := range oracleBatches(v) {
			if i%5 == 0 {
				msgs = append(msgs, b)
			}
		}
		return msgs
	})
	f.Fuzz(func(t *testing.T, body []byte, v uint8) {
		b, err := ParseBatch(body, v)
		if err != nil {
			return
		}
		n := 0
		for s, ok := b.Next(); ok; s, ok = b.Next() {
			if len(s.Text)+len(s.ID) > len(body) || s.Prepared != (s.ID != nil) {
				t.Fatalf("statement %d = %+v", n, s)
			}
			drainValues(t, s.Values, body)
			n++
		}
		if n != b.Len() {
			t.Fatalf("%d statements, Len %d", n, b.Len())
		}
	})
}
