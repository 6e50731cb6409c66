package ring

import (
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestShardOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		shards    int
		ignoreMSB uint
		token     int64
		want      int
	}{
		// Worked out by hand from the algorithm in ScyllaDB's
		// protocol-extensions document (docs/dev/protocol-extensions.md,
		// "Intranode sharding"): bias by 2^63, shift left by ignore_msb
		// modulo 2^64, multiply by nr_shards, keep the top 64 bits.
		{"min token, biased 0", 4, 0, math.MinInt64, 0},
		{"-1, biased 2^63-1: just under half", 4, 0, -1, 1},
		{"0, biased 2^63: half", 4, 0, 0, 2},
		{"max token, biased 2^64-1", 4, 0, math.MaxInt64, 3},
		{"0 with ignore_msb 12: 2^63 shifted out to 0", 4, 12, 0, 0},
		{"-1 with ignore_msb 12: 2^64-4096", 4, 12, -1, 3},
		{"biased 2^51+1 shifted by 12 is 2^63+4096: just over half of 12", 12, 12, math.MinInt64 + 1<<51 + 1, 6},
		{"one shard", 1, 12, 42, 0},
		{"zero Sharding", 0, 0, math.MaxInt64, 0},
		// The vectors of ScyllaDB's Rust driver's test_shard_of
		// (scylla/src/routing/sharding.rs), which it took from gocql's:
		// 4 shards, ignore_msb 12.
		{"rust driver vector 1", 4, 12, -9219783007514621794, 3},
		{"rust driver vector 2", 4, 12, 9222582454147032830, 3},
	}
	for _, tt := range tests {
		s := Sharding{Shards: tt.shards, IgnoreMSB: tt.ignoreMSB}
		if got := s.ShardOf(tt.token); got != tt.want {
			t.Errorf("%s: ShardOf(%d) with %d shards, ignore_msb %d = %d, want %d", tt.name, tt.token, tt.shards, tt.ignoreMSB, got, tt.want)
		}
	}
}

// shardOfBig follows the document's steps in infinite precision, as it
// states them: biased = token - (-2^63); biased = (biased << ignore_msb)
// mod 2^64; shard = biased * nr_shards / 2^64.
func shardOfBig(token int64, shards int, ignoreMSB uint) int {
	two64 := new(big.Int).Lsh(big.NewInt(1), 64)
	b := new(big.Int).Sub(big.NewInt(token), new(big.Int).Neg(new(big.Int).Lsh(big.NewInt(1), 63)))
	b.Lsh(b, ignoreMSB)
	b.Mod(b, two64)
	b.Mul(b, big.NewInt(int64(shards)))
	b.Div(b, two64)
	return int(b.Int64())
}

func TestShardOfMatchesDocument(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	for range 20000 {
		s := Sharding{Shards: 1 + rng.IntN(300), IgnoreMSB: uint(rng.IntN(64))}
		token := int64(rng.Uint64())
		if got, want := s.ShardOf(token), shardOfBig(token, s.Shards, s.IgnoreMSB); got != want {
			t.Fatalf("ShardOf(%d) with %d shards, ignore_msb %d = %d, document's steps give %d", token, s.Shards, s.IgnoreMSB, got, want)
		}
	}
}

func TestShardOfPort(t *testing.T) {
	t.Parallel()
	tests := []struct {
		shards int
		port   uint16
		want   int
	}{
		{4, 50000, 0}, {4, 50001, 1}, {4, 50003, 3}, {12, 65535, 3}, {1, 40001, 0}, {0, 40001, 0},
	}
	for _, tt := range tests {
		if got := (Sharding{Shards: tt.shards}).ShardOfPort(tt.port); got != tt.want {
			t.Errorf("ShardOfPort(%d) with %d shards = %d, want %d", tt.port, tt.shards, got, tt.want)
		}
	}
}

