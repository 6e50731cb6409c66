package proxy

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/datastax/go-cassandra-native-protocol/primitive"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/ring"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

// thirdsRing gives each of three nodes a third of the ring, in every
// keyspace.
type thirdsRing [3]string

func (r thirdsRing) Replicas(dst []string, keyspace string, token int64) []string {
	switch {
	case token < -3e18:
		return append(dst, r[0])
	case token < 3e18:
		return append(dst, r[1])
	}
	return append(dst, r[2])
}

// nodeOf returns the index of the node of r holding token.
func (r thirdsRing) nodeOf(token int64) int {
	switch {
	case token < -3e18:
		return 0
	case token < 3e18:
		return 1
	}
	return 2
}

// shardedProxy serves, until the test ends, a routed proxy in front of
// nodes, its one upstream the first, with edit applied to its
// configuration.
func shardedProxy(t *testing.T, nodes []*fakenode.Node, edit func(*config.Config)) (*Proxy, string, thirdsRing) {
	t.Helper()
	r := thirdsRing{nodes[0].Addr(), nodes[1].Addr(), nodes[2].Addr()}
	cfg := config.Default()
	cfg.Admin.Listen = ""
	cfg.Listen, cfg.Upstreams = "127.0.0.1:0", []string{nodes[0].Addr()}
	cfg.DialTimeout = config.Duration(time.Second)
	if edit != nil {
		edit(&cfg)
	}
	p, addr := serveProxy(t, cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{benchSnapshot(t)}), WithRing(r))
	return p, addr, r
}

// connsPerNode returns, for each session of p, how many connections it
// has to each node, and the most it has to one node's shard.
func connsPerNode(p *Proxy) (perNode []map[string]int, perShard int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := range p.sessions {
		s.mu.Lock()
		nodes := map[string]int{s.up.at: 1}
		shards := map[string]int{fmt.Sprint(s.up.at, "/", s.up.shard): 1}
		for _, u := range s.legs {
			nodes[u.at]++
			key := fmt.Sprint(u.at, "/", u.shard)
			shards[key]++
			perShard = max(perShard, shards[key])
		}
		s.mu.Unlock()
		perNode = append(perNode, nodes)
	}
	return perNode, max(perShard, 1)
}

