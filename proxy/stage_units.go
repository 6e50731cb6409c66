package proxy

// unitStage charges what requests cost in request units (clients.go): to
// their class's budget and to the partitions with budgets in units, part
// as each is forwarded and the rest once it is answered. It runs after
// every stage that may refuse, so that it charges only requests that are
// forwarded.
type unitStage struct{}

func (unitStage) admit(s *session, c *call) (outcome, bool) {
	if sentCharged(&c.req) {
		s.chargeSent(&c.req, c.now)
	}
	return outcome{}, false
}

func (unitStage) answered(s *session, a *answer) {
	if a.req.client != nil || a.req.nCharges > 0 {
		s.charge(&a.req, a.f, a.h, a.now)
	}
}
