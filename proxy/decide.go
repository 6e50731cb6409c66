package proxy

import (
	"github.com/cqlguard/cqlguard/classify"
	"github.com/cqlguard/cqlguard/ratelimit"
	"github.com/cqlguard/cqlguard/schema"
)

// rejection names what a refused request was refused for.
type rejection struct {
	table *schema.Table
	op    classify.Op
	// tooMany is set when the request touches more partitions of table
	// than limits.max_partitions_per_request, rather than being over a
	// partition's limit; it is the bound.
	tooMany int
}

// decide counts a classified request against the limits of each partition
// it touches and reports whether it is over one, and which (the limit
// stage refuses it). A request the classifier could not pin, an internal
// one, and one on a table without a limit for its operation pass
// uncounted. A batch counts each of its partitions once and is over if any
// of them is over its limit. It allocates nothing. now is the request's
// time on the proxy's clock.
//
// Every partition counted, limited or not, is also counted by the hot
// partitions sketch behind /hot: each operation while the sketch has room,
// a random one in ratelimit.TopKSampleEvery, weighted to match, once it is
// full (ratelimit.TopK.ObserveSampledAt); but not when observed: the hot
// reads' stage counted the request already (serveHot).
func (s *session) decide(c *classify.Classification, observed bool, set *settings, now int64) (rejection, bool) {
	if c == nil || c.Internal || (c.Op != classify.OpRead && c.Op != classify.OpWrite) {
		return rejection{}, false
	}
	s.nCharges = 0
	l, lim, fl := set.limits, set.limiter, set.fleet
	limited := l != nil && lim != nil && (!c.LWT || l.limitLWT) && (!c.Counter || l.limitCounters)
	if c.Overflow != nil {
		return s.decideOverflow(c, l, limited)
	}
	if !c.Pinned {
		return rejection{}, false
	}
	hot := s.p.hotSketch
	if hot == nil && !limited {
		return rejection{}, false
	}
	var refused rejection
	rejected := false
	for _, p := range c.Partitions {
		if p.Table == nil {
			continue
		}
		tl := s.tableLimits(l, p.Table, c.Op)
		label := tl.label
		if hot != nil && !observed {
			hot.ObserveSampledAt(now, p.Token, label, p.Key, s.clientClassTag(), &s.hotRNG)
		}
		if !limited {
			continue
		}
		limit, units := tl.limit, tl.units
		if units > 0 && !s.withinUnits(set.units, units, &p, label, now) && !rejected {
			refused, rejected = rejection{table: p.Table, op: c.Op}, true
		}
		if !admit(lim, fl, now, p.Token, label, limit) && !rejected {
			refused, rejected = rejection{table: p.Table, op: c.Op}, true
		}
	}
	return refused, rejected
}

// admit counts an operation on the partition at token against limit (none
// when 0) and reports whether it is within it, at now on the limiter's
// clock. With a fleet (coordination), every operation is counted for its
// report and admitted while within the share the fleet's rate leaves
// (ratelimit.Fleet); the local limiter then decides what the fleet admits,
// as a defence when the fleet's view is late.
func admit(lim *ratelimit.Limiter, fl *ratelimit.Fleet, now, token int64, label ratelimit.Label, limit uint32) bool {
	if limit == 0 {
		return true
	}
	ok := true
	if fl != nil {
		ok, limit = fl.Decide(now, token, label, limit)
	}
	return ok && lim.AllowAt(now, token, label, limit) != ratelimit.Reject
}

// decideHandedOn decides, as decide would have, the hot read e of the
// partition at token, which waited on an identical read and is forwarded
// on its own connection after all (reissue): it reaches the upstream, so
// it counts against its partition's limit and budget in request units like
// any read, and is refused when over them. It runs on whichever goroutine
// hands the read on, under s.mu, and so touches only e of the session.
func (s *session) decideHandedOn(e *request, token int64, now int64) (rejection, bool) {
	t := e.joinedTable
	l, lim, fl := e.set.limits, e.set.limiter, e.set.fleet
	if t == nil || l == nil || lim == nil {
		return rejection{}, false
	}
	at := s.p.epochUnix + now
	limit, units := l.forOp(t, classify.OpRead)
	label := labelOf(t, classify.OpRead)
	rejected := false
	if u := e.set.units; units > 0 && u != nil {
		e.charges[0] = unitCharge{token: token, label: label, budget: float32(units)}
		e.nCharges = 1
		rejected = !u.Allow(at, token, label, float64(units))
	}
	if !admit(lim, fl, at, token, label, limit) {
		rejected = true
	}
	if !rejected {
		return rejection{}, false
	}
	return rejection{table: t, op: classify.OpRead}, true
}

