package proxy

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/apache/cassandra-gocql-driver/v2/lz4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/schema"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

// splitRing gives the tokens below zero to one node and the others to
// another, in every keyspace.
type splitRing struct{ low, high string }

func (r splitRing) Replicas(dst []string, keyspace string, token int64) []string {
	if token < 0 {
		return append(dst, r.low)
	}
	return append(dst, r.high)
}

// benchSnapshot is the schema of the fake node's table, bench.kv.
func benchSnapshot(t testing.TB) *schema.Snapshot {
	ty, err := schema.ParseType("bigint", nil, "bench")
	if err != nil {
		t.Fatal(err)
	}
	return schema.NewSnapshot([]*schema.Table{{Keyspace: "bench", Name: "kv", PartitionKey: []schema.Column{{Name: "k", Type: ty}}}})
}

// Each request with a partition runs on the node that holds it, whatever
// node its connection began with: prepared statements are prepared there
// once, the client's login and keyspace are taken there, and the node the
// driver connected to sees none of them.
func TestRoutedToReplica(t *testing.T) {
	t.Parallel()
	nodes := startNodes(t, 3, fakenode.Options{Username: "app", Password: "secret"})
	_, addr := routedProxy(t, nodes[0].Addr(), splitRing{low: nodes[1].Addr(), high: nodes[2].Addr()})

	const keys = 100
	low := 0
	for k := range keys {
		if tokenOf(binary.BigEndian.AppendUint64(nil, uint64(k))) < 0 {
			low++
		}
	}
	for _, tc := range []struct {
		proto int
		comp  gocql.Compressor
		use   bool
	}{
		{4, nil, false}, {4, lz4.LZ4Compressor{}, true}, {5, nil, true}, {5, lz4.LZ4Compressor{}, false},
	} {
		t.Run(fmt.Sprintf("v%d-lz4=%t-use=%t", tc.proto, tc.comp != nil, tc.use), func(t *testing.T) {
			cluster := gocql.NewCluster(addr)
			cluster.ProtoVersion = tc.proto
			cluster.Compressor = tc.comp
			cluster.NumConns = 1
			cluster.Authenticator = gocql.PasswordAuthenticator{Username: "app", Password: "secret"}
			table := "bench.kv"
			if tc.use {
				cluster.Keyspace = "bench"
				table = "kv"
			}
			s, err := cluster.CreateSession()
			if err != nil {
				t.Fatalf("CreateSession: %v", err)
			}
			defer s.Close()
			var before [3]uint64
			for i, n := range nodes {
				before[i] = n.Requests()
			}
			for k := range keys {
				if err := s.Query("SELECT v FROM "+table+" WHERE k = ?", k).Exec(); err != nil {
					t.Fatalf("prepared read of %d: %v", k, err)
				}
				if err := s.Query(fmt.Sprintf("UPDATE %s SET v = 0x00 WHERE k = %d", table, k)).Idempotent(true).Exec(); err != nil {
					t.Fatalf("write of %d: %v", k, err)
				}
			}
			// gocql prepares every statement, the literal writes too.
			// The driver's node got each PREPARE. Each other node got,
			// for each partition it holds, a read and a write, and the
			// write's statement prepared; the read's statement prepared
			// once, and the connection's OPTIONS, STARTUP and login, and
			// its USE.
			opened := uint64(3)
			if tc.use {
				opened++
			}
			want := [3]uint64{1 + keys, uint64(3*low+1) + opened, uint64(3*(keys-low)+1) + opened}
			var got [3]uint64
			for i, n := range nodes {
				got[i] = n.Requests() - before[i]
			}
			// The driver's control connection may ask its node something
			// meanwhile; the other two nodes' exact counts show that
			// every read and write ran on them.
			if got[1] != want[1] || got[2] != want[2] || got[0] < want[0] || got[0] > want[0]+10 {
				t.Errorf("requests per node %v, want %v", got, want)
			}
		})
	}
}

