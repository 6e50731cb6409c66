package proxy

import (
	"github.com/cqlguard/cqlguard/classify"
	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/ratelimit"
	"github.com/cqlguard/cqlguard/schema"
)

// limits are the per-partition limits of a config.LimitsConfig, resolved
// for the request path. A limits is immutable once built: a reload builds a
// new one and swaps it in whole (Proxy.limits), so a request sees one
// configuration or the other, never a mix.
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
	// units is set when some level sets a budget in request units.
	units bool
}

// keyspaceLimits are one keyspace's levels: its default and its tables.
type keyspaceLimits struct {
	def    opLimits
	tables map[string]opLimits
}

// opLimits are one level's read and write limits, in operations and in
// request units per second.
type opLimits struct{ reads, writes, readUnits, writeUnits level }

// level is a limit at one level of the configuration. Unset levels defer to
// the next; a set 0 means unlimited and ends the search.
type level struct {
	perSecond uint32
	set       bool
}

func levelOf(v *config.OpsPerSecond) level {
	if v == nil {
		return level{}
	}
	return level{perSecond: uint32(*v), set: true}
}

func opLimitsOf(r config.RateLimits) opLimits {
	return opLimits{reads: levelOf(r.MaxReadsPerSecond), writes: levelOf(r.MaxWritesPerSecond),
		readUnits: levelOf(r.MaxReadUnitsPerSecond), writeUnits: levelOf(r.MaxWriteUnitsPerSecond)}
}

// newLimits validates cfg and resolves it.
func newLimits(cfg config.LimitsConfig) (*limits, error) {
	if err := cfg.Validate(); err != nil {
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
	hasUnits := func(o opLimits) bool { return o.readUnits.perSecond > 0 || o.writeUnits.perSecond > 0 }
	l.units = hasUnits(l.global)
	for name, ks := range cfg.Keyspaces {
		kl := keyspaceLimits{def: opLimitsOf(ks.Default)}
		l.units = l.units || hasUnits(kl.def)
		if len(ks.Tables) > 0 {
			kl.tables = make(map[string]opLimits, len(ks.Tables))
		}
		for t, r := range ks.Tables {
			kl.tables[t] = opLimitsOf(r)
			l.units = l.units || hasUnits(kl.tables[t])
		}
		l.keyspaces[name] = kl
	}
	return l, nil
}

// forOp returns, with one lookup of t's levels, the per-second limit of
// one partition of t for op (as forTable resolves it) and its budget in
// request units per second, 0 meaning none (tables have no option for
// it). It does not allocate.
func (l *limits) forOp(t *schema.Table, op classify.Op) (limit, units uint32) {
	ks, tl := l.levels(t)
	if op == classify.OpWrite {
		return firstSet(tl.writes, t.RateLimit.MaxWritesPerSecond, ks.def.writes, l.global.writes),
			firstSet(tl.writeUnits, 0, ks.def.writeUnits, l.global.writeUnits)
	}
	return firstSet(tl.reads, t.RateLimit.MaxReadsPerSecond, ks.def.reads, l.global.reads),
		firstSet(tl.readUnits, 0, ks.def.readUnits, l.global.readUnits)
}

// levels returns the keyspace's and the table's levels of t.
func (l *limits) levels(t *schema.Table) (keyspaceLimits, opLimits) {
	if l.keyspaces == nil {
		return keyspaceLimits{}, opLimits{}
	}
	ks := l.keyspaces[t.Keyspace]
	return ks, ks.tables[t.Name]
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
	ks, tl := l.levels(t)
	return firstSet(tl.reads, t.RateLimit.MaxReadsPerSecond, ks.def.reads, l.global.reads),
		firstSet(tl.writes, t.RateLimit.MaxWritesPerSecond, ks.def.writes, l.global.writes)
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
	return firstSet(tl.reads, 0, ks.def.reads, l.global.reads),
		firstSet(tl.writes, 0, ks.def.writes, l.global.writes)
}

// firstSet returns the first limit set, from the most specific level.
func firstSet(table level, option uint32, keyspace, global level) uint32 {
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
