package proxy

import (
	"testing"

	"github.com/datastax/go-cassandra-native-protocol/message"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
)

// ScyllaDB's USING TIMEOUT, which a driver that takes cqlguard for ScyllaDB
// adds to its queries of the system tables, is dropped from those before
// they reach an upstream that is not ScyllaDB, and kept everywhere else.
func TestUsingTimeoutDropped(t *testing.T) {
	t.Parallel()
	cassandra := startStubNode(t, "127.0.0.1:0")
	scylla := startStubNode(t, "127.0.0.1:0")
	for _, n := range []*stubNode{cassandra, scylla} {
		n.mu.Lock()
		n.record, n.scylla = true, n == scylla
		n.mu.Unlock()
	}
	_, toCassandra := startProxy(t, func(c *config.Config) {
		c.Listen, c.Upstreams = "127.0.0.1:0", []string{cassandra.ln.Addr().String()}
	})
	_, toScylla := startProxy(t, func(c *config.Config) {
		c.Listen, c.Upstreams = "127.0.0.1:0", []string{scylla.ln.Addr().String()}
	})
	const (
		system = "SELECT keyspace_name FROM system_schema.keyspaces"
		user   = "SELECT * FROM ks.t WHERE k = 1"
		clause = " USING TIMEOUT 30000ms"
	)
	tests := []struct {
		name    string
		node    *stubNode
		addr    string
		prepare bool
		sent    string
		want    string // what the node receives
	}{
		{"system query to Cassandra", cassandra, toCassandra, false, system + clause, system},
		{"system PREPARE to Cassandra", cassandra, toCassandra, true, system + clause, system},
		{"user query to Cassandra", cassandra, toCassandra, false, user + clause, user + clause},
		{"system query without the clause", cassandra, toCassandra, false, system, system},
		{"system query to ScyllaDB", scylla, toScylla, false, system + clause, system + clause},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dialBad(t, tt.addr, 4, nil)
			defer c.c.Close()
			var msg message.Message = &message.Query{Query: tt.sent}
			if tt.prepare {
				msg = &message.Prepare{Query: tt.sent}
			}
			c.write(msgFrame(t, 4, 5, msg))
			if r, err := c.next(); err != nil || r.stream != 5 || r.opcode != frame.OpResult {
				t.Fatalf("answer: %v %v", r, err)
			}
			tt.node.mu.Lock()
			got := tt.node.statements[len(tt.node.statements)-1]
			tt.node.mu.Unlock()
			if got != tt.want {
				t.Errorf("the node received %q, want %q", got, tt.want)
			}
		})
	}
}
