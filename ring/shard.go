package ring

// ScyllaDB's intranode sharding, from its protocol-extensions document
// ("Intranode sharding"): a node splits its tokens among its shards (one
// per core) and says how in the SUPPORTED options of every connection.
// The one algorithm defined, biased-token-round-robin, maps token t to
//
//	((t + 2^63) << ignore_msb mod 2^64) * nr_shards / 2^64
//
// in unsigned 64-bit arithmetic with a 128-bit product. On the shard-aware
// port a new connection is served by the shard equal to the client's
// source port modulo nr_shards.

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// The SUPPORTED keys of ScyllaDB's sharding.
const (
	keyShard       = "SCYLLA_SHARD"
	keyShards      = "SCYLLA_NR_SHARDS"
	keyIgnoreMSB   = "SCYLLA_SHARDING_IGNORE_MSB"
	keyAlgorithm   = "SCYLLA_SHARDING_ALGORITHM"
	keyPartitioner = "SCYLLA_PARTITIONER"
	keyPort        = "SCYLLA_SHARD_AWARE_PORT"
	keyPortTLS     = "SCYLLA_SHARD_AWARE_PORT_SSL"
)

// shardingAlgorithm is the only sharding algorithm ScyllaDB defines.
const shardingAlgorithm = "biased-token-round-robin"

// Sharding is how a ScyllaDB node spreads tokens over its shards, as it
// advertises it in SUPPORTED. The zero Sharding is a node of one shard.
type Sharding struct {
	// Shard is the shard serving the connection the options came on.
	Shard int
	// Shards is the node's number of shards.
	Shards int
	// IgnoreMSB is the count of most significant bits of the biased token
	// that the algorithm ignores.
	IgnoreMSB uint
	// Port and PortTLS are the shard-aware ports for plain and TLS
	// connections; 0 when the node does not advertise them.
	Port, PortTLS uint16
}

// ShardOf returns the shard of the node that owns token t.
func (s Sharding) ShardOf(t int64) int {
	biased := uint64(t) + 1<<63
	hi, _ := bits.Mul64(biased<<s.IgnoreMSB, uint64(max(s.Shards, 1)))
	return int(hi)
}

// ShardOfPort returns the shard that serves a connection to the
// shard-aware port from client source port port.
func (s Sharding) ShardOfPort(port uint16) int {
	return int(port) % max(s.Shards, 1)
}

// ParseSharding reads a node's sharding from the options of its SUPPORTED
// message, each key with its values. ok is false, with no error, when the
// options hold none of ScyllaDB's sharding keys, as from Cassandra. A
// sharding that is incomplete, malformed, or by an algorithm or for a
// partitioner other than those this package knows is an error.
func ParseSharding(supported map[string][]string) (s Sharding, ok bool, err error) {
	first := func(key string) (string, bool) {
		v, ok := supported[key]
		if !ok {
			return "", false
		}
		if len(v) == 0 {
			return "", true
		}
		return v[0], true
	}
	shard, hasShard := first(keyShard)
	shards, hasShards := first(keyShards)
	msb, hasMSB := first(keyIgnoreMSB)
	if !hasShard && !hasShards && !hasMSB {
		return Sharding{}, false, nil
	}
	if !hasShard || !hasShards || !hasMSB {
		return Sharding{}, false, errors.New("sharding: SUPPORTED lacks one of " + keyShard + ", " + keyShards + ", " + keyIgnoreMSB)
	}
	n, err := strconv.ParseUint(shards, 10, 16)
	if err != nil || n == 0 {
		return Sharding{}, false, fmt.Errorf("sharding: %s %q is not a count of shards from 1 to 65535", keyShards, shards)
	}
	i, err := strconv.ParseUint(shard, 10, 16)
	if err != nil || i >= n {
		return Sharding{}, false, fmt.Errorf("sharding: %s %q is not a shard below %d", keyShard, shard, n)
	}
	m, err := strconv.ParseUint(msb, 10, 8)
	if err != nil || m > 63 {
		return Sharding{}, false, fmt.Errorf("sharding: %s %q is not a bit count from 0 to 63", keyIgnoreMSB, msb)
	}
	s = Sharding{Shard: int(i), Shards: int(n), IgnoreMSB: uint(m)}
	if a, ok := first(keyAlgorithm); ok && a != shardingAlgorithm {
		return Sharding{}, false, fmt.Errorf("sharding: algorithm %q, not %s", a, shardingAlgorithm)
	}
	// ScyllaDB names the partitioner by its Cassandra class; the token
	// this package places is Murmur3Partitioner's, whatever its package.
	if p, ok := first(keyPartitioner); ok && p != "Murmur3Partitioner" && !strings.HasSuffix(p, ".Murmur3Partitioner") {
		return Sharding{}, false, fmt.Errorf("sharding: partitioner %q, not Murmur3Partitioner", p)
	}
	for _, port := range []struct {
		key string
		dst *uint16
	}{{keyPort, &s.Port}, {keyPortTLS, &s.PortTLS}} {
		v, ok := first(port.key)
		if !ok {
			continue
		}
		p, err := strconv.ParseUint(v, 10, 16)
		if err != nil || p == 0 {
			return Sharding{}, false, fmt.Errorf("sharding: %s %q is not a port", port.key, v)
		}
		*port.dst = uint16(p)
	}
	return s, true, nil
}
