package proxy

import (
	"maps"
	"net"
	"testing"

	"github.com/datastax/go-cassandra-native-protocol/message"

	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

// A client that leaves between frames, closing its connection or resetting
// it, has sent nothing wrong: no protocol error is counted, and the end of
// its connection is logged at debug as closed. So is a client whose
// connection the proxy closed because the other side went first: its
// upstream was lost, or the reset was met by a write to it before the read
// that waits for its next frame. A client that leaves part way through a
// frame, by a close or a reset, is counted once as truncated_frame and
// logged at info: a request it had begun to send is lost.
func TestClientResetIsNoProtocolError(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{Keyspace: "ks", Table: "kv",
		SlowQuery: "slowks", ResetQuery: "dropme", SlowFor: 200e6})
	reset := func(c *badClient) {
		c.c.(*net.TCPConn).SetLinger(0)
		c.c.Close()
	}
	query := func(c *badClient, v uint8, stream int16, cql string) {
		c.write(c.wire(msgFrame(c.t, v, stream, &message.Query{Query: cql, Options: &message.QueryOptions{}})))
	}
	const (
		closed = "connection closed"
		ended  = "connection ended"
	)
	truncated := map[string]float64{"truncated_frame": 1}
	tests := []struct {
		name    string
		version uint8 // STARTUP in this version first; 0: none
		leave   func(c *badClient)
		reasons map[string]float64 // counted; nil for none
		// The lines logged for the client's side of the connection.
		level, logged string
	}{
		{name: "reset before STARTUP", leave: reset, level: "debug", logged: closed},
		{name: "reset after a v4 STARTUP", version: 4, leave: reset, level: "debug", logged: closed},
		{name: "reset after a v5 STARTUP", version: 5, leave: reset, level: "debug", logged: closed},
		{name: "closed after a v4 STARTUP", version: 4, leave: func(c *badClient) { c.c.Close() }, level: "debug", logged: closed},
		{name: "closed after a v5 STARTUP", version: 5, leave: func(c *badClient) { c.c.Close() }, level: "debug", logged: closed},
		{
			name: "reset after an answered request", version: 4,
			leave: func(c *badClient) {
				query(c, 4, 2, "SELECT * FROM ks.kv WHERE k = 1")
				if r, err := c.next(); err != nil || r.opcode != frame.OpResult {
					c.t.Fatalf("answered %v %v", r, err)
				}
				reset(c)
			},
			level: "debug", logged: closed,
		},
		{
			// The request path reads nothing while a USE waits for its
			// answer: writing the answer meets the reset first.
			name: "reset while its USE waits for the node", version: 4,
			leave: func(c *badClient) {
				slow := node.SlowRequests()
				query(c, 4, 2, "USE slowks")
				waitUntil(c.t, "the USE at the node", func() bool { return node.SlowRequests() > slow })
				reset(c)
			},
			level: "debug", logged: closed,
		},
		{
			name: "its upstream lost between frames", version: 4,
			leave: func(c *badClient) {
				query(c, 4, 2, "SELECT * FROM ks.kv WHERE k = 1 -- dropme")
				if r, err := c.next(); err != nil || r.code != frame.ErrCodeServer {
					c.t.Fatalf("answered %v %v", r, err)
				}
			},
			reasons: map[string]float64{"upstream_lost": 1},
			level:   "debug", logged: closed,
		},
		{
			name: "reset part way through a v4 header", version: 4,
			leave:   func(c *badClient) { c.write([]byte{4, 0, 0, 5}); reset(c) },
			reasons: truncated, level: "info", logged: ended,
		},
		{
			name: "reset part way through a v4 body", version: 4,
			leave:   func(c *badClient) { c.write(rawFrame(4, 5, frame.OpQuery, 100, make([]byte, 10)...)); reset(c) },
			reasons: truncated, level: "info", logged: ended,
		},
		{
			name: "closed part way through a v4 body", version: 4,
			leave:   func(c *badClient) { c.write(rawFrame(4, 5, frame.OpQuery, 100, make([]byte, 10)...)); c.c.Close() },
			reasons: truncated, level: "info", logged: ended,
		},
		{
			name: "closed part way through a v5 segment", version: 5,
			leave: func(c *badClient) {
				seg := c.wire(rawFrame(5, 5, frame.OpOptions, 0))
				c.write(seg[:len(seg)-3])
				c.c.Close()
			},
			reasons: truncated, level: "info", logged: ended,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var log logLines
			p := startBadInputProxy(t, &log, "127.0.0.1:0", node.Addr(), nil)
			conns := func() float64 { return metricValue(t, p.p.metrics.clientConns) }
			c := dialBad(t, p.addr, tt.version, nil)
			client := c.c.LocalAddr().String()
			waitUntil(t, "the connection served", func() bool { return conns() == 1 })
			tt.leave(c)
			waitUntil(t, "the connection's end", func() bool { return conns() == 0 })
			want := tt.reasons
			if want == nil {
				want = map[string]float64{}
			}
			if got := p.reasons(t); !maps.Equal(got, want) {
				t.Errorf("cqlguard_protocol_errors_total by reason: %v, want %v", got, want)
			}
			var lines int
			for _, l := range log.of(t, client) {
				if l["side"] != "client" {
					continue
				}
				lines++
				if l["level"] != tt.level || l["message"] != tt.logged {
					t.Errorf("logged %v, want %s %q", l, tt.level, tt.logged)
				}
			}
			if lines == 0 {
				t.Errorf("nothing logged for the client's side; logged %v", log.of(t, client))
			}
		})
	}
}
