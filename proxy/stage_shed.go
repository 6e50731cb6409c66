package proxy

import (
	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/shed"
)

// shedStage sheds (shedding.go): while the node a request would run on (the
// connection's, or the replica routing chose) is slow, a request of a tier
// being shed is refused, or, with shedding.max_price, a request of a class
// with a budget is priced up instead: its request units are multiplied by
// its price. A request routed to a replica that sheds its tier runs on
// another of its replicas that does not, if there is one, instead. Its
// draw is the session's own random number, so that nothing is shared
// between connections. Each answer the node's latency can be read from
// feeds the node's signals.
type shedStage struct{}

// shedState is the connection's part of shedding: the request path's
// random state. The node's signals are its upstream's.
type shedState struct {
	rng uint64
}

func (shedStage) admit(s *session, c *call) (outcome, bool) {
	sh, n, cl := s.p.shedding, s.up.node, c.req.client
	if n == nil || cl == nil {
		return outcome{}, false
	}
	if r := c.route; r.load != nil && r.to != s.up.at {
		n = r.load.signals(sh)
	}
	tier := config.DefaultTier
	if s.clientClass != nil {
		tier = s.clientClass.tier
	}
	t := min(max(tier, 0), shed.MaxTier)
	// Most requests find their tier's bit set: one load, no write to the
	// word every connection shares.
	if bit := uint32(1) << t; sh.seen.Load()&bit == 0 {
		sh.seen.Or(bit)
	}
	dryRun := c.req.set.limits.dryRun || sh.cfg.DryRun
	if c.route.load != nil && n.ctl.Fraction(tier) > 0 {
		if to, load := s.unshedReplica(c.route.to, tier); load != nil {
			// In a dry run the request goes where routing chose, but
			// would not have been shed.
			n = load.signals(sh)
			if !dryRun {
				c.route.to, c.route.load = to, load
			}
		}
	}
	if sh.cfg.Pricing() && cl.budget != nil {
		f := n.ctl.Fraction(tier)
		switch {
		case f == 0:
		case dryRun:
			sh.dryPricedByTier[t].Inc()
		default:
			sh.pricedByTier[t].Inc()
			c.req.price = float32(1 + (sh.cfg.MaxPrice-1)*f)
		}
		return outcome{}, false
	}
	if !n.ctl.Shed(tier, s.draw()) {
		return outcome{}, false
	}
	return s.refuse(c, refusal{kind: refusedShed, tier: tier, node: n}, dryRun)
}

func (shedStage) answered(s *session, a *answer) {
	if u, t := a.req.up, shedTier(&a.req); a.timed && u != nil && u.node != nil && t >= 0 {
		u.node.observe(int(t), a.now, a.now-a.req.start)
	}
}

// unshedReplica returns the best of the request's replicas (left in
// s.replicas by route) other than chosen that sheds nothing of tier, and
// its load; nil if none does. Routing may choose a replica that is
// shedding (one it tries again once it has not answered for a while), and
// a request shed there would teach routing nothing of it: it would choose
// it again for the next.
func (s *session) unshedReplica(chosen string, tier int) (string, *nodeLoad) {
	sh := s.p.shedding
	best, bestScore := "", 0.0
	var bestLoad *nodeLoad
	now := s.now()
	for _, addr := range s.replicas {
		if addr == chosen || addr != s.up.at && (s.p.nodes.down(addr, now) || s.left(addr, now)) {
			continue
		}
		l := s.p.loads.of(addr)
		if l.signals(sh).ctl.Fraction(tier) > 0 {
			continue
		}
		if score := l.score(now); bestLoad == nil || score < bestScore {
			best, bestScore, bestLoad = addr, score, l
		}
	}
	return best, bestLoad
}

// shedTier is the tier whose latency the answer to r feeds, its class's;
// -1 for none, for a request no class is charged (the system tables').
func shedTier(r *request) int8 {
	if r.client == nil {
		return -1
	}
	return int8(min(max(r.client.tier, 0), shed.MaxTier))
}
