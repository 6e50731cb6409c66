package main

import (
	"context"

	"github.com/cqlguard/cqlguard/test/load"
)

// classRows measures the pipelining load through cqlguard with client
// classes and request units on: the load's connections matched to a class
// by application name, with a budget far above what they spend, so that
// every request is priced, charged and checked and none refused. Against
// the plain EXECUTE row of the same run, it is what knowing who calls and
// what it costs adds to a request.
func (s *suite) classRows(ctx context.Context, floor *row) []*row {
	r := &row{name: "EXECUTE v4 none, classes and RU", path: "cqlguard", relay: floor, cost: &proxyCost{}}
	const extra = "clients:\n  classes:\n    - name: bench\n      match: {driver_names: [cqlguard-bench]}\n      max_units_per_second: 1000000000\n"
	px, err := s.startProxy(ctx, "classes-and-RU", extra)
	if err != nil {
		r.note = "TODO: " + firstLine(err.Error())
		return []*row{r}
	}
	defer px.stop()
	spec := load.DefaultSpec()
	spec.Addr, spec.Conns = px.addr, s.conns
	if err := s.measure(ctx, spec, r, px); err != nil {
		r.note = "TODO: " + firstLine(err.Error())
	}
	return []*row{r}
}
