package proxy

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
)

// handlerSession is a session with no sockets, whose handler a test calls
// directly, on a proxy limiting ks.kv to one write a second (token bucket,
// so that decisions at a fixed time are exact).
func handlerSession(t *testing.T, edit func(*config.Config)) *session {
	t.Helper()
	cfg := config.Default()
	cfg.Admin.Listen = ""
	cfg.Upstreams = []string{"127.0.0.1:1"}
	one := config.OpsPerSecond(1)
	cfg.Limits.Algorithm = "token-bucket"
	cfg.Limits.Keyspaces = map[string]config.KeyspaceLimits{"ks": {Tables: map[string]config.RateLimits{"kv": {MaxWritesPerSecond: &one, MaxReadsPerSecond: &one}}}}
	if edit != nil {
		edit(&cfg)
	}
	p, err := New(cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{testSnapshot(t)}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Shutdown(context.Background()) })
	return &session{p: p, log: testLogger(), up: &upstream{}}
}

// The handler, called as a function: every opcode, limits accepted and
// refused, dry run, internal queries, unknown prepared ids, USING TIMEOUT,
// and the frames it refuses, each answered on its own stream.
func TestHandle(t *testing.T) {
	query := func(stream int16, q string) []byte {
		return msgFrame(t, 4, stream, &message.Query{Query: q, Options: &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne}})
	}
	write := query(3, "UPDATE ks.kv SET v = 1 WHERE k = 7")
	type want struct {
		answer  int32 // an ERROR's code, or -1 to forward
		reply   reply
		msg     string // a substring of the answer's message
		forward func(t *testing.T, f []byte)
	}
	forwarded := func(r reply) want { return want{answer: -1, reply: r} }
	cases := []struct {
		name   string
		edit   func(*config.Config)
		setup  func(s *session)
		frames [][]byte
		want   []want
	}{
		{name: "OPTIONS", frames: [][]byte{msgFrame(t, 4, 1, &message.Options{})}, want: []want{forwarded(replySupported)}},
		{name: "STARTUP", frames: [][]byte{msgFrame(t, 4, 0, &message.Startup{Options: map[string]string{"CQL_VERSION": "3.0.0", "COMPRESSION": "lz4", rateLimitKey: "x"}})},
			want: []want{{answer: -1, reply: replyStartup, forward: func(t *testing.T, f []byte) {
				if bytes.Contains(f, []byte(rateLimitKey)) {
					t.Error("the rate-limit opt-in forwarded to an upstream that did not advertise it")
				}
			}}}},
		{name: "STARTUP unreadable", frames: [][]byte{rawFrame(4, 2, frame.OpStartup, 3, 0, 9, 'x')},
			want: []want{{answer: frame.ErrCodeProtocol, msg: "STARTUP"}}},
		{name: "response bit", frames: [][]byte{func() []byte { f := msgFrame(t, 4, 5, &message.Options{}); f[0] |= 0x80; return f }()},
			want: []want{{answer: frame.ErrCodeProtocol, msg: "response bit"}}},
		{name: "negative stream", frames: [][]byte{msgFrame(t, 4, -3, &message.Options{})},
			want: []want{{answer: frame.ErrCodeProtocol, msg: "negative"}}},
		{name: "stream in flight", setup: func(s *session) { s.streams.begin(3, request{}) }, frames: [][]byte{write},
			want: []want{{answer: frame.ErrCodeProtocol, msg: "in flight"}}},
		{name: "limit: accepted, then refused with Config_error", frames: [][]byte{write, query(4, "UPDATE ks.kv SET v = 2 WHERE k = 7"), query(5, "UPDATE ks.kv SET v = 2 WHERE k = 8")},
			want: []want{forwarded(replyForward), {answer: frame.ErrCodeConfig, msg: "Per-partition rate limit reached for write in table ks.kv"}, forwarded(replyForward)}},
		{name: "limit: the rate-limit error to a driver that opted in", setup: func(s *session) { s.rateLimitOptIn = true }, frames: [][]byte{write, write},
			want: []want{forwarded(replyForward), {answer: frame.ErrCodeRateLimit, msg: "rejected by coordinator"}}},
		{name: "dry run", edit: func(c *config.Config) { c.Limits.DryRun = true }, frames: [][]byte{write, write},
			want: []want{forwarded(replyForward), forwarded(replyForward)}},
		{name: "internal queries are not limited", frames: [][]byte{query(1, "SELECT * FROM system.local"), query(2, "SELECT * FROM system.local")},
			want: []want{forwarded(replyLocal), forwarded(replyLocal)}},
		{name: "EXECUTE of an unknown statement", frames: [][]byte{msgFrame(t, 4, 6, &message.Execute{QueryId: []byte{1, 2}, Options: &message.QueryOptions{}})},
			want: []want{{answer: frame.ErrCodeUnprepared, msg: "prepare it again"}}},
		{name: "USING TIMEOUT dropped for an upstream that is not ScyllaDB", frames: [][]byte{query(1, "SELECT * FROM system.peers USING TIMEOUT 30000ms")},
			want: []want{{answer: -1, reply: replyPeers, forward: func(t *testing.T, f []byte) {
				if bytes.Contains(f, []byte("USING TIMEOUT")) {
					t.Errorf("forwarded %q", f)
				}
			}}}},
		{name: "USING TIMEOUT kept for ScyllaDB", setup: func(s *session) { s.up.rateLimitError = true }, frames: [][]byte{query(1, "SELECT * FROM system.peers USING TIMEOUT 30000ms")},
			want: []want{{answer: -1, reply: replyPeers, forward: func(t *testing.T, f []byte) {
				if !bytes.Contains(f, []byte("USING TIMEOUT")) {
					t.Errorf("forwarded %q", f)
				}
			}}}},
		{name: "too many partitions of a limited table", frames: [][]byte{query(1, inList("ks.kv", 2000))},
			want: []want{{answer: frame.ErrCodeInvalid, msg: "limits.max_partitions_per_request"}}},
		{name: "BATCH: refused whole when one partition is over its limit", frames: [][]byte{write, msgFrame(t, 4, 4, &message.Batch{Type: primitive.BatchTypeUnlogged,
			Children: []*message.BatchChild{{Query: "UPDATE ks.kv SET v = 1 WHERE k = 8"}, {Query: "UPDATE ks.kv SET v = 1 WHERE k = 7"}}})},
			want: []want{forwarded(replyForward), {answer: frame.ErrCodeConfig, msg: "Per-partition rate limit reached for write in table ks.kv"}}},
		{name: "topology query", frames: [][]byte{query(1, "SELECT * FROM system.local WHERE key = 'local'"), query(2, "select peer from SYSTEM.peers_v2")},
			want: []want{forwarded(replyLocal), forwarded(replyPeersV2)}},
		{name: "AUTH_RESPONSE", frames: [][]byte{msgFrame(t, 4, 1, &message.AuthResponse{Token: []byte("\x00user\x00secret")})}, want: []want{forwarded(replyAuth)}},
		{name: "PREPARE", frames: [][]byte{msgFrame(t, 4, 1, &message.Prepare{Query: "SELECT * FROM system.local"})}, want: []want{forwarded(replyPrepared)}},
		{name: "REGISTER", frames: [][]byte{msgFrame(t, 4, 1, &message.Register{EventTypes: []primitive.EventType{primitive.EventTypeSchemaChange}})}, want: []want{forwarded(replyForward)}},
		{name: "unknown opcode", frames: [][]byte{rawFrame(4, 1, frame.Opcode(0x1e), 0)}, want: []want{forwarded(replyForward)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := handlerSession(t, tc.edit)
			if tc.setup != nil {
				tc.setup(s)
			}
			for i, f := range tc.frames {
				h, err := frame.ParseHeader(f)
				if err != nil {
					t.Fatal(err)
				}
				act := s.handle(f, h, 1e9)
				w := tc.want[i]
				if w.answer < 0 {
					if act.answer != nil || act.forward == nil || act.req.reply != w.reply {
						t.Fatalf("frame %d: answered %q, reply %d; want it forwarded, reply %d", i, act.answer, act.req.reply, w.reply)
					}
					if w.forward != nil {
						w.forward(t, act.forward)
					}
					continue
				}
				if act.answer == nil {
					t.Fatalf("frame %d forwarded; want an answer %#x", i, w.answer)
				}
				ah, err := frame.ParseHeader(act.answer)
				if err != nil || !ah.Response || ah.Opcode != frame.OpError || ah.Stream != h.Stream {
					t.Fatalf("frame %d: answer %v %v, want an ERROR on stream %d", i, ah, err, h.Stream)
				}
				if code, msg := errorBody(act.answer[frame.HeaderSize:]); code != w.answer || !strings.Contains(msg, w.msg) {
					t.Errorf("frame %d: answered %#x %q, want %#x with %q", i, code, msg, w.answer, w.msg)
				}
			}
		})
	}
}
