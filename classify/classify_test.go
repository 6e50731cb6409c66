package classify

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	pframe "github.com/datastax/go-cassandra-native-protocol/frame"
	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"

	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/schema"
)

func testSnapshot(t testing.TB) *schema.Snapshot {
	typ := func(s string) schema.Type {
		ty, err := schema.ParseType(s, nil, "ks")
		if err != nil {
			t.Fatal(err)
		}
		return ty
	}
	return schema.NewSnapshot([]*schema.Table{
		{Keyspace: "ks", Name: "kv", PartitionKey: []schema.Column{{Name: "k", Type: typ("int")}}},
		{Keyspace: "ks", Name: "comp", PartitionKey: []schema.Column{{Name: "a", Type: typ("int")}, {Name: "b", Type: typ("text")}}},
		{Keyspace: "ks", Name: "counts", PartitionKey: []schema.Column{{Name: "k", Type: typ("text")}}, Counter: true},
		{Keyspace: "Ks", Name: "Tab", PartitionKey: []schema.Column{{Name: "Key", Type: typ("bigint")}}},
	})
}

func intBytes(v int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }

func tokenOf(components ...[]byte) int64 {
	var k schema.KeyBuilder
	for _, c := range components {
		k.Add(c)
	}
	return k.Token()
}

// encodeBody encodes msg with the oracle and returns its body.
func encodeBody(t testing.TB, v primitive.ProtocolVersion, msg message.Message) []byte {
	var b bytes.Buffer
	if err := pframe.NewCodec().EncodeFrame(pframe.NewFrame(v, 1, msg), &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()[frame.HeaderSize:]
}

// classifyMsg classifies msg, encoded at version v by the oracle, with c
// against env.
func classifyMsg(t testing.TB, c *Classifier, env Env, v primitive.ProtocolVersion, msg message.Message) *Classification {
	t.Helper()
	h := frame.Header{Version: uint8(v), Opcode: frame.Opcode(msg.GetOpCode())}
	got, err := c.Classify(h, encodeBody(t, v, msg), &env)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// queryMsg is a QUERY of text with values bound by position.
func queryMsg(text string, values ...*primitive.Value) *message.Query {
	return &message.Query{Query: text, Options: &message.QueryOptions{PositionalValues: values}}
}

// executeMsg is an EXECUTE of the statement prepared as id with values
// bound by position.
func executeMsg(id []byte, values ...*primitive.Value) *message.Execute {
	return &message.Execute{QueryId: id, Options: &message.QueryOptions{PositionalValues: values}}
}

func TestClassifyQuery(t *testing.T) {
	snap := testSnapshot(t)
	k1, k2 := tokenOf(intBytes(1)), tokenOf(intBytes(2))
	ab := tokenOf(intBytes(7), []byte("x"))
	tests := []struct {
		q        string
		values   []*primitive.Value
		op       Op
		pinned   bool
		internal bool
		lwt      bool
		counter  bool
		tokens   []int64
	}{
		{q: "SELECT * FROM ks.kv WHERE k = 1", op: OpRead, pinned: true, tokens: []int64{k1}},
		{q: "SELECT * FROM ks.kv WHERE k IN (1, 2, 1)", op: OpRead, pinned: true, tokens: []int64{k1, k2}},
		{q: "SELECT * FROM ks.kv WHERE k = ?", values: []*primitive.Value{primitive.NewValue(intBytes(2))}, op: OpRead, pinned: true, tokens: []int64{k2}},
		{q: "SELECT * FROM ks.kv WHERE k = ?", values: []*primitive.Value{primitive.NewNullValue()}, op: OpRead},
		{q: "SELECT * FROM ks.kv", op: OpRead},
		{q: "SELECT * FROM ks.kv WHERE token(k) > 5", op: OpRead},
		{q: "SELECT * FROM ks.unknown WHERE k = 1", op: OpRead},
		{q: "INSERT INTO ks.kv (k, v) VALUES (2, 'x')", op: OpWrite, pinned: true, tokens: []int64{k2}},
		{q: "INSERT INTO ks.kv (k, v) VALUES (2, 'x') IF NOT EXISTS", op: OpWrite, pinned: true, lwt: true, tokens: []int64{k2}},
		{q: "UPDATE ks.comp SET v = 1 WHERE a = 7 AND b = 'x'", op: OpWrite, pinned: true, tokens: []int64{ab}},
		// A ':' in a map or user type literal is no marker: the key's ? is
		// the first (it was taken for the second, past the values bound,
		// and the write went through unlimited).
		{q: "INSERT INTO ks.kv (m, k) VALUES ({'a':1}, ?)", values: []*primitive.Value{primitive.NewValue(intBytes(2))}, op: OpWrite, pinned: true, tokens: []int64{k2}},
		{q: "UPDATE ks.kv SET u = {f:true} WHERE k = ?", values: []*primitive.Value{primitive.NewValue(intBytes(2))}, op: OpWrite, pinned: true, tokens: []int64{k2}},
		{q: "UPDATE ks.comp SET v = 1 WHERE a = 7", op: OpWrite},
		{q: "DELETE FROM ks.comp WHERE b = ? AND a = ?", values: []*primitive.Value{primitive.NewValue([]byte("x")), primitive.NewValue(intBytes(7))}, op: OpWrite, pinned: true, tokens: []int64{ab}},
		{q: "UPDATE ks.counts SET n = n + 1 WHERE k = 'a'", op: OpWrite, pinned: true, counter: true, tokens: []int64{tokenOf([]byte("a"))}},
		{q: `SELECT * FROM "Ks"."Tab" WHERE "Key" = 5`, op: OpRead, pinned: true, tokens: []int64{tokenOf(binary.BigEndian.AppendUint64(nil, 5))}},
		{q: "SELECT * FROM system.local WHERE key = 'local'", op: OpRead, internal: true},
		{q: "SELECT * FROM system_schema.tables", op: OpRead, internal: true},
		{q: "CREATE TABLE ks.x (k int PRIMARY KEY)", op: OpNone},
		{q: "BEGIN BATCH INSERT INTO ks.kv (k) VALUES (1); INSERT INTO ks.kv (k) VALUES (?); UPDATE ks.kv SET v = 1 WHERE k = 1 APPLY BATCH",
			values: []*primitive.Value{primitive.NewValue(intBytes(2))}, op: OpWrite, pinned: true, tokens: []int64{k1, k2}},
	}
	for _, v := range []primitive.ProtocolVersion{3, 4, 5} {
		var c Classifier
		for _, tt := range tests {
			got := classifyMsg(t, &c, Env{Schema: snap}, v, queryMsg(tt.q, tt.values...))
			if got.Op != tt.op || got.Pinned != tt.pinned || got.Internal != tt.internal || got.LWT != tt.lwt || got.Counter != tt.counter {
				t.Errorf("v%d %q: %+v", v, tt.q, *got)
				continue
			}
			var tokens []int64
			for _, p := range got.Partitions {
				tokens = append(tokens, p.Token)
			}
			if len(tokens) != len(tt.tokens) {
				t.Errorf("v%d %q: tokens %v, want %v", v, tt.q, tokens, tt.tokens)
				continue
			}
			for i := range tokens {
				if tokens[i] != tt.tokens[i] {
					t.Errorf("v%d %q: tokens %v, want %v", v, tt.q, tokens, tt.tokens)
				}
			}
		}
	}
}

func TestClassifyUseKeyspace(t *testing.T) {
	env := Env{Schema: testSnapshot(t)}
	var c Classifier
	query := func(q string) *Classification { return classifyMsg(t, &c, env, 4, queryMsg(q)) }
	if got := query("SELECT * FROM kv WHERE k = 1"); got.Pinned {
		t.Error("unqualified table pinned before USE")
	}
	// A USE only marks the request: the keyspace is the upstream's answer's,
	// given to the classifier with each request.
	if got := query("USE ks"); !got.Use {
		t.Error("USE not marked")
	}
	if got := query("SELECT * FROM kv WHERE k = 1"); got.Pinned || got.Use {
		t.Errorf("pinned by a USE not answered yet: %+v", *got)
	}
	env.Keyspace = []byte("ks")
	if got := query("SELECT * FROM kv WHERE k = 1"); !got.Pinned || got.Partitions[0].Token != tokenOf(intBytes(1)) {
		t.Errorf("in keyspace ks: %+v", *got)
	}
}

func TestClassifyExecuteAndBatch(t *testing.T) {
	snap := testSnapshot(t)
	reg := NewRegistry(100, 0)
	env := Env{Schema: snap, Prepared: reg}
	var c Classifier
	// Prepared from the text, with the schema.
	p := c.prepare([]byte("UPDATE ks.comp SET v = ? WHERE b = ? AND a = 7"), nil, snap)
	reg.put([]byte{1}, p)
	// Known only by the upstream's partition key indexes.
	q := &Prepared{op: OpWrite, keyspace: []byte("ks"), tableName: []byte("kv"), sources: [][]pkSource{{{index: 1}}}}
	reg.put([]byte{2}, q)

	execute := executeMsg([]byte{1}, primitive.NewValue(intBytes(0)), primitive.NewValue([]byte("x")))
	got := classifyMsg(t, &c, env, 4, execute)
	want := tokenOf(intBytes(7), []byte("x"))
	if !got.Pinned || got.Op != OpWrite || len(got.Partitions) != 1 || got.Partitions[0].Token != want || got.Prepared != p {
		t.Fatalf("EXECUTE: %+v", *got)
	}
	h, body := frame.Header{Version: 4, Opcode: frame.OpExecute}, encodeBody(t, 4, execute)
	if n := testing.AllocsPerRun(100, func() { c.Classify(h, body, &env) }); n != 0 {
		t.Errorf("classifying an EXECUTE allocates %v times", n)
	}
	if got := classifyMsg(t, &c, env, 4, executeMsg([]byte{9})); string(got.Unprepared) != "\x09" {
		t.Errorf("EXECUTE of an unknown id: %+v", *got)
	}

	got = classifyMsg(t, &c, env, 4, &message.Batch{Type: primitive.BatchTypeUnlogged, Children: []*message.BatchChild{
		{Id: []byte{1}, Values: []*primitive.Value{primitive.NewValue(intBytes(0)), primitive.NewValue([]byte("x"))}},
		{Id: []byte{2}, Values: []*primitive.Value{primitive.NewValue([]byte("v")), primitive.NewValue(intBytes(3))}},
		{Query: "INSERT INTO ks.kv (k) VALUES (3)"},
	}})
	if got.Unprepared != nil || !got.Pinned || !got.Batch || got.Logged || len(got.Partitions) != 2 {
		t.Fatalf("BATCH: %+v", *got)
	}
	if got.Partitions[1].Token != tokenOf(intBytes(3)) {
		t.Errorf("BATCH counted partition 3 twice or wrongly: %+v", got.Partitions)
	}
	// Its prepared statements, in order, for routing to prepare elsewhere.
	if len(got.BatchPrepared) != 2 || string(got.BatchPrepared[0].tableName) != "comp" || string(got.BatchPrepared[1].tableName) != "kv" {
		t.Errorf("BATCH's prepared statements %+v", got.BatchPrepared)
	}
	// Each partition keeps its own key, for /hot.
	for i, p := range got.Partitions {
		if schema.Token(p.Key) != p.Token {
			t.Errorf("BATCH partition %d: key %x does not hash to its token", i, p.Key)
		}
	}
	if !bytes.Equal(got.Partitions[1].Key, intBytes(3)) {
		t.Errorf("BATCH partition 1 key %x, want %x", got.Partitions[1].Key, intBytes(3))
	}

	batch := &message.Batch{Type: primitive.BatchTypeUnlogged, Children: []*message.BatchChild{
		{Id: []byte{1}, Values: []*primitive.Value{primitive.NewValue(intBytes(0)), primitive.NewValue([]byte("x"))}},
	}}
	h, body = frame.Header{Version: 4, Opcode: frame.OpBatch}, encodeBody(t, 4, batch)
	if n := testing.AllocsPerRun(100, func() { c.Classify(h, body, &env) }); n != 0 {
		t.Errorf("classifying a BATCH allocates %v times", n)
	}
	missing := &message.Batch{Type: primitive.BatchTypeLogged, Children: []*message.BatchChild{{Id: []byte{9}}}}
	if got := classifyMsg(t, &c, env, 4, missing); string(got.Unprepared) != "\x09" {
		t.Errorf("unknown child id %v", got.Unprepared)
	}
	if got := classifyMsg(t, &c, env, 4, execute); len(got.BatchPrepared) != 0 {
		t.Errorf("an EXECUTE after a BATCH keeps its statements: %+v", got.BatchPrepared)
	}
}

// A statement prepared before the classifier's schema knew its table is
// resolved by the first EXECUTE that sees a schema that does.
func TestPreparedResolvedLater(t *testing.T) {
	empty := schema.NewSnapshot(nil)
	snap := testSnapshot(t)
	reg := NewRegistry(100, 0)
	var c Classifier
	id := []byte{7}
	prepared := classifyMsg(t, &c, Env{Schema: empty, Keyspace: []byte("ks")}, 4, &message.Prepare{Query: "SELECT * FROM kv WHERE k = 5"})
	reg.put(id, prepared.Prepared)
	// Another connection, or a later USE.
	env := Env{Schema: empty, Prepared: reg, Keyspace: []byte("other")}
	if got := classifyMsg(t, &c, env, 4, executeMsg(id)); got.Pinned {
		t.Fatalf("pinned without a schema: %+v", *got)
	}
	env.Schema = snap
	got := classifyMsg(t, &c, env, 4, executeMsg(id))
	if !got.Pinned || len(got.Partitions) != 1 || got.Partitions[0].Token != tokenOf(intBytes(5)) {
		t.Fatalf("not resolved with the schema: %+v", *got)
	}
	p := reg.get(id)
	if p.sources == nil || p.unresolved {
		t.Errorf("registry keeps the unresolved statement: %+v", p)
	}
	// Resolved, it keeps its text, with which another node can be asked
	// to prepare it.
	if string(p.text) != "SELECT * FROM kv WHERE k = 5" {
		t.Errorf("resolved statement's text %q", p.text)
	}
}

// benchmarkClassify classifies msg, encoded at v4, against env.
func benchmarkClassify(b *testing.B, env Env, msg message.Message) {
	var c Classifier
	h, body := frame.Header{Version: 4, Opcode: frame.Opcode(msg.GetOpCode())}, encodeBody(b, 4, msg)
	b.ReportAllocs()
	for b.Loop() {
		c.Classify(h, body, &env)
	}
}

func BenchmarkClassifyExecute(b *testing.B) {
	snap := testSnapshot(b)
	reg := NewRegistry(100, 0)
	var c Classifier
	reg.put(make([]byte, 16), c.prepare([]byte("SELECT * FROM ks.comp WHERE a = ? AND b = ?"), nil, snap))
	benchmarkClassify(b, Env{Schema: snap, Prepared: reg}, &message.Execute{QueryId: make([]byte, 16), Options: &message.QueryOptions{
		Consistency:      primitive.ConsistencyLevelLocalQuorum,
		PositionalValues: []*primitive.Value{primitive.NewValue(intBytes(42)), primitive.NewValue([]byte("user:12345"))}}})
}

func BenchmarkClassifyInlineSelect(b *testing.B) {
	benchmarkClassify(b, Env{Schema: testSnapshot(b)}, queryMsg("SELECT v FROM ks.comp WHERE a = 42 AND b = 'user:12345'"))
}

func BenchmarkClassifyInlineInsert(b *testing.B) {
	benchmarkClassify(b, Env{Schema: testSnapshot(b)}, queryMsg("INSERT INTO ks.comp (a, b, v) VALUES (42, 'user:12345', 'some value') USING TTL 3600"))
}

// inList is a SELECT of table with an IN list of keys n distinct ints.
func inList(table string, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "SELECT v FROM %s WHERE k IN (", table)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, i)
	}
	b.WriteString(")")
	return b.String()
}

