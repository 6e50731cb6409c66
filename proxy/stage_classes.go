package proxy

// classStage is the client classes' stage (clients.go): a request of a
// class in debt on its budget is refused; any other is noted with its
// class, which the units stage charges as it is forwarded and once
// answered.
type classStage struct{}

// classState is the connection's part of client classes, request path
// only: what is known of the client, whether it changed since its class
// was matched, the classes it was matched against, and its class.
type classState struct {
	identity        clientIdentity
	identityChanged bool
	classesSeen     *clientClasses
	clientClass     *clientClass
}

func (classStage) admit(s *session, c *call) (outcome, bool) {
	if c.classified == nil || c.classified.Internal {
		return outcome{}, false
	}
	cl := s.clientOf(c.req.set.clients)
	cl.requests.Inc()
	if cl.inDebt(c.now) {
		if o, refused := s.refuse(c, refusal{kind: refusedBudget, clientClass: cl}, c.req.set.limits.dryRun); refused {
			return o, true
		}
	}
	c.req.client, c.req.size = cl, int32(len(c.f))
	return outcome{}, false
}
