package config

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"

	"gopkg.in/yaml.v3"

	"github.com/cqlguard/cqlguard/ratelimit"
)

// LimitsConfig configures per-partition rate limits: how many reads and
// writes per second one partition of a table may take through this proxy.
type LimitsConfig struct {
	// Algorithm is ratelimit.AlgorithmScylla (ScyllaDB's limiter, the
	// default) or ratelimit.AlgorithmTokenBucket.
	Algorithm string `yaml:"algorithm"`
	// Memory is the size of the counter tables, allocated once; partitions
	// that find no room are admitted uncounted.
	Memory ByteSize `yaml:"memory"`
	// Burst is the token bucket's capacity in seconds of the limit's rate;
	// ignored by the scylla algorithm.
	Burst float64 `yaml:"burst"`
	// DryRun counts operations and reports what would be rejected, but
	// rejects nothing.
	DryRun bool `yaml:"dry_run"`
	// LimitLWT limits lightweight transactions like other writes. ScyllaDB
	// does not count them.
	LimitLWT bool `yaml:"limit_lwt"`
	// LimitCounters limits counter table updates like other writes.
	// ScyllaDB does not count them.
	LimitCounters bool `yaml:"limit_counters"`
	// MaxPartitionsPerRequest bounds the partitions of a limited table one
	// request may touch (an IN list, a batch): up to it each is counted,
	// and a request past it is refused with an Invalid error naming the
	// setting, so that no request escapes its limits by its size and the
	// proxy's work per request stays bounded. Tables without a limit for
	// the request's operation are not affected.
	MaxPartitionsPerRequest int `yaml:"max_partitions_per_request"`
	// Default applies to every table that no more specific level limits.
	Default RateLimits `yaml:"default"`
	// Keyspaces are limits per keyspace and per table, by name as stored
	// (case-sensitive, unquoted).
	Keyspaces map[string]KeyspaceLimits `yaml:"keyspaces"`
}

// KeyspaceLimits are the limits of one keyspace's tables.
type KeyspaceLimits struct {
	// Default applies to the keyspace's tables that have no entry in Tables
	// and no per_partition_rate_limit option.
	Default RateLimits `yaml:"default"`
	// Tables are limits by table name, as stored; they take precedence over
	// the table's per_partition_rate_limit option.
	Tables map[string]RateLimits `yaml:"tables"`
}

// RateLimits are per-partition limits in operations per second. Nil means
// not set at this level, so the next level applies; 0 means unlimited.
type RateLimits struct {
	MaxReadsPerSecond  *OpsPerSecond `yaml:"max_reads_per_second"`
	MaxWritesPerSecond *OpsPerSecond `yaml:"max_writes_per_second"`
	// MaxReadUnitsPerSecond and MaxWriteUnitsPerSecond are budgets in
	// request units (request_units) per second per partition: each
	// answered read or write is charged its price, and while a partition
	// is in debt its reads or writes are refused.
	MaxReadUnitsPerSecond  *OpsPerSecond `yaml:"max_read_units_per_second"`
	MaxWriteUnitsPerSecond *OpsPerSecond `yaml:"max_write_units_per_second"`
}

// OpsPerSecond is a limit in operations per second, written in YAML as a
// whole number from 0 to 4294967295.
type OpsPerSecond uint32

// UnmarshalYAML parses a whole number, refusing the fractions and negative
// numbers that yaml.v3 would truncate or wrap.
func (o *OpsPerSecond) UnmarshalYAML(n *yaml.Node) error {
	v, err := strconv.ParseUint(n.Value, 10, 32)
	if n.Kind != yaml.ScalarNode || err != nil {
		return valueError(n, fmt.Sprintf("%q is not a whole number of operations per second from 0 to %d", n.Value, uint32(math.MaxUint32)))
	}
	*o = OpsPerSecond(v)
	return nil
}

// limits.memory bounds. The limiter may still refuse more than the minimum,
// if spread over many cores it leaves each shard too small a table. The
// maximum, 4,096 times a ScyllaDB shard's table, keeps a slip of units
// from allocating the machine's memory.
const (
	minLimitsMemory = 64 << 10
	maxLimitsMemory = 4 << 30
)

// maxBurst bounds limits.burst so that it fits the limiter's nanoseconds.
const maxBurst = 1e9

// maxPartitionsPerRequest bounds limits.max_partitions_per_request: the
// protocol's batches hold at most 65,535 statements.
const maxPartitionsPerRequest = 65535

// Validate checks the limits section and reports every problem it finds,
// joined. Config.Validate checks it too; package proxy calls it before it
// applies a section.
func (c *LimitsConfig) Validate() error {
	var ps problems
	c.validate(&ps)
	return ps.err()
}

func (c *LimitsConfig) validate(ps *problems) {
	bad := func(err error, path ...string) { ps.add(err, append([]string{"limits"}, path...)...) }
	n := len(*ps)
	switch c.Algorithm {
	case ratelimit.AlgorithmScylla, ratelimit.AlgorithmTokenBucket:
	default:
		bad(fmt.Errorf("%q is neither %q nor %q", c.Algorithm, ratelimit.AlgorithmScylla, ratelimit.AlgorithmTokenBucket), "algorithm")
	}
	if c.Memory < minLimitsMemory || c.Memory > maxLimitsMemory {
		bad(fmt.Errorf("%d bytes is outside 64 KiB to 4 GiB", c.Memory), "memory")
	}
	if !(c.Burst > 0) || c.Burst > maxBurst {
		bad(fmt.Errorf("%v must be a positive number of seconds", c.Burst), "burst")
	}
	if len(*ps) == n {
		// Within the bounds, memory may still be too little for this
		// machine's processors, each of which gets a table.
		lim := ratelimit.Config{Algorithm: c.Algorithm, MemoryBytes: int(c.Memory), Burst: c.Burst}
		if err := lim.Validate(); err != nil {
			bad(fmt.Errorf("%d bytes on this machine: %w", c.Memory, err), "memory")
		}
	}
	if c.MaxPartitionsPerRequest < 1 || c.MaxPartitionsPerRequest > maxPartitionsPerRequest {
		bad(fmt.Errorf("%d is outside 1 to %d", c.MaxPartitionsPerRequest, maxPartitionsPerRequest), "max_partitions_per_request")
	}
	for _, ks := range slices.Sorted(maps.Keys(c.Keyspaces)) {
		if !isStoredName(ks) {
			bad(fmt.Errorf("%q is not a keyspace name as stored: letters, digits and underscores, case-sensitive, no quotes", ks), "keyspaces", ks)
		}
		for _, t := range slices.Sorted(maps.Keys(c.Keyspaces[ks].Tables)) {
			if !isStoredName(t) {
				bad(fmt.Errorf("%q is not a table name as stored: letters, digits and underscores, case-sensitive, no quotes", t), "keyspaces", ks, "tables", t)
			}
		}
	}
}

// isStoredName reports whether s can name a keyspace or table: Cassandra
// and ScyllaDB allow only letters, digits and underscores, even quoted.
func isStoredName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}
