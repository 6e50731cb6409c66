package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	pframe "github.com/datastax/go-cassandra-native-protocol/frame"
	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

// rawClient speaks frames to the proxy, encoding and decoding them with the
// oracle's codec, so that tests see exactly what crosses the wire.
type rawClient struct {
	t    *testing.T
	c    net.Conn
	r    *frame.Reader
	v    primitive.ProtocolVersion
	segs *frame.SegmentWriter
}

func dialRaw(t *testing.T, addr string, v primitive.ProtocolVersion) *rawClient {
	c := rawConn(t, addr)
	return &rawClient{t: t, c: c, r: frame.NewReader(bufio.NewReader(c), frame.MaxBodySize), v: v}
}

func (c *rawClient) send(stream int16, msg message.Message) {
	c.t.Helper()
	c.sendFrame(pframe.NewFrame(c.v, stream, msg))
}

// sendFrame sends f, which a test may have given flags or a payload, with
// edits, when given, to its encoded bytes.
func (c *rawClient) sendFrame(f *pframe.Frame, edits ...func([]byte)) {
	c.t.Helper()
	var b bytes.Buffer
	if err := pframe.NewCodec().EncodeFrame(f, &b); err != nil {
		c.t.Fatal(err)
	}
	out := b.Bytes()
	for _, edit := range edits {
		edit(out)
	}
	if c.segs != nil {
		out = c.segs.AppendFrames(nil, out)
	}
	if _, err := c.c.Write(out); err != nil {
		c.t.Fatal(err)
	}
}

func (c *rawClient) recv() *pframe.Frame {
	c.t.Helper()
	f, _, err := c.r.Next()
	if err != nil {
		c.t.Fatalf("reading from the proxy: %v", err)
	}
	out, err := pframe.NewCodec().DecodeFrame(bytes.NewReader(f))
	if err != nil {
		c.t.Fatalf("decoding %x: %v", f, err)
	}
	return out
}

// startup completes the handshake, switching to segments on v5.
func (c *rawClient) startup(opts map[string]string) {
	c.t.Helper()
	if opts == nil {
		opts = map[string]string{}
	}
	opts["CQL_VERSION"] = "3.0.0"
	c.send(0, &message.Startup{Options: opts})
	if f := c.recv(); f.Header.OpCode != primitive.OpCodeReady {
		c.t.Fatalf("STARTUP answered with %v", f.Body.Message)
	}
	if c.v >= 5 {
		c.segs = frame.NewSegmentWriter(false)
		c.r.UseSegments(false)
	}
}

func TestSupportedAndStartupOptIn(t *testing.T) {
	t.Parallel()
	plain := fakeNode(t, "127.0.0.1:0", fakenode.Options{Supported: map[string][]string{
		"SCYLLA_SHARD": {"3"}, "SCYLLA_NR_SHARDS": {"8"}, "SCYLLA_SHARD_AWARE_PORT": {"19042"},
		"TABLETS_ROUTING_V1": {""}, "SCYLLA_LWT_ADD_METADATA_MARK": {"LWT_OPTIMIZATION_META_BIT_MASK=2147483648"},
	}})
	scylla := fakeNode(t, "127.0.0.1:0", fakenode.Options{Supported: map[string][]string{
		rateLimitKey: {"ERROR_CODE=61440"}}})
	_, plainAddr := startProxy(t, func(c *config.Config) { c.Listen, c.Upstreams = "127.0.0.1:0", []string{plain.Addr()} })
	_, scyllaAddr := startProxy(t, func(c *config.Config) { c.Listen, c.Upstreams = "127.0.0.1:0", []string{scylla.Addr()} })

	c := dialRaw(t, plainAddr, 4)
	c.send(1, &message.Options{})
	sup := c.recv().Body.Message.(*message.Supported).Options
	if got := sup[rateLimitKey]; len(got) != 1 || got[0] != "ERROR_CODE=61440" {
		t.Errorf("%s = %v, want ERROR_CODE=61440", rateLimitKey, got)
	}
	for _, k := range []string{"SCYLLA_SHARD", "SCYLLA_NR_SHARDS", "SCYLLA_SHARD_AWARE_PORT", "TABLETS_ROUTING_V1"} {
		if _, ok := sup[k]; ok {
			t.Errorf("SUPPORTED still has %s", k)
		}
	}
	for _, k := range []string{"SCYLLA_LWT_ADD_METADATA_MARK", "COMPRESSION", "CQL_VERSION"} {
		if _, ok := sup[k]; !ok {
			t.Errorf("SUPPORTED lost %s", k)
		}
	}

	// The opt-in reaches only an upstream that advertised it.
	c.startup(map[string]string{rateLimitKey: ""})
	if _, ok := plain.Startups()[0].Options[rateLimitKey]; ok {
		t.Errorf("opt-in forwarded to an upstream that does not support it")
	}
	c2 := dialRaw(t, scyllaAddr, 4)
	c2.startup(map[string]string{rateLimitKey: ""})
	if _, ok := scylla.Startups()[0].Options[rateLimitKey]; !ok {
		t.Errorf("opt-in not forwarded to an upstream that supports it")
	}
}

