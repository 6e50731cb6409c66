package proxy

// The handler: what to do with one request frame, decided with no socket in
// sight (see handle).

import (
	"github.com/cqlguard/cqlguard/frame"
)

// action is what the request path does with a request frame: forward it
// (perhaps rewritten), remembering req until its answer, or answer it.
type action struct {
	// answer, when not nil, is the frame to answer the client with, in
	// the session's scratch space; nothing is forwarded.
	answer []byte
	// forward is the frame to forward upstream, and req what its answer
	// will need.
	forward []byte
	req     request
	// joined is set for a read that waits for an identical read's answer
	// (hotreads.go): it is in flight, and nothing is forwarded.
	joined bool
}

// handle decides what to do with request frame f, whose header is h,
// arriving at now (the proxy's monotonic nanoseconds): refuse it (a
// response bit, a stream id that cannot take a request, a STARTUP it cannot
// read, a statement it has not seen prepared, a partition over its limit),
// or forward it, with what its answer will need. It writes to no socket:
// the request path does what it says. Frames it refuses are answered, not
// dropped, so a driver's request never waits for nothing.
func (s *session) handle(f []byte, h frame.Header, now int64) action {
	m := s.p.metrics
	if h.Response {
		m.protocolErrors.WithLabelValues("response_from_client").Inc()
		s.log.Info().Int16("stream", h.Stream).Str("opcode", h.Opcode.String()).Msg("request frame with the response bit set")
		return s.refusal(h, frame.ErrCodeProtocol, "frame from client has the response bit set")
	}

	// A stream id names one request until its answer. A negative id is the
	// server's (events), and a second request on an id in flight would take
	// the first one's answer, or its place in the stream table: both are
	// refused before anything else is done with them, so that they change
	// nothing the proxy shares.
	if reason, msg := s.badStream(h.Stream); reason != "" {
		m.protocolErrors.WithLabelValues(reason).Inc()
		s.log.Info().Int16("stream", h.Stream).Str("opcode", h.Opcode.String()).Msg(msg)
		return s.refusal(h, frame.ErrCodeProtocol, "cqlguard: "+msg)
	}

	// Classify: what the proxy must do with the response, and which tables,
	// operation and partitions the request touches.
	req := request{start: now, version: h.Version, set: s.p.settings.Load()}
	var class *Classification
	switch h.Opcode {
	case frame.OpStartup:
		// A connection starts once: what it negotiated (compression, the
		// opt-in, the options its class matched on) is not changed after.
		if s.started {
			m.protocolErrors.WithLabelValues("bad_startup").Inc()
			s.log.Info().Msg("STARTUP on a connection already started; refused")
			return s.refusal(h, frame.ErrCodeProtocol, "cqlguard: STARTUP on a connection already started")
		}
		var err error
		if f, err = s.startup(f, h); err != nil {
			m.protocolErrors.WithLabelValues("bad_startup").Inc()
			s.log.Info().Err(err).Msg("STARTUP refused")
			return s.refusal(h, frame.ErrCodeProtocol, err.Error())
		}
		req.reply = replyStartup
		s.awaitingV5.Store(h.Version >= 5)
	case frame.OpOptions:
		req.reply = replySupported
	case frame.OpAuthResponse:
		// Learned once the upstream accepts the login (handshake.go); a
		// connection that logged in keeps who it is.
		if s.authenticated {
			break
		}
		body := f[frame.HeaderSize:]
		if h.Compressed() {
			var err error
			if body, err = s.decompress(body, len(f)); err != nil {
				body = nil
			}
		}
		req.reply = replyAuth
		s.pending.principal = s.p.principalOf(s.pending.principal, body)
		s.learnUser(body)
	case frame.OpQuery, frame.OpPrepare, frame.OpExecute, frame.OpBatch:
		var unknown []byte
		class, unknown = s.classify(f, h, &req)
		s.prefetchCounters(class, req.set)
		// A statement the proxy has not seen prepared (prepared before the
		// proxy started, or forgotten) cannot be classified: the driver is
		// told to prepare it again, through the proxy.
		if unknown != nil {
			m.protocolErrors.WithLabelValues("unprepared").Inc()
			s.log.Info().Int16("stream", h.Stream).Str("opcode", h.Opcode.String()).Hex("id", unknown).Msg("statement not prepared through the proxy; answered Unprepared")
			const msg = "cqlguard: prepared statement not known to the proxy; prepare it again"
			s.reqScratch = frame.AppendUnprepared(s.reqScratch[:0], h.Version, h.Stream, msg, unknown)
			return action{answer: s.reqScratch}
		}
	default:
		// The upstream answers what it does not know in its own words; the
		// proxy only notes it.
		if !h.Opcode.Valid() {
			m.protocolErrors.WithLabelValues("unknown_opcode").Inc()
			s.log.Info().Int16("stream", h.Stream).Uint8("opcode", uint8(h.Opcode)).Msg("unknown opcode; forwarded for the upstream to answer")
		}
	}

	// A driver that takes cqlguard for ScyllaDB, because it advertises
	// ScyllaDB's rate-limit error, may add ScyllaDB's USING TIMEOUT to its
	// queries of the system tables (ScyllaDB's Rust driver does), which
	// Cassandra refuses as a syntax error.
	internal := class != nil && class.Internal || h.Opcode == frame.OpPrepare && req.prepared != nil && req.prepared.internal
	if internal && !s.upstreamRateLimit {
		f = s.dropUsingTimeout(f, h)
	}

	// Client classes: a request of a class in debt on its budget is
	// refused; any other is charged to its class as it is forwarded and
	// once answered.
	if class != nil && !class.Internal {
		c := s.clientOf(req.set.clients)
		c.requests.Inc()
		dryRun := req.set.limits.dryRun
		if c.overBudget(now, dryRun) {
			return s.budgetRefusal(h, c)
		}
		if s.node != nil {
			act, refused, price := s.shedRequest(h, c, dryRun)
			if refused {
				return act
			}
			req.price = price
		}
		req.client, req.size = c, int32(len(f))
	}

	// Hot reads: what a request may change is invalidated when it is
	// answered; a hot read may be served without reaching the upstream.
	if tables := req.set.hotReads; tables != nil {
		req.wrote = s.writes(h, class, req.use)
		if class != nil && class.Op == OpRead {
			if act, ok := s.serveHot(h, class, &req, tables, now); ok {
				return act
			}
		}
	}

	// Decide: a request over its partition's limit is answered here and
	// never costs the upstream anything. Only reads that reach the
	// upstream count: one served by a hot read costs it nothing.
	if class != nil {
		req.ddl = class.Op == OpNone && !class.Internal
		if s.p.observe != nil {
			s.p.observe(class)
		}
		r, reject := s.decide(class, req.set, s.p.epochUnix+now)
		if s.nCharges > 0 {
			req.charges, req.nCharges = s.charges, s.nCharges
		}
		if req.flight != nil {
			if reject {
				s.leading.refused.Inc()
			} else {
				s.leading.forwarded.Inc()
			}
		}
		if reject {
			ans := s.rateLimited(h, r)
			if req.flight != nil {
				// The reads that joined this one are refused with it: their
				// partition is over its limit too.
				s.p.hotReads.refuse(req.flight, ans)
			}
			return action{answer: ans}
		}
	}
	if sentCharged(&req) {
		s.chargeSent(&req, now)
	}
	return action{forward: f, req: req}
}

// refusal is the action of answering h's stream with an ERROR of code.
func (s *session) refusal(h frame.Header, code int32, msg string) action {
	v := h.Version
	if v < 3 || v > 5 {
		v = 4
	}
	s.reqScratch = frame.AppendError(s.reqScratch[:0], v, h.Stream, code, msg)
	return action{answer: s.reqScratch}
}
