package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/apache/cassandra-gocql-driver/v2/lz4"
	"github.com/apache/cassandra-gocql-driver/v2/snappy"
	pframe "github.com/datastax/go-cassandra-native-protocol/frame"
	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/classify"
	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/schema"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

// fakeNode starts a fake upstream node until the test ends.
func fakeNode(t *testing.T, addr string, opts fakenode.Options) *fakenode.Node {
	t.Helper()
	n, err := fakenode.Start(addr, opts)
	if err != nil {
		t.Fatalf("starting fake node %s: %v", addr, err)
	}
	t.Cleanup(n.Close)
	return n
}

// staticSchema is a schema source that never changes.
type staticSchema struct{ snap *schema.Snapshot }

func (s staticSchema) Current() *schema.Snapshot { return s.snap }
func (s staticSchema) Refresh()                  {}

// testSnapshot is the schema the tests' tables have: ks.kv (an int key),
// ks.comp (int and text), ks.counts (a counter table) and "Ks"."Tab".
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

// registered is what p's registry holds of the statement prepared as id:
// an EXECUTE of it, without values, classified against the test schema;
// nil when the registry does not hold it.
func registered(t testing.TB, p *Proxy, id []byte) *classify.Classification {
	t.Helper()
	var c classify.Classifier
	h := frame.Header{Version: 4, Opcode: frame.OpExecute}
	env := classify.Env{Schema: testSnapshot(t), Prepared: p.prepared}
	got, err := c.Classify(h, encodeBody(t, 4, &message.Execute{QueryId: id, Options: &message.QueryOptions{}}), &env)
	if err != nil {
		t.Fatal(err)
	}
	if got.Unprepared != nil {
		return nil
	}
	return got
}

// testLogger discards logs unless CQLGUARD_DEBUG=1.
func testLogger() zerolog.Logger {
	if os.Getenv("CQLGUARD_DEBUG") == "1" {
		return zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).Level(zerolog.DebugLevel)
	}
	return zerolog.New(io.Discard)
}

// startProxy runs a proxy for cfg (over config.Default) until the test ends,
// and returns it and the address it listens on (cfg.Listen may name port
// 0).
func startProxy(t *testing.T, edit func(*config.Config)) (*Proxy, string) {
	t.Helper()
	cfg := config.Default()
	cfg.Admin.Listen = ""
	edit(&cfg)
	return serveProxy(t, cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{}))
}

// serveProxy runs a proxy for cfg, listening on cfg.Listen (which may name
// port 0), until the test ends, and returns it and the address it listens
// on.
func serveProxy(tb testing.TB, cfg config.Config, log zerolog.Logger, reg prometheus.Registerer, opts ...Option) (*Proxy, string) {
	tb.Helper()
	p, err := New(cfg, log, reg, opts...)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	go p.Serve(ln)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			tb.Errorf("Shutdown: %v", err)
		}
	})
	return p, ln.Addr().String()
}

// listen listens on addr (port 0) for a proxy whose address a test must
// know before it starts, as the proxies that name each other as peers.
func listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	return ln
}

// startProxyOn runs a proxy for cfg (over DefaultConfig) on ln until the
// test ends; cfg.Listen is ln's address, so the proxy advertises the port
// it serves on.
func startProxyOn(t *testing.T, ln net.Listener, edit func(*config.Config)) *Proxy {
	t.Helper()
	cfg := config.Default()
	cfg.Admin.Listen = ""
	cfg.Listen = ln.Addr().String()
	edit(&cfg)
	p, err := New(cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{}))
	if err != nil {
		ln.Close()
		t.Fatalf("New: %v", err)
	}
	go p.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return p
}

type recorder struct {
	mu    sync.Mutex
	hosts []string
	dials []string
	d     net.Dialer
}

func (r *recorder) Accept(h *gocql.HostInfo) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hosts = append(r.hosts, h.ConnectAddress().String())
	return true
}