// tableLimits is what decide needs of a table for one operation: its
// limiter label, and its limits under one configuration.
type tableLimits struct {
	l            *limits
	table        *schema.Table
	op           classify.Op
	label        ratelimit.Label
	limit, units uint32
}

// tableLimits returns table's label and limits for op under l (which may
// be nil), from the last call's when it asked the same: a client's
// requests nearly all touch the table the one before did, and resolving
// the limits takes two map lookups by name and the label a hash of the
// names. Tables and limits are replaced, never changed, when the schema or
// the configuration is, so the pointers say when to resolve again.
func (s *session) tableLimits(l *limits, table *schema.Table, op classify.Op) *tableLimits {
	tl := &s.lastTable
	if tl.table != table || tl.l != l || tl.op != op {
		*tl = tableLimits{l: l, table: table, op: op, label: labelOf(table, op)}
		if l != nil {
			tl.limit, tl.units = l.forOp(table, op)
		}
	}
	return tl
}

// prefetchCounters starts the limiter's reads of the counters of the
// partitions c touches that decide will count, so that they come from
// memory while the request path does its other work first (prefetch
// changes nothing). A handful of partitions at most: a batch's counters
// past them are waited for as they come.
func (s *session) prefetchCounters(c *classify.Classification, set *settings) {
	if c == nil || c.Internal || !c.Pinned || (c.Op != classify.OpRead && c.Op != classify.OpWrite) {
		return
	}
	l, lim := set.limits, set.limiter
	const most = 4
	for i, p := range c.Partitions {
		if i == most {
			return
		}
		if p.Table == nil {
			continue
		}
		if tl := s.tableLimits(l, p.Table, c.Op); tl.limit > 0 {
			lim.Prefetch(p.Token, tl.label)
		}
	}
}

// withinUnits reports whether partition p is out of debt on its budget of
// budget request units a second, and notes it to be charged once the
// request is answered: the first maxCharges partitions of a request are,
// each its share of the price.
func (s *session) withinUnits(units *ratelimit.Units, budget uint32, p *classify.Partition, label ratelimit.Label, now int64) bool {
	if units == nil {
		return true
	}
	if s.nCharges < maxCharges {
		s.charges[s.nCharges] = unitCharge{token: p.Token, label: label, budget: float32(budget)}
		s.nCharges++
	}
	return units.Allow(now, p.Token, label, float64(budget))
}

// decideOverflow decides a request that touches more partitions of a
// table than limits.max_partitions_per_request: refused when that table
// has a limit for the request's operation, as counting past the bound is
// work without bound and not counting would let the request through its
// limits; forwarded uncounted otherwise.
func (s *session) decideOverflow(c *classify.Classification, l *limits, limited bool) (rejection, bool) {
	if !limited {
		return rejection{}, false
	}
	limit, writes := l.forTable(c.Overflow)
	if c.Op == classify.OpWrite {
		limit = writes
	}
	if limit == 0 {
		return rejection{}, false
	}
	return rejection{table: c.Overflow, op: c.Op, tooMany: l.maxPartitions}, true
}

// labelOf is the limiter label of t's reads or writes: a hash of the
// table's name with the operation in the low bit. Two tables whose names
// collide share counters only on partitions with the same token.
func labelOf(t *schema.Table, op classify.Op) ratelimit.Label {
	h := uint32(2166136261)
	for i := 0; i < len(t.Keyspace); i++ {
		h = (h ^ uint32(t.Keyspace[i])) * 16777619
	}
	h = (h ^ '.') * 16777619
	for i := 0; i < len(t.Name); i++ {
		h = (h ^ uint32(t.Name[i])) * 16777619
	}
	l := h &^ 1
	if op == classify.OpWrite {
		l |= 1
	}
	return ratelimit.Label(l)
}