// Requests for many keys through a routed proxy in front of three nodes
// of four shards each: each ran on its replica's shard that owns its
// token, by the node's own record of the shard that served it, and each
// client connection has at most one connection per shard of each node;
// with TLS to the nodes, through their TLS shard-aware port. With
// routing.shard_aware off, each has one connection per node, and the
// requests run on whatever shard that connection has.
func TestShardAwareRouting(t *testing.T) {
	t.Parallel()
	const shards, keys = 4, 300
	sharding := ring.Sharding{Shards: shards, IgnoreMSB: fakenode.IgnoreMSB}
	for _, tc := range []struct {
		aware, tls bool
	}{{true, false}, {false, false}, {true, true}} {
		t.Run(fmt.Sprintf("shard_aware=%t,tls=%t", tc.aware, tc.tls), func(t *testing.T) {
			t.Parallel()
			opts := fakenode.Options{Shards: shards, ShardAwarePort: true, RecordServed: true}
			var caFile string
			if tc.tls {
				ca := newTestCA(t)
				cert, key := ca.issue(t, "node", 5)
				nodeCert, err := tls.X509KeyPair(cert, key)
				if err != nil {
					t.Fatal(err)
				}
				opts.TLS = &tls.Config{Certificates: []tls.Certificate{nodeCert}}
				caFile = filepath.Join(t.TempDir(), "ca.pem")
				writeFile(t, caFile, ca.pem)
			}
			nodes := startNodes(t, 3, opts)
			p, addr, r := shardedProxy(t, nodes, func(c *config.Config) {
				c.Routing.ShardAware = tc.aware
				if tc.tls {
					c.UpstreamTLS = config.UpstreamTLSConfig{Enabled: true, CAFile: caFile}
				}
			})
			cluster := gocql.NewCluster(addr)
			cluster.NumConns = 2
			s, err := cluster.CreateSession()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for k := range keys {
				if err := s.Query("SELECT v FROM bench.kv WHERE k = ?", k).Exec(); err != nil {
					t.Fatalf("read of %d: %v", k, err)
				}
				if err := s.Query(fmt.Sprintf("UPDATE bench.kv SET v = 0x00 WHERE k = %d", k)).Exec(); err != nil {
					t.Fatalf("write of %d: %v", k, err)
				}
			}
			served, onShard, onNode := 0, 0, 0
			for i, n := range nodes {
				for _, rec := range n.Served() {
					served++
					if rec.Key == nil {
						t.Errorf("node %d served a request without a key", i)
						continue
					}
					if r.nodeOf(rec.Token) == i {
						onNode++
					}
					if sharding.ShardOf(rec.Token) == rec.Shard {
						onShard++
					}
				}
			}
			if served != 2*keys || onNode != served {
				t.Errorf("%d requests served, %d of them by their replica; want %d by their replica", served, onNode, 2*keys)
			}
			perNode, perShard := connsPerNode(p)
			for _, conns := range perNode {
				for node, n := range conns {
					if (tc.aware && n > shards) || (!tc.aware && n > 1) {
						t.Errorf("a client connection has %d connections to %s", n, node)
					}
				}
			}
			if perShard > 1 {
				t.Errorf("a client connection has %d connections to one shard", perShard)
			}
			if tc.aware && onShard != served {
				t.Errorf("%d of %d requests ran on the shard that owns their token", onShard, served)
			}
			if !tc.aware && onShard == served {
				t.Errorf("all %d requests ran on their token's shard with shard-awareness off", served)
			}
			t.Logf("%d of %d requests on their token's shard, connections per node %v", onShard, served, perNode)
		})
	}
}

// relay forwards each connection ln accepts to the address to, from a
// source port of another residue modulo shards than the client's, as an
// address translation that changes ports would, and counts them in
// relayed.
func relay(t *testing.T, ln net.Listener, to string, shards int, relayed *atomic.Int64) {
	t.Helper()
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			from := in.RemoteAddr().(*net.TCPAddr).Port
			var out net.Conn
			for port := shardPortLow + (from+1)%shards; port <= shardPortHigh && out == nil; port += shards {
				d := net.Dialer{LocalAddr: &net.TCPAddr{Port: port}}
				out, _ = d.Dial("tcp", to)
			}
			if out == nil {
				in.Close()
				continue
			}
			relayed.Add(1)
			t.Cleanup(func() { in.Close(); out.Close() })
			go func() { io.Copy(out, in); out.Close() }()
			go func() { io.Copy(in, out); in.Close() }()
		}
	}()
}

// A node whose shard-aware port gives connections another shard than
// their source port's, as behind an address translation, is not asked
// for shards again: each client connection keeps one connection to it,
// its requests all answered.
func TestShardAwarePortOfOtherShard(t *testing.T) {
	t.Parallel()
	const shards, keys = 4, 100
	opts := fakenode.Options{Shards: shards, ShardAwarePort: true, RecordServed: true}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nodes := startNodes(t, 2, opts)
	// The third node advertises the relay as its shard-aware port.
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	opts.Supported = map[string][]string{"SCYLLA_SHARD_AWARE_PORT": {port}}
	nodes = append(nodes, startNodes(t, 1, opts)...)
	var relayed atomic.Int64
	relay(t, ln, nodes[2].ShardAwareAddr(), shards, &relayed)
	p, addr, r := shardedProxy(t, nodes, nil)
	c := dialStub(t, addr)
	for k := range keys {
		c.answered(readKV(int16(k+1), "bench.kv", k), int16(k+1))
	}
	servedByOwners(t, nodes, r, keys)
	perNode, _ := connsPerNode(p)
	if n := perNode[0][nodes[2].Addr()]; n != 1 {
		t.Errorf("the client connection has %d connections to the node behind the relay, want 1", n)
	}
	if n, f := relayed.Load(), testutil.ToFloat64(p.metrics.legsFailed); n != 1 || f != 1 {
		t.Errorf("%d connections through the relay, %v failed; want 1 and 1: the shard-aware port is tried once", n, f)
	}
}

