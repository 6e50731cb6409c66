package main

import (
	"context"
	"strings"

	"github.com/cqlguard/cqlguard/test/load"
)

// hotRows measures one hot key read through cqlguard three ways: every
// read forwarded (hot_reads off), reads coalesced with identical ones in
// flight, and reads answered from the cache. The pipelining load sends
// every request to one partition; floor is the Go relay's row of the same
// load over the uniform keys, whose cost does not depend on the key.
func (s *suite) hotRows(ctx context.Context, floor *row) []*row {
	const name = "EXECUTE v4 none, hot key"
	rows := []*row{
		{name: name + ", forwarded", path: "cqlguard", relay: floor, cost: &proxyCost{}},
		{name: name + ", coalesced", path: "cqlguard", relay: floor, cost: &proxyCost{}},
		{name: name + ", cached", path: "cqlguard", relay: floor, cost: &proxyCost{}},
	}
	tables := []string{"", "{coalesce: true}", "{cache_ttl: 100ms}"}
	for i, r := range rows {
		extra := ""
		if tables[i] != "" {
			extra = "hot_reads:\n  keyspaces:\n    bench:\n      tables:\n        kv: " + tables[i] + "\n"
		}
		px, err := s.startProxy(ctx, strings.ReplaceAll(r.name, " ", "-"), extra)
		if err != nil {
			r.note = "TODO: " + firstLine(err.Error())
			continue
		}
		spec := load.DefaultSpec()
		spec.Addr, spec.Conns = px.addr, s.conns
		spec.Dist, spec.HotKeys, spec.HotFraction = load.Hot, 1, 1
		err = s.measure(ctx, spec, r, px)
		px.stop()
		if err != nil {
			r.note = "TODO: " + firstLine(err.Error())
		}
	}
	return rows
}
