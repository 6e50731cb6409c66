package ring

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchKeyspaces are the keyspaces of a fresh Cassandra 5.0 cluster and
// two of an application's: four distinct placements (SimpleStrategy 1, 2
// and 3, NetworkTopologyStrategy 3 in dc0 and 3 in dc1) and a local one.
var benchKeyspaces = map[string]Replication{
	"system":             {Strategy: LocalStrategy},
	"system_schema":      {Strategy: LocalStrategy},
	"system_auth":        simple("1"),
	"system_distributed": simple("3"),
	"system_traces":      simple("2"),
	"app":                nts("dc0", "3", "dc1", "3"),
	"app_archive":        nts("dc0", "3", "dc1", "3"),
}

// BenchmarkNew builds a ring, as on every topology or schema change, of
// nodes in two datacenters of three racks each, with benchKeyspaces.
func BenchmarkNew(b *testing.B) {
	for _, n := range []int{3, 30, 300} {
		for _, v := range []int{16, 256} {
			nodes := randomNodes(rand.New(rand.NewPCG(7, 8)), n, v, 2, 3)
			b.Run(fmt.Sprintf("nodes=%d/tokens=%d", n, v), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := New(nodes, benchKeyspaces); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkReplicas looks up the replicas of random tokens of a keyspace
// on the largest ring.
func BenchmarkReplicas(b *testing.B) {
	r, err := New(randomNodes(rand.New(rand.NewPCG(7, 8)), 300, 256, 2, 3), benchKeyspaces)
	if err != nil {
		b.Fatal(err)
	}
	tokens := make([]int64, 1024)
	rng := rand.New(rand.NewPCG(9, 10))
	for i := range tokens {
		tokens[i] = int64(rng.Uint64())
	}
	ks := []byte("app")
	b.ReportAllocs()
	var sink int
	i := 0
	for b.Loop() {
		sink += len(r.Replicas(string(ks), tokens[i%len(tokens)]))
		i++
	}
	_ = sink
}