// scyllaSupported is what a ScyllaDB node of 12 shards advertises on a
// connection served by shard 3, as its protocol-extensions document lists
// the keys.
func scyllaSupported() map[string][]string {
	return map[string][]string{
		"SCYLLA_SHARD":                {"3"},
		"SCYLLA_NR_SHARDS":            {"12"},
		"SCYLLA_PARTITIONER":          {"org.apache.cassandra.dht.Murmur3Partitioner"},
		"SCYLLA_SHARDING_ALGORITHM":   {"biased-token-round-robin"},
		"SCYLLA_SHARDING_IGNORE_MSB":  {"12"},
		"SCYLLA_SHARD_AWARE_PORT":     {"19042"},
		"SCYLLA_SHARD_AWARE_PORT_SSL": {"19142"},
		"CQL_VERSION":                 {"3.3.1"},
		"COMPRESSION":                 {"lz4", "snappy"},
	}
}

func TestParseSharding(t *testing.T) {
	t.Parallel()
	full := Sharding{Shard: 3, Shards: 12, IgnoreMSB: 12, Port: 19042, PortTLS: 19142}
	tests := []struct {
		name    string
		edit    func(m map[string][]string)
		want    Sharding
		ok      bool
		wantErr string
	}{
		{"scylla", func(map[string][]string) {}, full, true, ""},
		{"no shard-aware ports", func(m map[string][]string) {
			delete(m, "SCYLLA_SHARD_AWARE_PORT")
			delete(m, "SCYLLA_SHARD_AWARE_PORT_SSL")
		}, Sharding{Shard: 3, Shards: 12, IgnoreMSB: 12}, true, ""},
		{"no algorithm or partitioner named", func(m map[string][]string) {
			delete(m, "SCYLLA_SHARDING_ALGORITHM")
			delete(m, "SCYLLA_PARTITIONER")
		}, full, true, ""},
		{"cassandra", func(m map[string][]string) {
			for k := range m {
				if strings.HasPrefix(k, "SCYLLA_") {
					delete(m, k)
				}
			}
		}, Sharding{}, false, ""},
		{"missing ignore_msb", func(m map[string][]string) { delete(m, "SCYLLA_SHARDING_IGNORE_MSB") }, Sharding{}, false, "lacks"},
		{"key without value", func(m map[string][]string) { m["SCYLLA_SHARD"] = nil }, Sharding{}, false, "SCYLLA_SHARD"},
		{"zero shards", func(m map[string][]string) { m["SCYLLA_NR_SHARDS"] = []string{"0"} }, Sharding{}, false, "SCYLLA_NR_SHARDS"},
		{"too many shards", func(m map[string][]string) { m["SCYLLA_NR_SHARDS"] = []string{"65536"} }, Sharding{}, false, "SCYLLA_NR_SHARDS"},
		{"shard out of range", func(m map[string][]string) { m["SCYLLA_SHARD"] = []string{"12"} }, Sharding{}, false, "below 12"},
		{"negative shard", func(m map[string][]string) { m["SCYLLA_SHARD"] = []string{"-1"} }, Sharding{}, false, "SCYLLA_SHARD"},
		{"ignore_msb 64", func(m map[string][]string) { m["SCYLLA_SHARDING_IGNORE_MSB"] = []string{"64"} }, Sharding{}, false, "IGNORE_MSB"},
		{"other algorithm", func(m map[string][]string) { m["SCYLLA_SHARDING_ALGORITHM"] = []string{"round-robin"} }, Sharding{}, false, "algorithm"},
		{"other partitioner", func(m map[string][]string) {
			m["SCYLLA_PARTITIONER"] = []string{"org.apache.cassandra.dht.RandomPartitioner"}
		}, Sharding{}, false, "partitioner"},
		{"bad port", func(m map[string][]string) { m["SCYLLA_SHARD_AWARE_PORT"] = []string{"0"} }, Sharding{}, false, "SCYLLA_SHARD_AWARE_PORT"},
		{"port over 65535", func(m map[string][]string) { m["SCYLLA_SHARD_AWARE_PORT_SSL"] = []string{"70000"} }, Sharding{}, false, "_SSL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := scyllaSupported()
			tt.edit(m)
			got, ok, err := ParseSharding(m)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseSharding = %+v, %v, %v; want an error with %q", got, ok, err, tt.wantErr)
				}
				return
			}
			if err != nil || ok != tt.ok || got != tt.want {
				t.Errorf("ParseSharding = %+v, %v, %v; want %+v, %v", got, ok, err, tt.want, tt.ok)
			}
		})
	}
}
