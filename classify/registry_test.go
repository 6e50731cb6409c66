package classify

import (
	"crypto/md5"
	"fmt"
	"testing"

	"github.com/datastax/go-cassandra-native-protocol/datatype"
	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"

	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/schema"
)

func TestPreparedRegistryBounded(t *testing.T) {
	r := NewRegistry(640, 0)
	id := func(i int) []byte { s := md5.Sum([]byte(fmt.Sprint(i))); return s[:] }
	for i := range 10000 {
		r.put(id(i), &Prepared{topology: TopologyLocal})
	}
	if n := r.Len(); n > 640+preparedShards {
		t.Fatalf("%d statements held, bound 640", n)
	}
	if r.get(id(9999)) == nil {
		t.Error("newest statement forgotten")
	}
	if r.get(id(0)) != nil {
		t.Error("oldest statement kept")
	}
	if n := testing.AllocsPerRun(100, func() { r.get(id(5)) }); n > 1 { // id() itself allocates one
		t.Errorf("get allocates %v", n)
	}
}

// Statements large in memory are bounded by bytes as well as by count: a
// few PREPAREs of long IN lists of literals cannot hold more than
// max_prepared_bytes.
func TestPreparedRegistryBoundedInBytes(t *testing.T) {
	r := NewRegistry(100000, 4<<20)
	id := func(i int) []byte { s := md5.Sum([]byte(fmt.Sprint(i))); return s[:] }
	large := func() *Prepared {
		terms := make([]pkSource, 20000)
		for i := range terms {
			terms[i] = pkSource{index: -1, start: uint32(4 * i), end: uint32(4*i + 4)}
		}
		return &Prepared{op: OpRead, sources: [][]pkSource{terms}, literals: make([]byte, 4*len(terms))}
	}
	one := large().size()
	for i := range 20 {
		r.put(id(i), large())
	}
	if got := r.Size(); got > 4<<20 {
		t.Errorf("registry holds %d bytes of statements, bound %d", got, 4<<20)
	}
	if want := (4 << 20) / one; r.Len() > want {
		t.Errorf("%d statements of %d bytes held, want at most %d", r.Len(), one, want)
	}
	if r.get(id(19)) == nil || r.get(id(0)) != nil {
		t.Error("not the oldest forgotten first")
	}
	// One statement over the bound is kept alone, so that it can be
	// executed at all.
	r.maxBytes = one / 2
	r.put(id(100), large())
	if r.Len() != 1 || r.get(id(100)) == nil {
		t.Errorf("a statement over the bound: %d held", r.Len())
	}
	// Replacing a statement accounts for its new size.
	r.put(id(100), &Prepared{})
	if got := r.Size(); got > 1024 {
		t.Errorf("after replacing the large statement with a small one: %d bytes", got)
	}
}

// answer is the RESULT Prepared the upstream answers a PREPARE with: the
// statement's id, its bound variables (ks.kv's k, pk indexes pk) and
// result columns.
func answer(t *testing.T, id []byte, pk []uint16, result ...string) frame.Prepared {
	t.Helper()
	k := &message.ColumnMetadata{Keyspace: "ks", Table: "kv", Name: "k", Index: 0, Type: datatype.Int}
	rows := &message.RowsMetadata{ColumnCount: int32(len(result))}
	for i, name := range result {
		rows.Columns = append(rows.Columns, &message.ColumnMetadata{Keyspace: "system", Table: "local", Name: name, Index: int32(i), Type: datatype.Varchar})
	}
	body := encodeBody(t, 4, &message.PreparedResult{PreparedQueryId: id,
		VariablesMetadata: &message.VariablesMetadata{PkIndices: pk, Columns: []*message.ColumnMetadata{k}}, ResultMetadata: rows})
	p, err := frame.ParsePrepared(body, 4)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Learn records what the PREPARE's text said, completed with the
// upstream's answer: the partition key's variables when the schema did not
// know the table, a topology query's result columns. Every statement keeps
// its text, with which another node can be asked to prepare it.
func TestLearn(t *testing.T) {
	reg := NewRegistry(100, 0)
	env := Env{Schema: schema.NewSnapshot(nil), Prepared: reg}
	var c Classifier
	learn := func(text string, id []byte, pk []uint16, result ...string) *Prepared {
		prep := answer(t, id, pk, result...)
		p := reg.Learn(classifyMsg(t, &c, env, 4, &message.Prepare{Query: text}).Prepared, &prep)
		if reg.get(id) != p {
			t.Fatalf("%q not recorded under its id", text)
		}
		if string(p.text) != text {
			t.Errorf("%q recorded with the text %q", text, p.text)
		}
		return p
	}

	p := learn("SELECT v FROM ks.kv WHERE k = ?", []byte("kv"), []uint16{0})
	if p.unresolved && p.sources == nil {
		t.Errorf("a statement of a table the schema does not know yet, without the answer's key indexes: %+v", p)
	}
	known := env
	known.Schema = testSnapshot(t)
	got := classifyMsg(t, &c, known, 4, executeMsg([]byte("kv"), primitive.NewValue(intBytes(3))))
	if !got.Pinned || len(got.Partitions) != 1 || got.Partitions[0].Token != tokenOf(intBytes(3)) {
		t.Errorf("pinned by the answer's key indexes once the schema knows the table: %+v", *got)
	}

	p = learn("SELECT host_id, rpc_address FROM system.local WHERE key = 'local'", []byte("local"), nil, "host_id", "rpc_address")
	if cols := p.Columns(); len(cols) != 2 || cols[0] != "host_id" || cols[1] != "rpc_address" {
		t.Errorf("topology query's columns %q", cols)
	}
	if got := classifyMsg(t, &c, env, 4, executeMsg([]byte("local"))); got.Topology != TopologyLocal || !got.Internal {
		t.Errorf("EXECUTE of a topology query: %+v", *got)
	}

	learn("CREATE TABLE ks.x (k int PRIMARY KEY)", []byte("ddl"), nil)
	if reg.Len() != 3 {
		t.Errorf("%d statements recorded, want 3", reg.Len())
	}
}