// Up to limits.max_partitions_per_request every partition of a request is
// pinned, duplicates once; past it, the request is marked as overflowing
// its table rather than left unpinned without a word.
func TestClassifyPartitionBound(t *testing.T) {
	snap := testSnapshot(t)
	kv := snap.Table([]byte("ks"), []byte("kv"))
	batch := func(n, each int) string {
		var b strings.Builder
		b.WriteString("BEGIN BATCH ")
		for i := range n {
			fmt.Fprintf(&b, "UPDATE ks.kv SET v = 1 WHERE k = %d; ", i%each)
		}
		b.WriteString("APPLY BATCH")
		return b.String()
	}
	cases := []struct {
		name          string
		bound         int
		text          string
		pinned        int // partitions, or -1 for an overflow
		wantOverflowT *schema.Table
	}{
		{"IN of 1024 at the default bound", 0, inList("ks.kv", 1024), 1024, nil},
		{"IN of 1025 at the default bound", 0, inList("ks.kv", 1025), -1, kv},
		{"IN of 5000 under a bound of 10000", 10000, inList("ks.kv", 5000), 5000, nil},
		{"IN with duplicates", 0, "SELECT v FROM ks.kv WHERE k IN (1, 2, 1, 3, 2, 1)", 3, nil},
		{"batch of 3000 statements on 1000 partitions", 1000, batch(3000, 1000), 1000, nil},
		{"batch of 1001 partitions", 1000, batch(1001, 1001), -1, kv},
		{"composite IN multiplied past the bound", 100, "SELECT v FROM ks.comp WHERE a IN (1,2,3,4,5,6,7,8,9,10,11) AND b IN ('a','b','c','d','e','f','g','h','i','j')", -1, snap.Table([]byte("ks"), []byte("comp"))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c Classifier
			got := classifyMsg(t, &c, Env{Schema: snap, MaxPartitions: tc.bound}, 4, queryMsg(tc.text))
			if tc.pinned < 0 {
				if got.Pinned || got.Overflow != tc.wantOverflowT {
					t.Fatalf("pinned %v, overflow %v; want an overflow of %v", got.Pinned, got.Overflow, tc.wantOverflowT)
				}
				return
			}
			if !got.Pinned || len(got.Partitions) != tc.pinned || got.Overflow != nil {
				t.Fatalf("pinned %v to %d partitions, overflow %v; want %d", got.Pinned, len(got.Partitions), got.Overflow, tc.pinned)
			}
			seen := map[int64]bool{}
			for _, p := range got.Partitions {
				if seen[p.Token] {
					t.Fatalf("token %d twice", p.Token)
				}
				seen[p.Token] = true
			}
		})
	}
}