// recvPrepared reads a RESULT Prepared and reports whether it carries
// ScyllaDB's LWT mark; the oracle's codec has no field for the mark.
func (c *rawClient) recvPrepared() (lwt bool) {
	c.t.Helper()
	f, h, err := c.r.Next()
	if err != nil {
		c.t.Fatalf("reading from the proxy: %v", err)
	}
	msg, _ := frame.ResponseMessage(f[frame.HeaderSize:], h)
	p, err := frame.ParsePrepared(msg, h.Version)
	if err != nil {
		c.t.Fatalf("RESULT Prepared: %v", err)
	}
	return p.LWT
}

// TestLWTMark checks that the proxy offers ScyllaDB's LWT mark whatever the
// upstream, and, in front of a node that does not set it, sets it on the
// conditional statements a driver that asked for it prepares: ScyllaDB's
// gocql fork takes every prepared statement for conditional when a
// server that advertises the rate-limit error does not offer the mark.
func TestLWTMark(t *testing.T) {
	t.Parallel()
	mask := "LWT_OPTIMIZATION_META_BIT_MASK=2147483648"
	plain := fakeNode(t, "127.0.0.1:0", fakenode.Options{})
	scylla := fakeNode(t, "127.0.0.1:0", fakenode.Options{Supported: map[string][]string{lwtMarkKey: {mask}}})
	_, plainAddr := startProxy(t, func(c *config.Config) { c.Listen, c.Upstreams = "127.0.0.1:0", []string{plain.Addr()} })
	_, scyllaAddr := startProxy(t, func(c *config.Config) { c.Listen, c.Upstreams = "127.0.0.1:0", []string{scylla.Addr()} })
	const (
		conditional = "UPDATE ks.t SET v = ? WHERE k = ? IF v = ?"
		plainWrite  = "INSERT INTO ks.t (k, v) VALUES (?, ?)"
	)
	tests := []struct {
		name      string
		node      *fakenode.Node
		addr      string
		v         primitive.ProtocolVersion
		optIn     bool
		forwarded bool // the opt-in reaches the node
		marked    bool // the conditional statement comes back marked
	}{
		{"plain node v3", plain, plainAddr, 3, true, false, true},
		{"plain node v4", plain, plainAddr, 4, true, false, true},
		{"plain node v5", plain, plainAddr, 5, true, false, true},
		{"plain node, no opt-in", plain, plainAddr, 4, false, false, false},
		// A node that offers the mark sets it itself; this one never does.
		{"marking node", scylla, scyllaAddr, 4, true, true, false},
	}
	for _, tt := range tests {
		c := dialRaw(t, tt.addr, tt.v)
		c.send(1, &message.Options{})
		if got := c.recv().Body.Message.(*message.Supported).Options[lwtMarkKey]; !reflect.DeepEqual(got, []string{mask}) {
			t.Errorf("%s: SUPPORTED %s = %q, want [%s]", tt.name, lwtMarkKey, got, mask)
		}
		opts := map[string]string{}
		if tt.optIn {
			opts[lwtMarkKey] = mask
		}
		c.startup(opts)
		startups := tt.node.Startups()
		if _, got := startups[len(startups)-1].Options[lwtMarkKey]; got != tt.forwarded {
			t.Errorf("%s: opt-in forwarded %v, want %v", tt.name, got, tt.forwarded)
		}
		for i, q := range []string{conditional, plainWrite} {
			c.send(int16(2+i), &message.Prepare{Query: q})
			if got, want := c.recvPrepared(), tt.marked && q == conditional; got != want {
				t.Errorf("%s: %s marked %v, want %v", tt.name, q, got, want)
			}
		}
	}
}

