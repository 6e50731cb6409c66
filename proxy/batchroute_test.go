package proxy

import (
	"encoding/binary"
	"fmt"
	"testing"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/apache/cassandra-gocql-driver/v2/lz4"

	"github.com/cqlguard/cqlguard/test/fakenode"
)

// A BATCH that writes one partition runs on a node that holds it, its
// prepared statements prepared there first; one that writes partitions
// held by different nodes runs on the connection's node.
func TestRoutedBatch(t *testing.T) {
	t.Parallel()
	nodes := startNodes(t, 3, fakenode.Options{})
	_, addr := routedProxy(t, nodes[0].Addr(), splitRing{low: nodes[1].Addr(), high: nodes[2].Addr()})
	// Two keys whose partitions are held by different nodes.
	var low, high int
	for k := 0; low == 0 || high == 0; k++ {
		if tokenOf(binary.BigEndian.AppendUint64(nil, uint64(k))) < 0 {
			low = k
		} else {
			high = k
		}
	}
	for _, tc := range []struct {
		proto int
		comp  gocql.Compressor
	}{
		{4, nil}, {5, lz4.LZ4Compressor{}},
	} {
		t.Run(fmt.Sprintf("v%d", tc.proto), func(t *testing.T) {
			cluster := gocql.NewCluster(addr)
			cluster.ProtoVersion, cluster.Compressor, cluster.NumConns = tc.proto, tc.comp, 1
			s, err := cluster.CreateSession()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var before [3]uint64
			for i, n := range nodes {
				before[i] = n.Batches()
			}
			const n = 10
			for i := range n {
				for _, k := range []int{low, high} {
					b := s.Batch(gocql.UnloggedBatch)
					b.Query("UPDATE bench.kv SET v = 0x00 WHERE k = ?", k)
					b.Query("UPDATE bench.kv SET v = 0x01 WHERE k = ?", k)
					b.Query(fmt.Sprintf("UPDATE bench.kv SET v = 0x02 WHERE k = %d", k))
					if err := b.Exec(); err != nil {
						t.Fatalf("batch %d of key %d: %v", i, k, err)
					}
				}
				both := s.Batch(gocql.LoggedBatch)
				both.Query("UPDATE bench.kv SET v = 0x00 WHERE k = ?", low)
				both.Query("UPDATE bench.kv SET v = 0x00 WHERE k = ?", high)
				if err := both.Exec(); err != nil {
					t.Fatalf("batch %d of both keys: %v", i, err)
				}
			}
			var got [3]uint64
			for i, node := range nodes {
				got[i] = node.Batches() - before[i]
			}
			if want := [3]uint64{n, n, n}; got != want {
				t.Errorf("batches run per node %v, want %v: each one-partition batch on the node holding it, the others on the first", got, want)
			}
		})
	}
}
