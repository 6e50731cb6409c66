package proxy

// Hedged reads (routing.hedge_after): a routed read that its replica has
// not answered within hedge_after is sent again, as it was sent, to
// another replica of its partition, and the client gets whichever answer
// comes first. A replica that stalls (a pause of its JVM, a compaction, a
// disk) then delays a read by hedge_after rather than by the stall, which
// choosing replicas by their load (replicas.go) cannot do for the reads
// already sent when the stall began. Only reads are hedged: a write run
// twice may not be the same as once.
//
// A read is hedged only to a connection of the session the request path
// had made ready for it (its keyspace, its statement prepared there),
// other than the session's first, never opened for it; and only while
// the session's budget allows, routing.hedge_budget of the reads it could
// hedge and a few at once, so that a cluster slow everywhere is not asked
// for twice its reads.
//
// The copy that is not answered first is a leftover: its answer, when it
// comes, is dropped, and counted in its node's latency. Until then its
// stream is busy on that connection, though free for the client, which
// may reuse it at once: a request on it goes to another connection, or,
// if it must run on the session's first (it has no replica, or its only
// connections all hold the stream), waits for the leftover's answer.

import (
	"slices"
	"time"

	"github.com/cqlguard/cqlguard/frame"
)

// hedgeState is a session's hedging, guarded by its mu.
type hedgeState struct {
	// hedgeTimer fires when the first read that may be hedged is due, if
	// hedgeArmed; the reads are found in the stream table, so that what
	// hedging keeps follows what is in flight.
	hedgeTimer *time.Timer
	hedgeArmed bool
	// hedgeSpent is how much of its budget the session has spent: a
	// hedge adds 1, a read that may be hedged takes hedge_budget off, and
	// it hedges none while the next would take it over hedgeBurst.
	hedgeSpent float64
	// leftoverWait is set while the request path waits for a leftover on its
	// first connection to be answered.
	leftoverWait bool
}

// leftover is a copy of a request that another answered first: its stream
// on the connection, the tier whose latency its answer feeds (shedTier),
// when it was sent there, and the request's request.waits.
type leftover struct {
	stream int16
	tier   int8
	start  int64
	waits  uint64
}

// hedgeBurst is how many reads a session may hedge at once, however few it
// hedged before.
const hedgeBurst = 10

// maxLeftovers bounds the leftovers a connection holds: a node that stalls
// while a client's reads keep being hedged away from it is hedged to no
// more once it holds as many unanswered.
const maxLeftovers = 256

// awaitsLeftover reports whether a copy of a request on stream is awaited on u.
// The session's mu is held.
func (u *upstream) awaitsLeftover(stream int16) bool {
	if len(u.leftovers) == 0 {
		return false
	}
	for _, o := range u.leftovers {
		if o.stream == stream {
			return true
		}
	}
	return false
}

// hedgeTarget returns the connection to hedge the read req (header h) to,
// routed by r and sent on u, or nil for none: the session's connection,
// other than its first, to the best other replica, ready for the read,
// whose node sheds none of the read's tier. Request path only.
func (s *session) hedgeTarget(u *upstream, h frame.Header, req *request) *upstream {
	ks := s.keyspace.Load()
	var id []byte
	if h.Opcode == frame.OpExecute {
		if req.prepared == nil || req.prepared.ID() == nil {
			return nil
		}
		id = req.prepared.ID()
	}
	now := s.now()
	tier := shedTier(req)
	var best *upstream
	bestScore := 0.0
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.legs {
		switch {
		case v.at == u.at || v.dead.Load() || v.forget.Load() || v.load == nil:
			continue
		case !slices.Contains(s.replicas, v.at):
			continue
		case tier >= 0 && v.node != nil && v.node.ctl.Fraction(int(tier)) > 0:
			// The copy would be a request of a tier its node is
			// shedding.
			continue
		case len(v.leftovers) >= maxLeftovers || v.awaitsLeftover(h.Stream):
			continue
		case ks != nil && string(*ks) != string(v.keyspace), ks == nil && v.keyspace != nil:
			continue
		}
		if id != nil {
			if _, ok := v.prepared[string(id)]; !ok {
				continue
			}
		}
		if s.p.nodes.down(v.at, now) || s.left(v.at, now) {
			continue
		}
		if score := v.load.score(now); best == nil || score < bestScore {
			best, bestScore = v, score
		}
	}
	return best
}

// queueHedge notes that a read sent at start (its hedgeStart until it is
// hedged) may be hedged hedge_after later, and adds its part to the session's budget. Reads are sent in
// order, so a timer already set is set for an earlier one. s.mu is held.
func (s *session) queueHedge(start int64) {
	rc := &s.p.cfg.Routing
	s.hedgeSpent = max(s.hedgeSpent-rc.HedgeBudget, 0)
	// A session closing may still forward what its request path had read
	// (serveRequests): a timer set after stopHedging would hold the session
	// until it fired, hedge_after later, to hedge nothing.
	if s.hedgeArmed || s.halted {
		return
	}
	s.hedgeArmed = true
	d := time.Duration(start + int64(rc.HedgeAfter) - s.now())
	if s.hedgeTimer == nil {
		s.hedgeTimer = time.AfterFunc(d, s.hedgeDue)
		return
	}
	s.hedgeTimer.Reset(d)
}