// A node that advertises its shards but no shard-aware port gets one
// connection per client connection, whatever shard serves it, and takes
// its requests there.
func TestShardsWithoutShardAwarePort(t *testing.T) {
	t.Parallel()
	const keys = 100
	nodes := startNodes(t, 3, fakenode.Options{Shards: 4, RecordServed: true})
	p, addr, r := shardedProxy(t, nodes, nil)
	c := dialStub(t, addr)
	for k := range keys {
		c.answered(readKV(int16(k+1), "bench.kv", k), int16(k+1))
	}
	servedByOwners(t, nodes, r, keys)
	perNode, _ := connsPerNode(p)
	for _, conns := range perNode {
		for node, n := range conns {
			if n != 1 {
				t.Errorf("the client connection has %d connections to %s, want 1", n, node)
			}
		}
	}
}

// keyOnShard returns a key held by node of r, on shard of sharding, and not
// below from.
func keyOnShard(r thirdsRing, sharding ring.Sharding, node, shard, from int) int {
	for k := from; ; k++ {
		token := tokenOf(binary.BigEndian.AppendUint64(nil, uint64(k)))
		if r.nodeOf(token) == node && sharding.ShardOf(token) == shard {
			return k
		}
	}
}

// A node's shard that drops the session's connection to it with a request
// in flight, as a node going down does, costs that request alone, answered
// at once with the error of a lost node, as when a connection to a node
// is lost; the session's other requests are answered, and once the node
// is tried again, the next request for that shard opens a connection to it
// again.
func TestShardConnectionLost(t *testing.T) {
	t.Parallel()
	const shards = 4
	sharding := ring.Sharding{Shards: shards, IgnoreMSB: fakenode.IgnoreMSB}
	nodes := startNodes(t, 3, fakenode.Options{Shards: shards, ShardAwarePort: true, RecordServed: true, ResetQuery: "drop"})
	p, addr, r := shardedProxy(t, nodes, nil)
	c := dialStub(t, addr)
	c.c.SetDeadline(time.Now().Add(10 * time.Second))
	kLost, kOther := keyOnShard(r, sharding, 1, 2, 0), keyOnShard(r, sharding, 1, 3, 0)
	c.answered(readKV(1, "bench.kv", kLost), 1)
	c.answered(readKV(2, "bench.kv", kOther), 2)
	s := onlySession(t, p)
	node := nodes[1].Addr()
	if s.connTo(node, 2) == nil || s.connTo(node, 3) == nil {
		t.Fatal("no connection to node 1's shards 2 and 3")
	}
	c.write(stubQuery(3, fmt.Sprintf("SELECT drop FROM bench.kv WHERE k = %d", kLost)))
	stream, op, msg, err := c.nextOp()
	if err != nil || stream != 3 || op != frame.OpError || !strings.Contains(msg, "may or may not have been applied") {
		t.Fatalf("want a server error on stream 3, got %s %q on stream %d, %v", op, msg, stream, err)
	}
	waitUntil(t, "the shard's connection gone", func() bool { return s.connTo(node, 2) == nil })
	if s.connTo(node, 3) == nil {
		t.Error("shard 3's connection lost with shard 2's")
	}
	// The node is avoided a while, as after any lost connection: its
	// requests run on the first node meanwhile.
	c.answered(readKV(4, "bench.kv", kOther), 4)
	c.answered(readKV(5, "bench.kv", kLost), 5)
	p.nodes.up(nodes[1].Addr())
	c.answered(readKV(6, "bench.kv", kLost), 6)
	if s.connTo(node, 2) == nil {
		t.Error("no connection to node 1's shard 2 again")
	}
	lost := 0
	for _, rec := range nodes[1].Served() {
		if want := sharding.ShardOf(rec.Token); rec.Shard != want {
			t.Errorf("node 1's shard %d served a request of shard %d", rec.Shard, want)
		}
		if rec.Shard == 2 {
			lost++
		}
	}
	// The node drops the connection before it records the request.
	if lost != 2 {
		t.Errorf("node 1's shard 2 served %d requests, want 2 (before the drop, after)", lost)
	}
	waitUntil(t, "max_in_flight given back", func() bool { return p.inflight.Taken() == 0 })
}

