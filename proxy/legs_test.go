package proxy

import (
	"encoding/binary"
	"fmt"
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
	opts := fakenode.Options{Username: "app", Password: "secret"}
	var nodes [3]*fakenode.Node
	for i := range nodes {
		n, err := fakenode.Start("127.0.0.1:0", opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Close)
		nodes[i] = n
	}
	ring := splitRing{low: nodes[1].Addr(), high: nodes[2].Addr()}
	cfg := config.Default()
	cfg.Admin.Listen = ""
	cfg.Listen, cfg.Upstreams = "127.0.0.1:0", []string{nodes[0].Addr()}
	cfg.DialTimeout = config.Duration(time.Second)
	_, addr := serveProxy(t, cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{benchSnapshot(t)}), WithRing(ring))

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
