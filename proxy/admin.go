package proxy

import (
	"slices"
	"time"

	"github.com/cqlguard/cqlguard/admin"
	"github.com/cqlguard/cqlguard/classify"
	"github.com/cqlguard/cqlguard/ratelimit"
	"github.com/cqlguard/cqlguard/schema"
)

// What the admin listener (package admin) shows of the proxy: Ready
// (proxy.go), the busiest partitions and the shedding traces.
var _ admin.Source = (*Proxy)(nil)

// hotKeyBytes is how much of a partition key /hot keeps.
const hotKeyBytes = 64

// Hot returns the busiest partitions now, busiest first; nil when
// admin.hot_partitions is 0. Partitions of tables the schema no longer
// holds are left out.
func (p *Proxy) Hot() []admin.HotPartition {
	if p.hotSketch == nil {
		return nil
	}
	top := p.hotSketch.Top(nil)
	// Labels are hashes of table names: map them back through the
	// schema, which is as cheap as it gets off the request path.
	tables := map[ratelimit.Label]*schema.Table{}
	for _, t := range p.schema.Current().Tables() {
		tables[labelOf(t, classify.OpRead)] = t
		tables[labelOf(t, classify.OpWrite)] = t
	}
	set := p.settings.Load()
	l, hotTables, classes := set.limits, set.hotReads, set.clients
	out := make([]admin.HotPartition, 0, len(top))
	for _, e := range top {
		t := tables[e.Label]
		if t == nil {
			continue
		}
		op := classify.OpRead
		if e.Label&1 == 1 {
			op = classify.OpWrite
		}
		reads, writes := l.forTable(t)
		limit := reads
		if op == classify.OpWrite {
			limit = writes
		}
		h := admin.HotPartition{
			Keyspace: t.Keyspace, Table: t.Name, Op: op.String(), Token: e.Token,
			Rate: e.Rate, RateError: e.Error, Limit: limit, Class: classes.className(e.Tag),
		}
		if ht := hotTables.table(t); ht != nil && op == classify.OpRead && e.Rate >= ht.rate {
			h.Served = "coalesce"
			if ht.ttl > 0 {
				h.Served = "cache"
			}
		}
		if p.cfg.Admin.ShowKeys {
			h.Key, h.KeyTruncated = admin.FormatKey(t, e.Key, e.Truncated), e.Truncated
		}
		out = append(out, h)
	}
	return out
}

// ShedTrace returns the last controller updates of the node at addr, or
// of the only node when addr is empty (admin.Source).
func (p *Proxy) ShedTrace(addr string) (admin.ShedTrace, error) {
	sh := p.shedding
	if sh == nil {
		return admin.ShedTrace{}, admin.ErrShedOff
	}
	sh.mu.Lock()
	var addrs []string
	for a := range sh.nodes {
		addrs = append(addrs, a)
	}
	if addr == "" && len(addrs) == 1 {
		addr = addrs[0]
	}
	n := sh.nodes[addr]
	sh.mu.Unlock()
	if n == nil {
		slices.Sort(addrs)
		return admin.ShedTrace{}, &admin.UnknownNodeError{Node: addr, Nodes: addrs}
	}
	return admin.ShedTrace{Node: n.addr, Every: time.Duration(sh.cfg.UpdateEvery), Ticks: n.ctl.Trace()}, nil
}
