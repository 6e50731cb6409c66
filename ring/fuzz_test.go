package ring

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// fuzzMap decodes a replication map from s: entries separated by '\n',
// each a key, '=', and a value.
func fuzzMap(s string) map[string]string {
	m := make(map[string]string)
	for e := range strings.SplitSeq(s, "\n") {
		k, v, _ := strings.Cut(e, "=")
		m[k] = v
	}
	return m
}

// FuzzParseReplication: any map parses or is refused without panicking,
// and what parses places on a ring of two datacenters as the reference
// walk does, each replica a distinct node.
func FuzzParseReplication(f *testing.F) {
	f.Add("class=org.apache.cassandra.locator.SimpleStrategy\nreplication_factor=3")
	f.Add("class=SimpleStrategy\nreplication_factor=3/1")
	f.Add("class=NetworkTopologyStrategy\ndc1=3\ndc2=2")
	f.Add("class=NetworkTopologyStrategy\ndc1=3/1\nreplication_factor=1")
	f.Add("class=NetworkTopologyStrategy\ndc1=0\ndc2=9")
	f.Add("class=LocalStrategy")
	f.Add("class=EverywhereStrategy")
	f.Add("class=Nope\nreplication_factor=x")
	nodes := withAddrs(slices.Concat(racks, []Node{node("d1", "dc1", "r3", 5, 25), node("e1", "dc3", "r1", -7)}))
	tokens := []int64{math.MinInt64, -7, -6, 0, 4, 5, 25, 26, 40, 41, math.MaxInt64}
	f.Fuzz(func(t *testing.T, s string) {
		repl, err := ParseReplication(fuzzMap(s))
		if err != nil {
			return
		}
		_ = repl.String()
		r, err := New(nodes, map[string]Replication{"ks": repl})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		p := r.Placement("ks")
		if p == nil {
			if repl.Strategy != LocalStrategy {
				t.Fatalf("%v: no placement", repl)
			}
			return
		}
		for _, tok := range tokens {
			got := p.Replicas(tok)
			seen := make(map[int32]bool)
			for _, n := range got {
				if n < 0 || int(n) >= len(nodes) || seen[n] {
					t.Fatalf("%v: token %d: replicas %v", repl, tok, got)
				}
				seen[n] = true
			}
			if want := strings.Join(reference(nodes, repl, tok), " "); names(r, got) != want {
				t.Fatalf("%v: token %d: Replicas = %q, reference %q", repl, tok, names(r, got), want)
			}
		}
	})
}

// FuzzParseSharding: any SUPPORTED options parse or are refused without
// panicking, and a sharding that parses maps every token to one of its
// shards as the document's steps do.
func FuzzParseSharding(f *testing.F) {
	keys := []string{keyShard, keyShards, keyIgnoreMSB, keyAlgorithm, keyPartitioner, keyPort, keyPortTLS}
	f.Add(uint8(0x7f), "3", "12", "12", shardingAlgorithm, "org.apache.cassandra.dht.Murmur3Partitioner", "19042", "19142", int64(0))
	f.Add(uint8(0x07), "0", "1", "0", "", "", "", "", int64(math.MinInt64))
	f.Add(uint8(0x03), "0", "1", "0", "", "", "", "", int64(-1))
	f.Add(uint8(0x07), "65534", "65535", "63", "", "", "", "", int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, present uint8, shard, shards, msb, alg, part, port, portTLS string, token int64) {
		values := []string{shard, shards, msb, alg, part, port, portTLS}
		m := make(map[string][]string)
		for i, k := range keys {
			if present&(1<<i) != 0 {
				m[k] = []string{values[i]}
			}
		}
		s, ok, err := ParseSharding(m)
		if err != nil || !ok {
			if ok || s != (Sharding{}) {
				t.Fatalf("ParseSharding = %+v, %v, %v", s, ok, err)
			}
			return
		}
		if s.Shards < 1 || s.Shards > math.MaxUint16 || s.Shard < 0 || s.Shard >= s.Shards || s.IgnoreMSB > 63 {
			t.Fatalf("ParseSharding = %+v", s)
		}
		if got, want := s.ShardOf(token), shardOfBig(token, s.Shards, s.IgnoreMSB); got != want {
			t.Fatalf("%+v: ShardOf(%d) = %d, document's steps give %d", s, token, got, want)
		}
		if p := s.ShardOfPort(uint16(token)); p < 0 || p >= s.Shards {
			t.Fatalf("%+v: ShardOfPort(%d) = %d", s, uint16(token), p)
		}
	})
}