// proxyHeap returns the heap in use that the proxy's own code allocated,
// as the memory profile saw it at the last collection: what was allocated
// with a frame of a non-test file of proxy/ or transport/ on its stack,
// and none of a test file's or the fake node's. It needs
// runtime.MemProfileRate at 1 from before the allocations.
func proxyHeap() int64 {
	for range 3 {
		runtime.GC()
	}
	n, _ := runtime.MemProfile(nil, false)
	recs := make([]runtime.MemProfileRecord, n+64)
	n, _ = runtime.MemProfile(recs, false)
	var sum int64
	for _, r := range recs[:n] {
		frames := runtime.CallersFrames(r.Stack())
		own := false
		for {
			f, more := frames.Next()
			if strings.HasSuffix(f.File, "_test.go") || strings.Contains(f.Function, "/fakenode.") {
				own = false
				break
			}
			if strings.HasPrefix(f.Function, "github.com/cqlguard/cqlguard/proxy.") || strings.HasPrefix(f.Function, "github.com/cqlguard/cqlguard/transport.") {
				own = true
			}
			if !more {
				break
			}
		}
		if own {
			sum += r.InUseBytes()
		}
	}
	return sum
}

// proxyGoroutines counts the goroutines the proxy's code started.
func proxyGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "\ncreated by github.com/cqlguard/cqlguard/proxy.")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// A connection a session opens to another node costs the proxy less than
// an idle client connection does: its goroutine, its writer, and read
// buffers only while bytes arrive. The figures are logged (go test -run
// IdleLegMemory -v).
func TestIdleLegMemory(t *testing.T) {
	defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
	runtime.MemProfileRate = 1
	nodes := startNodes(t, 3, fakenode.Options{})
	p, addr := routedProxy(t, nodes[0].Addr(), splitRing{low: nodes[1].Addr(), high: nodes[2].Addr()})
	const n = 100
	// cost opens n sessions and has each read the keys, and returns the
	// proxy's heap per session once they are idle.
	cost := func(keys ...int) (heap, goroutines float64) {
		settle(t)
		heap0, g0 := proxyHeap(), proxyGoroutines()
		conns := make([]*stubClient, n)
		for i := range conns {
			conns[i] = dialStub(t, addr)
			for j, k := range keys {
				conns[i].write(stubQuery(int16(j), fmt.Sprintf("SELECT v FROM bench.kv WHERE k = %d", k)))
				if _, code, msg, err := conns[i].next(); err != nil || code != 0 {
					t.Fatalf("read: %#x %s %v", code, msg, err)
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
		tickSessions(p)
		tickSessions(p)
		heap1, g1 := proxyHeap(), proxyGoroutines()
		for _, c := range conns {
			c.c.Close()
		}
		return float64(heap1-heap0) / n, float64(g1-g0) / n
	}
	low, high := keyOn(true), keyOn(false)
	one, oneG := cost()
	three, threeG := cost(low, high)
	leg, legG := (three-one)/2, (threeG-oneG)/2
	t.Logf("the proxy's heap per idle session: %.0f B with one connection to a node, %.0f B with three; per connection to another node %.0f B and %.1f goroutines (%.1f per session)",
		one, three, leg, legG, oneG)
	if leg > one {
		t.Errorf("an idle connection to another node costs %.0f B of heap, more than a whole session with one (%.0f B)", leg, one)
	}
}

// startNodes starts n fake nodes with opts, closed when the test ends.
func startNodes(t *testing.T, n int, opts fakenode.Options) []*fakenode.Node {
	t.Helper()
	nodes := make([]*fakenode.Node, n)
	for i := range nodes {
		node, err := fakenode.Start("127.0.0.1:0", opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(node.Close)
		nodes[i] = node
	}
	return nodes
}

// routedProxy serves, until the test ends, a proxy whose one upstream is
// up and that routes by ring, with bench.kv's schema, and returns it and
// its address.
func routedProxy(t *testing.T, up string, ring Ring) (*Proxy, string) {
	t.Helper()
	cfg := config.Default()
	cfg.Admin.Listen = ""
	cfg.Listen, cfg.Upstreams = "127.0.0.1:0", []string{up}
	cfg.DialTimeout = config.Duration(time.Second)
	return serveProxy(t, cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{benchSnapshot(t)}), WithRing(ring))
}