// BenchmarkClassifyInList1024 is the cost of a request at the default
// bound: each partition's key serialized, hashed and deduplicated once.
func BenchmarkClassifyInList1024(b *testing.B) {
	env := Env{Schema: testSnapshot(b)}
	var c Classifier
	h, body := frame.Header{Version: 4, Opcode: frame.OpQuery}, encodeBody(b, 4, queryMsg(inList("ks.kv", 1024)))
	b.ReportAllocs()
	for b.Loop() {
		if got, _ := c.Classify(h, body, &env); len(got.Partitions) != 1024 {
			b.Fatalf("%d partitions", len(got.Partitions))
		}
	}
}

// A type hint does not take a key out of its limits: the hinted term is
// serialized as the column's type, the value the server gives the column.
func TestClassifyTypeHints(t *testing.T) {
	env := Env{Schema: testSnapshot(t)}
	var c Classifier
	for _, tc := range []struct {
		text  string
		token int64
	}{
		{"SELECT v FROM ks.kv WHERE k = (int) 7", tokenOf(intBytes(7))},
		{"UPDATE ks.kv SET v = 1 WHERE k = (int) 7", tokenOf(intBytes(7))},
		{"INSERT INTO ks.kv (k, v) VALUES ((int) 7, 1)", tokenOf(intBytes(7))},
		{`SELECT v FROM "Ks"."Tab" WHERE "Key" = (bigint) -1`, tokenOf([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})},
		{"SELECT v FROM ks.counts WHERE k = (text) 'a'", tokenOf([]byte("a"))},
	} {
		if got := classifyMsg(t, &c, env, 4, queryMsg(tc.text)); !got.Pinned || len(got.Partitions) != 1 || got.Partitions[0].Token != tc.token {
			t.Errorf("%s: %+v, want pinned to token %d", tc.text, *got, tc.token)
		}
	}
}

