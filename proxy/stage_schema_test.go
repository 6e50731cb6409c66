package proxy

import (
	"sync/atomic"
	"testing"

	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

// refreshCounter is a schema source that never changes and counts the
// reloads it is asked for.
type refreshCounter struct {
	staticSchema
	n atomic.Int32
}

func (r *refreshCounter) Refresh() { r.n.Add(1) }

// A statement that may change the schema reloads it once it has run; a
// read or a write does not. (The fake node runs every statement: that an
// error reloads nothing rests on schemaStage's check of the answer.)
func TestSchemaStage(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{})
	cfg := config.Default()
	cfg.Admin.Listen, cfg.Listen, cfg.Upstreams = "", "127.0.0.1:0", []string{node.Addr()}
	src := &refreshCounter{staticSchema: staticSchema{testSnapshot(t)}}
	_, addr := serveProxy(t, cfg, testLogger(), prometheus.NewRegistry(), WithSchema(src))
	c := dialRaw(t, addr, 4)
	c.startup(nil)
	for i, tc := range []struct {
		query   string
		refresh int32
	}{
		{"SELECT * FROM ks.kv WHERE k = 1", 0},
		{"INSERT INTO ks.kv (k, v) VALUES (1, 1)", 0},
		{"CREATE TABLE ks.other (k int PRIMARY KEY)", 1},
		{"SELECT * FROM ks.kv WHERE k = 2", 1},
		{"DROP TABLE ks.other", 2},
	} {
		c.send(int16(i+1), &message.Query{Query: tc.query, Options: &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne}})
		if got := c.recv(); got.Header.OpCode != primitive.OpCodeResult {
			t.Fatalf("%s: the fake node answered %v", tc.query, got.Body.Message)
		}
		if n := src.n.Load(); n != tc.refresh {
			t.Errorf("after %s: %d reloads, want %d", tc.query, n, tc.refresh)
		}
	}
}