func TestEventsFiltered(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{})
	_, clusterAddr := startProxy(t, func(c *config.Config) { c.Listen, c.Upstreams = "127.0.0.1:0", []string{node.Addr()} })
	nodeNode := fakeNode(t, "127.0.0.1:0", fakenode.Options{})
	_, nodeAddr := startProxy(t, func(c *config.Config) {
		c.Listen, c.Mode, c.Upstreams = "127.0.0.1:0", config.ModeNode, []string{nodeNode.Addr()}
		c.Peers = map[string]string{"127.0.0.8": "127.0.0.9:19046"}
	})
	up := func(ip byte) message.Message {
		return &message.StatusChangeEvent{ChangeType: primitive.StatusChangeTypeUp, Address: &primitive.Inet{Addr: net.IP{127, 0, 0, ip}, Port: 9042}}
	}
	schema := &message.SchemaChangeEvent{ChangeType: primitive.SchemaChangeTypeCreated, Target: primitive.SchemaChangeTargetKeyspace, Keyspace: "ks"}
	topology := &message.TopologyChangeEvent{ChangeType: primitive.TopologyChangeTypeNewNode, Address: &primitive.Inet{Addr: net.IP{127, 0, 0, 8}, Port: 9042}}

	for _, v := range []primitive.ProtocolVersion{4, 5} {
		// Cluster mode: node events are withheld, schema events pass.
		c := dialRaw(t, clusterAddr, v)
		c.startup(nil)
		c.send(1, &message.Register{EventTypes: []primitive.EventType{primitive.EventTypeTopologyChange, primitive.EventTypeStatusChange, primitive.EventTypeSchemaChange}})
		c.recv()
		node.PushEvent(up(8))
		node.PushEvent(topology)
		node.PushEvent(schema)
		if got := c.recv().Body.Message; !equalMessages(got, schema) {
			t.Errorf("v%d cluster mode: first event through is %v, want the schema change", v, got)
		}

		// Node mode: events about a mapped peer name its proxy; others are withheld.
		c = dialRaw(t, nodeAddr, v)
		c.startup(nil)
		c.send(1, &message.Register{EventTypes: []primitive.EventType{primitive.EventTypeStatusChange}})
		c.recv()
		nodeNode.PushEvent(up(7))
		nodeNode.PushEvent(up(8))
		ev, ok := c.recv().Body.Message.(*message.StatusChangeEvent)
		if !ok || ev.Address.Addr.String() != "127.0.0.9" || ev.Address.Port != 19046 {
			t.Errorf("v%d node mode: got %v, want UP for the proxy 127.0.0.9:19046", v, ev)
		}
	}
}

func equalMessages(a, b message.Message) bool {
	return reflect.DeepEqual(a, b)
}

// A driver asking for v5 of an upstream that speaks only v4 gets the
// upstream's refusal and settles on v4.
func TestVersionDowngrade(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{MaxVersion: 4})
	_, addr := startProxy(t, func(c *config.Config) { c.Listen, c.Upstreams = "127.0.0.1:0", []string{node.Addr()} })

	c := dialRaw(t, addr, 5)
	c.send(0, &message.Startup{Options: map[string]string{"CQL_VERSION": "3.0.0"}})
	f, _, err := c.r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := frame.ParseHeader(f); h.Opcode != frame.OpError || !bytes.Contains(f, []byte("unsupported protocol version")) {
		t.Fatalf("v5 STARTUP: got %s %q", h.Opcode, f)
	}
	// The same connection goes on in v4.
	c.v = 4
	c.startup(nil)

	cluster := gocql.NewCluster(addr)
	s, err := cluster.CreateSession()
	if err != nil {
		t.Fatalf("driver negotiating its version: %v", err)
	}
	s.Close()
}

