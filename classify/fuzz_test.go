package classify

import (
	"testing"

	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"

	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/schema"
)

// fuzzPrepared are the statements the fuzzed registry holds, by id (the
// index as one byte).
var fuzzPrepared = []string{
	"SELECT v FROM ks.kv WHERE k = ?",
	"UPDATE ks.comp SET v = ? WHERE a IN (1, ?, 3) AND b = ?",
	`INSERT INTO ks.kv JSON ?`,
	"SELECT * FROM system.local WHERE key = 'local'",
	"USE ks",
	"SELECT v FROM kv WHERE k = 7",
}

// FuzzClassify classifies any body under any opcode, version and flags
// against a schema and a registry of prepared statements. It checks that
// nothing panics and that what is pinned holds: at most the bound of
// partitions, each once, each key hashing to its token, and no overflow.
func FuzzClassify(f *testing.F) {
	seed := func(v primitive.ProtocolVersion, msg message.Message) {
		f.Add(uint8(msg.GetOpCode()), uint8(v), uint8(0), encodeBody(f, v, msg))
	}
	for _, v := range []primitive.ProtocolVersion{3, 4, 5} {
		seed(v, queryMsg("SELECT * FROM ks.kv WHERE k IN (1, 2, 1)"))
		seed(v, queryMsg("INSERT INTO ks.comp (a, b) VALUES (?, ?)", primitive.NewValue(intBytes(1)), primitive.NewValue([]byte("x"))))
		seed(v, queryMsg("BEGIN BATCH UPDATE ks.kv SET v = 1 WHERE k = ?; DELETE FROM ks.kv WHERE k = 2 APPLY BATCH", primitive.NewValue(intBytes(1))))
		seed(v, &message.Prepare{Query: "SELECT v FROM ks.comp WHERE a = ? AND b = 'x' USING TIMEOUT 5s"})
		for _, e := range []*message.Execute{
			executeMsg([]byte{1}, primitive.NewValue(intBytes(0)), primitive.NewValue(intBytes(2)), primitive.NewValue([]byte("y"))),
			executeMsg([]byte{2}, primitive.NewValue([]byte(`{"k": 3}`))),
		} {
			if v >= 5 {
				e.ResultMetadataId = []byte{1}
			}
			seed(v, e)
		}
		seed(v, &message.Batch{Type: primitive.BatchTypeUnlogged, Children: []*message.BatchChild{
			{Id: []byte{0}, Values: []*primitive.Value{primitive.NewValue(intBytes(5))}},
			{Query: "INSERT INTO ks.kv (k) VALUES (6)"},
		}})
	}
	snap := testSnapshot(f)
	reg := NewRegistry(100, 0)
	var prep Classifier
	for i, text := range fuzzPrepared {
		got, err := prep.Classify(frame.Header{Version: 4, Opcode: frame.OpPrepare}, encodeBody(f, 4, &message.Prepare{Query: text}), &Env{Schema: snap})
		if err != nil {
			f.Fatal(err)
		}
		reg.put([]byte{byte(i)}, got.Prepared)
	}
	f.Fuzz(func(t *testing.T, opcode, version, flags uint8, body []byte) {
		var c Classifier
		env := &Env{Schema: snap, Prepared: reg, Keyspace: []byte("ks"), MaxPartitions: int(flags >> 4)}
		h := frame.Header{Version: version, Opcode: frame.Opcode(opcode), Flags: flags &^ frame.FlagCompression, Length: len(body)}
		got, err := c.Classify(h, body, env)
		if err != nil || got == nil {
			return
		}
		bound := env.MaxPartitions
		if bound == 0 {
			bound = defaultMaxPartitions
		}
		if got.Pinned && got.Overflow != nil {
			t.Fatalf("pinned with an overflow: %+v", *got)
		}
		if len(got.Partitions) > bound {
			t.Fatalf("%d partitions, bound %d", len(got.Partitions), bound)
		}
		type key struct {
			t     *schema.Table
			token int64
		}
		seen := map[key]bool{}
		for _, p := range got.Partitions {
			if seen[key{p.Table, p.Token}] {
				t.Fatalf("partition %d of %s twice", p.Token, p.Table.Name)
			}
			seen[key{p.Table, p.Token}] = true
			if schema.Token(p.Key) != p.Token {
				t.Fatalf("key %x does not hash to token %d", p.Key, p.Token)
			}
		}
		if got.TimestampAt > 0 && got.TimestampAt+8 > len(got.Body) {
			t.Fatalf("timestamp at %d of a body of %d bytes", got.TimestampAt, len(got.Body))
		}
		c.Release()
	})
}
