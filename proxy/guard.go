package proxy

import (
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cqlguard/cqlguard/schema"
)

// The guard is armed when the limits configured can be enforced: until the
// schema has loaded, the proxy finds no request's partition and forwards
// everything unlimited. This file tells operators so, in metrics, in
// /readyz (admin.ready_needs_schema) and in the log, and names the limits
// that point at keyspaces or tables the schema does not have, which are
// never enforced either.

// schemaStatus is what a SchemaSource that loads from the cluster tells
// beyond its snapshot; *loader.Schema has it. A source without it, such as
// a fixed snapshot, counts as loaded from the start.
type schemaStatus interface {
	LoadedAt() time.Time
	Failures() uint64
}

// schemaLoadedAt returns when the schema in use was loaded; the zero time
// before it has been.
func (p *Proxy) schemaLoadedAt() time.Time {
	if s, ok := p.schema.(schemaStatus); ok {
		return s.LoadedAt()
	}
	return p.epoch
}

// armed reports whether the limits in effect can be enforced: none are
// configured, or the schema has loaded.
func (p *Proxy) armed() bool {
	return !p.settings.Load().limits.configured() || !p.schemaLoadedAt().IsZero()
}

// configured reports whether l limits anything: a limit other than 0 at
// any level.
func (l *limits) configured() bool {
	set := func(o opLimits) bool { return o.reads.perSecond != 0 || o.writes.perSecond != 0 }
	if set(l.global) {
		return true
	}
	for _, ks := range l.keyspaces {
		if set(ks.def) {
			return true
		}
		for _, t := range ks.tables {
			if set(t) {
				return true
			}
		}
	}
	return false
}

// unknownNames returns what l names that snap does not have, sorted: a
// keyspace of which snap has no table as "ks", a table as "ks.t".
func (l *limits) unknownNames(snap *schema.Snapshot) []string {
	keyspaces := map[string]bool{}
	for _, t := range snap.Tables() {
		keyspaces[t.Keyspace] = true
	}
	var out []string
	for _, ks := range slices.Sorted(maps.Keys(l.keyspaces)) {
		if !keyspaces[ks] {
			out = append(out, ks)
			continue
		}
		for _, t := range slices.Sorted(maps.Keys(l.keyspaces[ks].tables)) {
			if snap.Table([]byte(ks), []byte(t)) == nil {
				out = append(out, ks+"."+t)
			}
		}
	}
	return out
}

// guardEvery is how often watchGuard looks at the schema and the limits.
const guardEvery = time.Second

// unarmedGrace is how long the guard may stay unarmed after start before
// the log says so: a schema normally loads within a second or two of the
// upstream answering.
const unarmedGrace = 15 * time.Second

// watchGuard logs, until stop is closed, when the guard becomes armed, once
// if it is still not armed unarmedGrace after start, and a warning for each
// name in the limits that the schema, once loaded, does not have.
func (p *Proxy) watchGuard(stop <-chan struct{}) {
	t := time.NewTicker(guardEvery)
	defer t.Stop()
	var (
		snap        *schema.Snapshot
		lim         *limits
		warned      = map[string]bool{}
		wasArmed    = true
		saidUnarmed bool
	)
	for {
		armed := p.armed()
		switch {
		case armed && !wasArmed:
			p.log.Info().Int("tables", p.schema.Current().Len()).Msg("schema loaded: the limits are enforced")
			saidUnarmed = false
		case !armed && !saidUnarmed && time.Since(p.epoch) >= unarmedGrace:
			p.log.Warn().Msg("the schema has not loaded: no partition can be found and the limits are not enforced; check schema.username and the upstreams (cqlguard_guard_armed)")
			saidUnarmed = true
		}
		wasArmed = armed
		if cur, l := p.schema.Current(), p.settings.Load().limits; !p.schemaLoadedAt().IsZero() && (cur != snap || l != lim) {
			snap, lim = cur, l
			unknown := l.unknownNames(cur)
			for _, name := range unknown {
				if !warned[name] {
					p.log.Warn().Str("name", name).Msg("limits.keyspaces names a keyspace or table that the schema does not have: its limits are never enforced (names are as stored: case-sensitive, no quotes)")
				}
			}
			clear(warned)
			for _, name := range unknown {
				warned[name] = true
			}
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// guardCollector exports the guard's state and the upstreams' health when
// scraped.
type guardCollector struct {
	p                                      *Proxy
	loaded, age, failures, tables, unknown *prometheus.Desc
	armed, upstreamUp                      *prometheus.Desc
}

func newGuardCollector(p *Proxy) *guardCollector {
	return &guardCollector{
		p: p,
		loaded: prometheus.NewDesc("cqlguard_schema_loaded",
			"1 once the schema has loaded from the upstream, 0 before: until then no partition is found and nothing is limited.", nil, nil),
		age: prometheus.NewDesc("cqlguard_schema_age_seconds",
			"Seconds since the schema in use was loaded; absent before the first load.", nil, nil),
		failures: prometheus.NewDesc("cqlguard_schema_load_failures_total",
			"Failed attempts to load the schema.", nil, nil),
		tables: prometheus.NewDesc("cqlguard_schema_tables",
			"Tables in the schema in use.", nil, nil),
		unknown: prometheus.NewDesc("cqlguard_schema_unknown_limits",
			"Keyspaces and tables named in limits.keyspaces that the loaded schema does not have; their limits are never enforced.", nil, nil),
		armed: prometheus.NewDesc("cqlguard_guard_armed",
			"0 while limits are configured and the schema has not loaded (everything passes unlimited), else 1.", nil, nil),
		upstreamUp: prometheus.NewDesc("cqlguard_upstream_up",
			"1 when an upstream node answered the proxy's last health check, else 0.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *guardCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.loaded, c.age, c.failures, c.tables, c.unknown, c.armed, c.upstreamUp} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *guardCollector) Collect(ch chan<- prometheus.Metric) {
	p := c.p
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	b := func(ok bool) float64 {
		if ok {
			return 1
		}
		return 0
	}
	at := p.schemaLoadedAt()
	snap := p.schema.Current()
	gauge(c.loaded, b(!at.IsZero()))
	unknown := 0
	if !at.IsZero() {
		gauge(c.age, time.Since(at).Seconds())
		unknown = len(p.settings.Load().limits.unknownNames(snap))
	}
	var failures uint64
	if s, ok := p.schema.(schemaStatus); ok {
		failures = s.Failures()
	}
	ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(failures))
	gauge(c.tables, float64(snap.Len()))
	gauge(c.unknown, float64(unknown))
	gauge(c.armed, b(p.armed()))
	gauge(c.upstreamUp, b(p.health.up()))
}