// Shutdown lets a request in flight finish, then closes the connection.
func TestDrainAnswersInFlight(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{SlowQuery: "slow", SlowFor: 300 * time.Millisecond})
	cfg := config.Default()
	cfg.Listen, cfg.Upstreams, cfg.Admin.Listen = "127.0.0.1:0", []string{node.Addr()}, ""
	p, err := New(cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{}))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ln)
	addr := ln.Addr().String()

	c := dialRaw(t, addr, 4)
	c.startup(nil)
	c.send(5, &message.Query{Query: "SELECT v FROM ks.slow", Options: &message.QueryOptions{}})
	waitUntil(t, "the request in flight", func() bool { return p.inflight.Taken() == 1 })
	done := make(chan error)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- p.Shutdown(ctx)
	}()
	if f := c.recv(); f.Header.StreamId != 5 || f.Header.OpCode != primitive.OpCodeResult {
		t.Fatalf("in-flight request answered with %v", f.Body.Message)
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if _, err := c.c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("connection not closed after draining: %v", err)
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Error("still accepting after Shutdown")
	}
}

func TestAdminEndpoints(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{})
	reg := prometheus.NewRegistry()
	cfg := config.Default()
	cfg.Listen, cfg.Upstreams = "127.0.0.1:0", []string{node.Addr()}
	p, err := New(cfg, testLogger(), reg, WithSchema(staticSchema{}))
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", cfg.Listen)
	go p.Serve(ln)
	defer p.Shutdown(context.Background())
	srv := httptest.NewServer(adminHandler(t, p, reg))
	defer srv.Close()

	c := dialRaw(t, ln.Addr().String(), 4)
	c.startup(nil)
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz %d", code)
	}
	if code, body := get("/readyz"); code != 200 {
		t.Errorf("/readyz %d %s", code, body)
	}
	code, body := get("/metrics")
	for _, want := range []string{
		`cqlguard_frames_total{direction="request",opcode="STARTUP"} 1`,
		`cqlguard_frames_total{direction="response",opcode="READY"} 1`,
		"cqlguard_client_connections 1", "cqlguard_upstream_request_duration_seconds_count 1",
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	node.Close()
	// The health connection sees the node go at once; the probe reads
	// what it saw.
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body := get("/readyz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, node.Addr()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz with the upstream down: %d %s", code, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An EXECUTE of a statement the proxy never saw prepared is answered with
// Unprepared, and works once prepared through the proxy.
func TestUnknownExecuteIsUnprepared(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{})
	_, addr := startProxy(t, func(c *config.Config) { c.Listen, c.Upstreams = "127.0.0.1:0", []string{node.Addr()} })
	for _, v := range []primitive.ProtocolVersion{3, 4, 5} {
		c := dialRaw(t, addr, v)
		c.startup(nil)
		q := fmt.Sprintf("SELECT v FROM ks.t WHERE k = %d", v) // one statement per version: the registry is shared
		id := md5.Sum([]byte(q))                               // the fake node's statement id
		exec := &message.Execute{QueryId: id[:], Options: &message.QueryOptions{}}
		if v >= 5 {
			exec.ResultMetadataId = id[:8]
		}
		c.send(3, exec)
		f := c.recv()
		un, ok := f.Body.Message.(*message.Unprepared)
		if !ok || f.Header.StreamId != 3 || !bytes.Equal(un.Id, id[:]) {
			t.Fatalf("v%d: unknown EXECUTE answered with %v", v, f.Body.Message)
		}
		c.send(4, &message.Prepare{Query: q})
		if _, ok := c.recv().Body.Message.(*message.PreparedResult); !ok {
			t.Fatalf("v%d: PREPARE failed", v)
		}
		c.send(5, exec)
		if f := c.recv(); f.Header.OpCode != primitive.OpCodeResult {
			t.Fatalf("v%d: EXECUTE after PREPARE answered with %v", v, f.Body.Message)
		}
	}
}
