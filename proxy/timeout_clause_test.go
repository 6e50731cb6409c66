package proxy

import (
	"testing"

	"github.com/datastax/go-cassandra-native-protocol/message"

	"github.com/cqlguard/cqlguard/frame"
)

// ScyllaDB's USING TIMEOUT, which a driver that takes cqlguard for ScyllaDB
// adds to its queries of the system tables, is dropped from those before
// they reach an upstream that is not ScyllaDB, and kept everywhere else.
func TestUsingTimeoutDropped(t *testing.T) {
	cassandra := startStubNode(t, "127.0.0.9:19094")
	scylla := startStubNode(t, "127.0.0.9:19095")
	for _, n := range []*stubNode{cassandra, scylla} {
		n.mu.Lock()
		n.record, n.scylla = true, n == scylla
		n.mu.Unlock()
	}
	startProxy(t, func(c *Config) {
		c.Listen, c.Upstreams = "127.0.0.10:19094", []string{"127.0.0.9:19094"}
	})
	startProxy(t, func(c *Config) {
		c.Listen, c.Upstreams = "127.0.0.10:19095", []string{"127.0.0.9:19095"}
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
		{"system query to Cassandra", cassandra, "127.0.0.10:19094", false, system + clause, system},
		{"system PREPARE to Cassandra", cassandra, "127.0.0.10:19094", true, system + clause, system},
		{"user query to Cassandra", cassandra, "127.0.0.10:19094", false, user + clause, user + clause},
		{"system query without the clause", cassandra, "127.0.0.10:19094", false, system, system},
		{"system query to ScyllaDB", scylla, "127.0.0.10:19095", false, system + clause, system + clause},
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
