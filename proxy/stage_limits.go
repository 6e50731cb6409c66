package proxy

// limitStage is the per-partition limits' stage (decide.go): a request
// over its partition's limit, or its budget in request units, is answered
// here and never costs the upstream anything. Only requests that reach it
// count: a read served by the hot reads' stage costs the upstream nothing.
type limitStage struct {
	noDecision
	noAnswer
}

func (limitStage) admit(s *session, c *call) (action, bool) {
	if c.classified == nil {
		return action{}, false
	}
	if s.p.observe != nil {
		s.p.observe(c.classified)
	}
	r, over := s.decide(c.classified, c.req.set, s.p.epochUnix+c.now)
	if s.nCharges > 0 {
		c.req.charges, c.req.nCharges = s.charges, s.nCharges
	}
	if !over {
		return action{}, false
	}
	kind := refusedLimit
	if r.tooMany > 0 {
		kind = refusedPartitions
	}
	return s.refuse(c, refusal{kind: kind, rej: r}, c.req.set.limits.dryRun)
}