func (r *recorder) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	r.mu.Lock()
	r.dials = append(r.dials, addr)
	r.mu.Unlock()
	return r.d.DialContext(ctx, network, addr)
}

// waitUntil polls cond until it holds, failing the test after 5 s.
func waitUntil(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
	}
}

func uniq(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

// In node mode a driver learns the peers as the proxies in front of them,
// and dials nothing else. The nodes serve system.peers_v2, whose
// native_port tells the driver each proxy's port: they differ.
func TestNodeModeDriverSeesOnlyProxies(t *testing.T) {
	t.Parallel()
	node3 := fakeNode(t, "127.0.0.3:0", fakenode.Options{Peers: []string{"127.0.0.4"}, PeersV2: true})
	node4 := fakeNode(t, "127.0.0.4:0", fakenode.Options{Peers: []string{"127.0.0.3"}, PeersV2: true})
	ln5, ln6 := listen(t, "127.0.0.5:0"), listen(t, "127.0.0.6:0")
	proxy5, proxy6 := ln5.Addr().String(), ln6.Addr().String()
	startProxyOn(t, ln5, func(c *config.Config) {
		c.Mode, c.Upstreams = config.ModeNode, []string{node3.Addr()}
		c.Peers = map[string]string{"127.0.0.4": proxy6}
	})
	startProxyOn(t, ln6, func(c *config.Config) {
		c.Mode, c.Upstreams = config.ModeNode, []string{node4.Addr()}
		c.Peers = map[string]string{"127.0.0.3": proxy5}
	})

	rec := &recorder{}
	cluster := gocql.NewCluster(proxy5)
	cluster.ProtoVersion = 4
	cluster.HostFilter = rec
	cluster.Dialer = rec
	cluster.DisableInitialHostLookup = false
	s, err := cluster.CreateSession()
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	defer s.Close()
	var rpc string
	if err := s.Query("SELECT rpc_address FROM system.local").Scan(&rpc); err != nil {
		t.Fatalf("system.local: %v", err)
	}
	// Let the pool reach the peer.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && len(uniq(rec.dials)) < 2 {
		time.Sleep(50 * time.Millisecond)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if got, want := uniq(rec.hosts), []string{"127.0.0.5", "127.0.0.6"}; !slices.Equal(got, want) {
		t.Errorf("driver learned hosts %v, want the proxies %v", got, want)
	}
	if got, want := uniq(rec.dials), []string{proxy5, proxy6}; !slices.Equal(got, want) {
		t.Errorf("driver dialed %v, want the proxies %v", got, want)
	}
}

// In cluster mode a driver sees the proxy as the only node, owning the
// whole ring, in every protocol version and compression.
func TestClusterModeTopology(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.3:0", fakenode.Options{Peers: []string{"127.0.0.4"}})
	ln := listen(t, "127.0.0.5:0")
	p := startProxyOn(t, ln, func(c *config.Config) { c.Upstreams = []string{node.Addr()} })
	for _, tc := range []struct {
		proto int
		comp  gocql.Compressor
	}{
		{3, nil}, {4, nil}, {4, lz4.LZ4Compressor{}}, {4, snappy.SnappyCompressor{}}, {5, nil}, {5, lz4.LZ4Compressor{}},
	} {
		name := "none"
		if tc.comp != nil {
			name = tc.comp.Name()
		}
		t.Run(fmt.Sprintf("v%d-%s", tc.proto, name), func(t *testing.T) {
			rec := &recorder{}
			cluster := gocql.NewCluster(ln.Addr().String())
			cluster.ProtoVersion = tc.proto
			cluster.Compressor = tc.comp
			cluster.HostFilter = rec
			cluster.Dialer = rec
			s, err := cluster.CreateSession()
			if err != nil {
				t.Fatalf("CreateSession: %v", err)
			}
			defer s.Close()
			var rpc, broadcast net.IP
			var hostID gocql.UUID
			var tokens []string
			if err := s.Query("SELECT rpc_address, broadcast_address, host_id, tokens FROM system.local").Scan(&rpc, &broadcast, &hostID, &tokens); err != nil {
				t.Fatalf("system.local: %v", err)
			}
			if rpc.String() != "127.0.0.5" || broadcast.String() != "127.0.0.5" {
				t.Errorf("rpc_address %s, broadcast_address %s; want the proxy", rpc, broadcast)
			}
			if hostID != gocql.UUID(p.topo.hostID) {
				t.Errorf("host_id %s is not the proxy's", hostID)
			}
			if !slices.Equal(tokens, []string{wholeRing}) {
				t.Errorf("tokens %v, want the whole ring", tokens)
			}
			// A prepared topology query is rewritten too.
			if err := s.Query("SELECT rpc_address FROM system.local WHERE key = ?", "local").Scan(&rpc); err != nil || rpc.String() != "127.0.0.5" {
				t.Errorf("prepared system.local: %s, %v", rpc, err)
			}
			n := s.Query("SELECT peer FROM system.peers").Iter().NumRows()
			if n != 0 {
				t.Errorf("system.peers has %d rows, want none", n)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if got := uniq(rec.hosts); !slices.Equal(got, []string{"127.0.0.5"}) {
				t.Errorf("driver learned hosts %v, want the proxy only", got)
			}
		})
	}
}

// rawConn dials the proxy for tests that speak bytes.
func rawConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}

func errorOf(t *testing.T, h frame.Header, body []byte) (int32, string) {
	t.Helper()
	if h.Opcode != frame.OpError || len(body) < 6 {
		t.Fatalf("want ERROR, got %s", h.Opcode)
	}
	n := binary.BigEndian.Uint16(body[4:6])
	return int32(binary.BigEndian.Uint32(body)), string(body[6 : 6+n])
}

// Bad input gets a protocol error, and the connection goes on where it can.
func TestBadFrames(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{})
	_, addr := startProxy(t, func(c *config.Config) {
		c.Listen, c.Upstreams = "127.0.0.1:0", []string{node.Addr()}
		c.MaxFrameBytes = 1024
	})

	t.Run("too large, then usable", func(t *testing.T) {
		c := rawConn(t, addr)
		big := frame.AppendHeader(nil, frame.Header{Version: 4, Stream: 3, Opcode: frame.OpQuery, Length: 4096})
		big = append(big, make([]byte, 4096)...)
		options := frame.AppendHeader(nil, frame.Header{Version: 4, Stream: 4, Opcode: frame.OpOptions})
		c.Write(append(big, options...))
		r := frame.NewReader(bufio.NewReader(c), 1<<20)
		f, h, err := r.Next()
		if err != nil || h.Stream != 3 || h.Opcode != frame.OpError {
			t.Fatalf("want ERROR on stream 3, got %v %v", h, err)
		}
		code, msg := errorOf(t, h, f[frame.HeaderSize:])
		if code != frame.ErrCodeProtocol || !strings.Contains(msg, "exceeds") {
			t.Errorf("got %#x %q", code, msg)
		}
		_, h, err = r.Next()
		if err != nil || h.Stream != 4 || h.Opcode != frame.OpSupported {
			t.Fatalf("after the refused frame want SUPPORTED on stream 4, got %v %v", h, err)
		}
	})

	for _, v := range []byte{1, 2, 6, 0x41} {
		t.Run("version "+string('0'+v), func(t *testing.T) {
			c := rawConn(t, addr)
			c.Write([]byte{v, 0, 0, 1, byte(frame.OpOptions), 0, 0, 0, 0})
			b, _ := io.ReadAll(c)
			if len(b) < 8 || b[0]&0x80 == 0 {
				t.Fatalf("want an ERROR response, got % x", b)
			}
			if !bytes.Contains(b, []byte("Invalid or unsupported protocol version")) {
				t.Errorf("message missing: %q", b)
			}
		})
	}
}