// Finding a request's shard and the session's connection to it allocates
// nothing: it is on the path of every routed request.
func TestShardLookupAllocatesNothing(t *testing.T) {
	sharding := ring.Sharding{Shards: 4, IgnoreMSB: fakenode.IgnoreMSB}
	nodes := startNodes(t, 3, fakenode.Options{Shards: 4, ShardAwarePort: true})
	p, addr, r := shardedProxy(t, nodes, nil)
	c := dialStub(t, addr)
	var tokens []int64
	for shard := range 4 {
		k := keyOnShard(r, sharding, 2, shard, 0)
		tokens = append(tokens, tokenOf(binary.BigEndian.AppendUint64(nil, uint64(k))))
		c.answered(readKV(int16(shard+1), "bench.kv", k), int16(shard+1))
	}
	s := onlySession(t, p)
	node := nodes[2].Addr()
	var missing int
	if n := testing.AllocsPerRun(100, func() {
		for _, token := range tokens {
			if s.connTo(node, s.shardFor(node, token)) == nil {
				missing++
			}
		}
	}); n != 0 {
		t.Errorf("%v allocations per lookup of 4 shards' connections", n)
	}
	if missing > 0 {
		t.Errorf("%d lookups found no connection", missing)
	}
}

// encodeMultimap encodes opts as a [string multimap], keys in order.
func encodeMultimap(t testing.TB, opts map[string][]string) []byte {
	var b bytes.Buffer
	if err := primitive.WriteStringMultiMap(opts, &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// The SUPPORTED options parser reads what the reference codec writes, and
// only that.
func FuzzSupportedOptions(f *testing.F) {
	f.Add(encodeMultimap(f, map[string][]string{"SCYLLA_SHARD": {"3"}, "SCYLLA_NR_SHARDS": {"8"}, "COMPRESSION": {"lz4", "snappy"}, "EMPTY": {}}))
	f.Add(encodeMultimap(f, map[string][]string{}))
	f.Add([]byte{0, 1, 0, 1, 'K', 0, 2, 0, 0})
	f.Add([]byte{0, 2, 0, 1})
	f.Fuzz(func(t *testing.T, body []byte) {
		h := frame.Header{Version: 4, Response: true, Opcode: frame.OpSupported}
		got, err := supportedOptions(body, h)
		want, wantErr := primitive.ReadStringMultiMap(bytes.NewReader(body))
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("supportedOptions: %v; reference: %v", err, wantErr)
		}
		if err != nil {
			return
		}
		for k, v := range want {
			if v == nil {
				want[k] = []string{}
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("supportedOptions = %v, reference %v", got, want)
		}
		if s, ok, err := shardingOf(body, h); ok && (err != nil || s.Shards < 1 || s.Shard >= s.Shards) {
			t.Fatalf("shardingOf = %+v, %v, %v", s, ok, err)
		}
	})
}

// servedByOwners checks that the nodes served keys reads in all, each on
// the node r places its token on.
func servedByOwners(t *testing.T, nodes []*fakenode.Node, r thirdsRing, keys int) {
	t.Helper()
	served := 0
	for i, n := range nodes {
		for _, rec := range n.Served() {
			served++
			if r.nodeOf(rec.Token) != i {
				t.Errorf("node %d served key %x of node %d", i, rec.Key, r.nodeOf(rec.Token))
			}
		}
	}
	if served != keys {
		t.Errorf("%d reads served, want %d", served, keys)
	}
}
