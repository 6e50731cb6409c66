package proxy

import (
	"fmt"
	"math"
	"strconv"

	"gopkg.in/yaml.v3"

	"github.com/cqlguard/cqlguard/ratelimit"
	"github.com/cqlguard/cqlguard/schema"
)

// limits are the per-partition limits of a LimitsConfig, resolved for the
// request path. A limits is immutable once built: a reload builds a new one
// and swaps it in whole (Proxy.limits), so a request sees one configuration
// or the other, never a mix.
type limits struct {
	global    opLimits
	keyspaces map[string]keyspaceLimits

	// dryRun: count and report, reject nothing.
	dryRun bool
	// limitLWT and limitCounters: lightweight transactions and counter
	// updates are limited like other writes.
	limitLWT, limitCounters bool
	// maxPartitions is limits.max_partitions_per_request.
	maxPartitions int
	// limiter is the configuration of the ratelimit.Limiter that enforces
	// these limits.
	limiter ratelimit.Config
}

// keyspaceLimits are one keyspace's levels: its default and its tables.
type keyspaceLimits struct {
	def    opLimits
	tables map[string]opLimits
}

// opLimits are one level's read and write limits.
type opLimits struct{ reads, writes level }

// level is a limit at one level of the configuration. Unset levels defer to
// the next; a set 0 means unlimited and ends the search.
type level struct {
	perSecond uint32
	set       bool
}

func levelOf(v *OpsPerSecond) level {
	if v == nil {
		return level{}
	}
	return level{perSecond: uint32(*v), set: true}
}

func opLimitsOf(r RateLimits) opLimits {
	return opLimits{reads: levelOf(r.MaxReadsPerSecond), writes: levelOf(r.MaxWritesPerSecond)}
}

// newLimits validates cfg and resolves it.
func newLimits(cfg LimitsConfig) (*limits, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	l := &limits{
		global:        opLimitsOf(cfg.Default),
		dryRun:        cfg.DryRun,
		limitLWT:      cfg.LimitLWT,
		limitCounters: cfg.LimitCounters,
		maxPartitions: cfg.MaxPartitionsPerRequest,
		limiter: ratelimit.Config{
			Algorithm:   cfg.Algorithm,
			MemoryBytes: int(cfg.Memory),
			Burst:       cfg.Burst,
		},
	}
	if len(cfg.Keyspaces) > 0 {
		l.keyspaces = make(map[string]keyspaceLimits, len(cfg.Keyspaces))
	}
	for name, ks := range cfg.Keyspaces {
		kl := keyspaceLimits{def: opLimitsOf(ks.Default)}
		if len(ks.Tables) > 0 {
			kl.tables = make(map[string]opLimits, len(ks.Tables))
		}
		for t, r := range ks.Tables {
			kl.tables[t] = opLimitsOf(r)
		}
		l.keyspaces[name] = kl
	}
	return l, nil
}

// forTable returns the per-second limits of one partition of t for reads
// and for writes, 0 meaning unlimited. Each is resolved on its own, the
// first set of: the table's entry in the configuration, the table's
// per_partition_rate_limit option (if not 0), the keyspace's default, the
// global default. A nil t gets the global default. It does not allocate.
func (l *limits) forTable(t *schema.Table) (reads, writes uint32) {
	if t == nil {
		return l.global.reads.perSecond, l.global.writes.perSecond
	}
	var ks keyspaceLimits
	var tl opLimits
	if l.keyspaces != nil {
		ks = l.keyspaces[t.Keyspace]
		tl = ks.tables[t.Name]
	}
	return resolve(tl.reads, t.RateLimit.MaxReadsPerSecond, ks.def.reads, l.global.reads),
		resolve(tl.writes, t.RateLimit.MaxWritesPerSecond, ks.def.writes, l.global.writes)
}

// forName is forTable for a table the schema does not know, by name as
// stored: it has no per_partition_rate_limit option. It does not allocate.
func (l *limits) forName(keyspace, table []byte) (reads, writes uint32) {
	var ks keyspaceLimits
	var tl opLimits
	if l.keyspaces != nil {
		// string(b) directly in a map index does not allocate.
		ks = l.keyspaces[string(keyspace)]
		tl = ks.tables[string(table)]
	}
	return resolve(tl.reads, 0, ks.def.reads, l.global.reads),
		resolve(tl.writes, 0, ks.def.writes, l.global.writes)
}

// resolve returns the first limit set, from the most specific level.
func resolve(table level, option uint32, keyspace, global level) uint32 {
	switch {
	case table.set:
		return table.perSecond
	case option != 0:
		return option
	case keyspace.set:
		return keyspace.perSecond
	}
	return global.perSecond
}

// sameLimiter reports whether a limiter built for a enforces b as well, so
// that a reload can keep its counts.
func sameLimiter(a, b ratelimit.Config) bool {
	if a.Algorithm != b.Algorithm || a.MemoryBytes != b.MemoryBytes {
		return false
	}
	// The scylla algorithm has no burst.
	return a.Algorithm == ratelimit.AlgorithmScylla || a.Burst == b.Burst
}

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
}

// OpsPerSecond is a limit in operations per second, written in YAML as a
// whole number from 0 to 4294967295.
type OpsPerSecond uint32

// UnmarshalYAML parses a whole number, refusing the fractions and negative
// numbers that yaml.v3 would truncate or wrap.
func (o *OpsPerSecond) UnmarshalYAML(n *yaml.Node) error {
	v, err := strconv.ParseUint(n.Value, 10, 32)
	if n.Kind != yaml.ScalarNode || err != nil {
		return fmt.Errorf("line %d: %q is not a whole number of operations per second from 0 to %d", n.Line, n.Value, uint32(math.MaxUint32))
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

// validate checks the limits section; errors are keyErrors.
func (c *LimitsConfig) validate() error {
	bad := func(err error, path ...string) error {
		return &keyError{path: append([]string{"limits"}, path...), err: err}
	}
	switch c.Algorithm {
	case ratelimit.AlgorithmScylla, ratelimit.AlgorithmTokenBucket:
	default:
		return bad(fmt.Errorf("%q is neither %q nor %q", c.Algorithm, ratelimit.AlgorithmScylla, ratelimit.AlgorithmTokenBucket), "algorithm")
	}
	if c.Memory < minLimitsMemory || c.Memory > maxLimitsMemory {
		return bad(fmt.Errorf("%d bytes is outside 64 KiB to 4 GiB", c.Memory), "memory")
	}
	if !(c.Burst > 0) || c.Burst > maxBurst {
		return bad(fmt.Errorf("%v must be a positive number of seconds", c.Burst), "burst")
	}
	if c.MaxPartitionsPerRequest < 1 || c.MaxPartitionsPerRequest > maxPartitionsPerRequest {
		return bad(fmt.Errorf("%d is outside 1 to %d", c.MaxPartitionsPerRequest, maxPartitionsPerRequest), "max_partitions_per_request")
	}
	for ks, kl := range c.Keyspaces {
		if !isStoredName(ks) {
			return bad(fmt.Errorf("%q is not a keyspace name as stored: letters, digits and underscores, case-sensitive, no quotes", ks), "keyspaces", ks)
		}
		for t := range kl.Tables {
			if !isStoredName(t) {
				return bad(fmt.Errorf("%q is not a table name as stored: letters, digits and underscores, case-sensitive, no quotes", t), "keyspaces", ks, "tables", t)
			}
		}
	}
	return nil
}