// hedgeDue is the hedge timer's: it hedges the reads in flight that are
// due, and sets the timer for the first of the others.
func (s *session) hedgeDue() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hedgeArmed = false
	if s.halted {
		return
	}
	now := s.now()
	after := int64(s.p.cfg.Routing.HedgeAfter)
	next, waiting := int64(0), false
	s.streams.updateEach(func(stream int16, r *request) {
		switch {
		case r.hedgeTo == nil:
		case r.hedgeStart+after <= now:
			s.hedge(stream, r, now)
		case !waiting || r.hedgeStart+after < next:
			next, waiting = r.hedgeStart+after, true
		}
	})
	if waiting {
		s.hedgeArmed = true
		s.hedgeTimer.Reset(time.Duration(next - now))
	}
}

// hedge sends the read r on stream again to the connection the request
// path chose for it, if the connection is still ready for it and the
// budget allows. s.mu is held: the request path changes a connection's
// keyspace only after a USE was answered, which a read sent before it is
// then told from (its keyspace), and under s.mu.
func (s *session) hedge(stream int16, r *request, now int64) {
	v := r.hedgeTo
	r.hedgeTo = nil
	switch {
	case r.hedge != nil || r.resend == nil || r.resend.state != resendSent || r.up == nil:
	case len(r.up.leftovers) >= maxLeftovers:
		// The hedge answered first would leave one more there.
	case v.dead.Load() || v.awaitsLeftover(stream) || len(v.leftovers) >= maxLeftovers || v.to.Full():
	case s.keyspace.Load() != r.resend.keyspace || s.clientBehind():
		// A USE answered since: v may be in another keyspace by now. A
		// client behind on its answers: they wait anyway.
	case s.hedgeSpent+1 > hedgeBurst:
		s.p.metrics.hedgesRefused.Inc()
	default:
		s.hedgeSpent++
		r.hedge, r.hedgeStart = v, now
		s.countOn(v)
		if err := v.to.Offer(r.resend.frame, stream, true); err != nil {
			v.conn.Close() // its response path drops the hedge (failInFlight)
		}
		s.p.metrics.hedges.Inc()
	}
}

// leftoverAnswered takes the answer on stream from u as a leftover's, if one
// is awaited there, and reports whether it was; timed says its latency may
// be the node's, and waits are the session's clientWaits now. s.mu is
// held.
func (s *session) leftoverAnswered(u *upstream, stream int16, waits uint64, timed bool) bool {
	i := slices.IndexFunc(u.leftovers, func(o leftover) bool { return o.stream == stream })
	if i < 0 {
		return false
	}
	o := u.leftovers[i]
	u.leftovers = slices.Delete(u.leftovers, i, i+1)
	u.leftoverCount.Add(-1)
	if len(u.leftovers) == 0 && cap(u.leftovers) > 64 {
		u.leftovers = nil
	}
	s.endOn(u)
	if timed && !clientHeld(o.waits, waits) {
		// The slow node's answer, however late: routing learns from it,
		// and so does shedding, which would otherwise see only the
		// answers a node gave before a hedge's, the fast ones.
		now := s.now()
		if u.load != nil {
			u.load.observe(now-o.start, now)
		}
		if u.node != nil && o.tier >= 0 {
			u.node.observe(int(o.tier), now, now-o.start)
		}
	}
	if s.leftoverWait {
		s.leftoverWait = false
		s.room.Broadcast()
	}
	return true
}

// hedgeFailed takes an error answer f (h) from u, where the request e was
// hedged, as the hedge's failure, or an answer too large to read for nil
// f: the first copy's answer is the client's. s.mu is held.
func (s *session) hedgeFailed(u *upstream, e *request, f []byte, h frame.Header) {
	e.hedge = nil
	s.endOn(u)
	if f != nil && s.unpreparedAnswer(f, h, s.compression) {
		u.forget.Store(true)
	}
}

// hedgeWon makes u, the connection the request e was hedged to, which
// answered first, the one e runs on, and the first copy's connection the
// hedge, whose answer is then a leftover's. s.mu is held.
func (s *session) hedgeWon(u *upstream, e *request) {
	e.up, e.hedge = u, e.up
	e.start, e.hedgeStart = e.hedgeStart, e.start
	if e.resend != nil {
		e.resend.state = resendDone // the answer is the client's, whatever it is
	}
	s.p.metrics.hedgesWon.Inc()
}

// addLeftover notes that the copy of the request r on stream sent to u at
// start, whose other copy was answered, is a leftover. s.mu is held.
func (s *session) addLeftover(u *upstream, stream int16, r *request, start int64) {
	if u.dead.Load() {
		return
	}
	u.leftovers = append(u.leftovers, leftover{stream, shedTier(r), start, r.waits})
	u.leftoverCount.Add(1)
}

// stopHedging stops the hedge timer as the session closes. s.mu is held.
func (s *session) stopHedging() {
	if s.hedgeTimer != nil {
		s.hedgeTimer.Stop()
	}
	s.hedgeArmed = false
}

// holdsLeftover reports whether u awaits a leftover on stream, for a request
// on stream the request path read. Without leftovers on u, as nearly always,
// it takes no lock: a leftover on stream is added before the answer that
// freed the stream is written to the client, so before the client can
// send a request on it.
func (s *session) holdsLeftover(u *upstream, stream int16) bool {
	if u.leftoverCount.Load() == 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return u.awaitsLeftover(stream)
}