// INSERT ... JSON is pinned to the partition its document names, as a
// literal, a bound value or a prepared statement's bound value; a document
// the classifier cannot read with certainty pins nothing.
func TestClassifyInsertJSON(t *testing.T) {
	reg := NewRegistry(100, 0)
	env := Env{Schema: testSnapshot(t), Prepared: reg}
	var c Classifier
	query := func(text string, values ...*primitive.Value) *Classification {
		return classifyMsg(t, &c, env, 4, queryMsg(text, values...))
	}
	comp := tokenOf(intBytes(3), []byte("x"))
	for _, tc := range []struct {
		name  string
		got   func() *Classification
		token int64 // 0: not pinned
	}{
		{"literal", func() *Classification { return query(`INSERT INTO ks.kv JSON '{"k": 7, "v": "x"}'`) }, tokenOf(intBytes(7))},
		{"literal, composite key", func() *Classification { return query(`INSERT INTO ks.comp JSON '{"b": "x", "a": 3}'`) }, comp},
		{"literal, quoted key", func() *Classification { return query(`INSERT INTO "Ks"."Tab" JSON '{"\"Key\"": 1}'`) }, tokenOf([]byte{0, 0, 0, 0, 0, 0, 0, 1})},
		{"bound", func() *Classification {
			return query(`INSERT INTO ks.kv JSON ?`, primitive.NewValue([]byte(`{"k": 7}`)))
		}, tokenOf(intBytes(7))},
		{"prepared", func() *Classification {
			p := classifyMsg(t, &c, env, 4, &message.Prepare{Query: `INSERT INTO ks.kv JSON ? DEFAULT UNSET`})
			reg.put([]byte("id"), p.Prepared)
			return classifyMsg(t, &c, env, 4, executeMsg([]byte("id"), primitive.NewValue([]byte(`{"k": 7}`))))
		}, tokenOf(intBytes(7))},
		{"prepared literal", func() *Classification {
			p := classifyMsg(t, &c, env, 4, &message.Prepare{Query: `INSERT INTO ks.kv JSON '{"k": 7}'`})
			reg.put([]byte("id2"), p.Prepared)
			return classifyMsg(t, &c, env, 4, executeMsg([]byte("id2")))
		}, tokenOf(intBytes(7))},
		{"key missing", func() *Classification { return query(`INSERT INTO ks.kv JSON '{"v": 1}'`) }, 0},
		{"key a float", func() *Classification { return query(`INSERT INTO ks.kv JSON '{"k": 7.5}'`) }, 0},
	} {
		got := tc.got()
		if tc.token == 0 {
			if got.Pinned {
				t.Errorf("%s: pinned %+v", tc.name, *got)
			}
			continue
		}
		if !got.Pinned || len(got.Partitions) != 1 || got.Partitions[0].Token != tc.token || got.Op != OpWrite {
			t.Errorf("%s: %+v, want a write pinned to token %d", tc.name, *got, tc.token)
		}
	}
}
