package proxy

// limitStage is the per-partition limits' stage (decide.go): a request
// over its partition's limit, or its budget in request units, is answered
// here and never costs the upstream anything. Only requests that reach it
// count: a read served by the hot reads' stage costs the upstream nothing.
type limitStage struct{}

// limitState is the connection's part of the limits, request path only.
type limitState struct {
	// charges are the partitions decide found with budgets in request
	// units, for the request being handled.
	charges  [maxCharges]unitCharge
	nCharges uint8
	// hotRNG is the random state of the samples /hot's sketch takes
	// (ratelimit.TopK.ObserveSampledAt).
	hotRNG uint64
	// lastTable is what decide last resolved for a table, which the next
	// request nearly always touches again.
	lastTable tableLimits
}

func (limitStage) admit(s *session, c *call) (outcome, bool) {
	if c.classified == nil {
		return outcome{}, false
	}
	if s.p.observe != nil {
		s.p.observe(c.classified)
	}
	r, over := s.decide(c.classified, c.observed, c.req.set, s.p.epochUnix+c.now)
	if s.nCharges > 0 {
		c.req.charges, c.req.nCharges = s.charges, s.nCharges
	}
	if !over {
		return outcome{}, false
	}
	kind := refusedLimit
	if r.tooMany > 0 {
		kind = refusedPartitions
	}
	return s.refuse(c, refusal{kind: kind, rej: r}, c.req.set.limits.dryRun)
}
