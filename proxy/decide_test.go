package proxy

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"

	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cqlguard/cqlguard/classify"
	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/ratelimit"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

// A hot partition is refused on its own stream, with the rate-limit error
// for a driver that opted in and Config_error for one that did not, while
// another partition of the same table passes.
func TestEnforceLimits(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{})
	cfg := config.Default()
	cfg.Admin.Listen = ""
	cfg.Listen, cfg.Upstreams = "127.0.0.1:0", []string{node.Addr()}
	cfg.Limits.Algorithm = ratelimit.AlgorithmTokenBucket
	two := config.OpsPerSecond(2)
	cfg.Limits.Keyspaces = map[string]config.KeyspaceLimits{"ks": {Tables: map[string]config.RateLimits{"kv": {MaxReadsPerSecond: &two}}}}
	p, err := New(cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{testSnapshot(t)}))
	if err != nil {
		t.Fatal(err)
	}
	// A frozen clock: the bucket does not refill during the test.
	p.elapsed = func() int64 { return 1e9 }
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ln)
	t.Cleanup(func() { p.Shutdown(t.Context()) })

	for _, optIn := range []bool{false, true} {
		c := dialRaw(t, ln.Addr().String(), 4)
		opts := map[string]string{}
		if optIn {
			opts[rateLimitKey] = ""
		}
		c.startup(opts)
		key := "1"
		if optIn {
			key = "3" // a fresh partition: the first connection spent key 1's
		}
		rejected := 0
		for i := range 5 {
			c.send(int16(10+i), &message.Query{Query: "SELECT * FROM ks.kv WHERE k = " + key, Options: &message.QueryOptions{}})
			raw, h, err := c.r.Next()
			if err != nil {
				t.Fatal(err)
			}
			if h.Stream != int16(10+i) {
				t.Fatalf("answer on stream %d, want %d", h.Stream, 10+i)
			}
			if h.Opcode != frame.OpError {
				continue
			}
			rejected++
			code := int32(binary.BigEndian.Uint32(raw[frame.HeaderSize:]))
			want := frame.ErrCodeConfig
			if optIn {
				want = frame.ErrCodeRateLimit
			}
			if code != want {
				t.Errorf("opt-in %v: code %#x, want %#x", optIn, code, want)
			}
			msgLen := int(binary.BigEndian.Uint16(raw[frame.HeaderSize+4:]))
			msg := raw[frame.HeaderSize+6 : frame.HeaderSize+6+msgLen]
			if !bytes.Equal(msg, []byte("Per-partition rate limit reached for read in table ks.kv, rejected by coordinator")) {
				t.Errorf("message %q", msg)
			}
			rest := raw[frame.HeaderSize+6+msgLen:]
			if optIn && !bytes.Equal(rest, []byte{0, 1}) || !optIn && len(rest) != 0 {
				t.Errorf("opt-in %v: trailing bytes %x", optIn, rest)
			}
		}
		if rejected != 3 {
			t.Errorf("opt-in %v: %d of 5 rejected, want 3 (limit 2, burst 1 s)", optIn, rejected)
		}
		// Another partition of the table is untouched.
		c.send(20, &message.Query{Query: "SELECT * FROM ks.kv WHERE k = 2" + key, Options: &message.QueryOptions{}})
		if f := c.recv(); f.Header.OpCode == primitive.OpCodeError {
			t.Errorf("another partition refused: %v", f.Body.Message)
		}
	}
}

// BenchmarkDecide measures counting one classified request against its
// partition's limit: accepted (a partition under its limit) and rejected
// (one far over it, answer excluded); alone, and with coordination, whose
// fleet table every decision then reads and counts in (its reports, to an
// address nothing listens on, fail off the request path).
func BenchmarkDecide(b *testing.B) {
	b.Run("alone", func(b *testing.B) { benchmarkDecide(b, nil) })
	b.Run("coordinated", func(b *testing.B) { benchmarkDecide(b, []string{"127.0.0.1:1"}) })
}

func benchmarkDecide(b *testing.B, redis []string) {
	cfg := config.Default()
	cfg.Coordination.Addresses = redis
	cfg.Admin.Listen = ""
	cfg.Upstreams = []string{"127.0.0.1:1"}
	limit := config.OpsPerSecond(1000)
	cfg.Limits.Keyspaces = map[string]config.KeyspaceLimits{"ks": {Tables: map[string]config.RateLimits{"kv": {MaxReadsPerSecond: &limit}}}}
	p, err := New(cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{testSnapshot(b)}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Shutdown(b.Context()) })
	snap := testSnapshot(b)
	s := &session{p: p, up: &upstream{}}
	c := &classify.Classification{Op: classify.OpRead, Pinned: true, Partitions: []classify.Partition{{Table: snap.Table([]byte("ks"), []byte("kv"))}}}
	for _, tc := range []struct {
		name   string
		reject bool
	}{{"accepted", false}, {"rejected", true}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			i, now := int64(0), p.clock()
			for b.Loop() {
				if tc.reject {
					c.Partitions[0].Token = 42
				} else {
					i++
					c.Partitions[0].Token = i // a fresh partition each time
				}
				now += 1000
				s.decide(c, false, p.settings.Load(), now)
			}
		})
	}
}
