package proxy

// The handler: what to do with one request frame, decided with no socket in
// sight (see handle).

import (
	"github.com/cqlguard/cqlguard/classify"
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
	// route is where the forwarded request would best run (legs.go).
	route route
	// joined is set for a read that waits for an identical read's answer
	// (hotreads.go): it is in flight, and nothing is forwarded.
	joined bool
}

// handle decides what to do with request frame f, whose header is h,
// arriving at now (the proxy's monotonic nanoseconds). It answers what the
// protocol does not allow (a response bit, a stream id that cannot take a
// request, a STARTUP it cannot read, a statement it has not seen prepared),
// classifies the rest, and hands it to the stages (pipeline.go), which
// refuse it, serve it, or let it be forwarded with what its answer will
// need. It writes to none of its own sockets: the request path does what it
// says. (A read a hot read's stage refuses may answer reads of other
// connections that joined it, through their writers.) Frames it refuses
// are answered, not dropped, so a driver's request never waits for
// nothing.
func (s *session) handle(f []byte, h frame.Header, now int64) action {
	m := s.p.metrics
	if h.Response {
		m.protocolErrors.WithLabelValues("response_from_client").Inc()
		s.log.Info().Int16("stream", h.Stream).Str("opcode", h.Opcode.String()).Msg("request frame with the response bit set")
		return s.errorAnswer(h, frame.ErrCodeProtocol, "frame from client has the response bit set")
	}

	// A stream id names one request until its answer. A negative id is the
	// server's (events), and a second request on an id in flight would take
	// the first one's answer, or its place in the stream table: both are
	// refused before anything else is done with them, so that they change
	// nothing the proxy shares.
	if reason, msg := s.badStream(h.Stream); reason != "" {
		m.protocolErrors.WithLabelValues(reason).Inc()
		s.log.Info().Int16("stream", h.Stream).Str("opcode", h.Opcode.String()).Msg(msg)
		return s.errorAnswer(h, frame.ErrCodeProtocol, "cqlguard: "+msg)
	}

	// Classify: what the proxy must do with the response, and which tables,
	// operation and partitions the request touches.
	// The request is made in the session's call, which the stages are
	// handed (pipeline.go), rather than copied there.
	c := &s.call
	c.req = request{start: now, version: h.Version, set: s.p.settings.Load()}
	req := &c.req
	var class *classify.Classification
	switch h.Opcode {
	case frame.OpStartup:
		var refused action
		if f, refused = s.takeStartup(f, h, req); refused.answer != nil {
			*c = call{}
			return refused
		}
	case frame.OpOptions:
		req.reply = replySupported
	case frame.OpAuthResponse:
		s.takeAuthResponse(f, h, req)
	case frame.OpQuery, frame.OpPrepare, frame.OpExecute, frame.OpBatch:
		class = s.classify(f, h, req)
		s.prefetchCounters(class, req.set)
		if class != nil && class.Unprepared != nil {
			*c = call{}
			return s.unprepared(h, class.Unprepared)
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
	if class != nil && class.Internal && !s.up.rateLimitError {
		f = s.dropUsingTimeout(f, h, class)
	}
	if h.Opcode == frame.OpPrepare {
		// A PREPARE runs nothing: no stage counts, serves or limits it.
		class = nil
	}

	c.h, c.f, c.classified, c.now = h, f, class, now
	if s.p.ring != nil && s.started {
		c.route = s.route(class)
	}
	act := s.admit(c)
	if act.forward != nil {
		act.route = c.route
	}
	// What the call holds (its frame, its settings) is not kept past it.
	*c = call{}
	return act
}

// takeStartup takes in the STARTUP f (h) of req, as it will be forwarded,
// or refuses it: a connection starts once, and what it negotiated
// (compression, the opt-in, the options its class matched on) is not
// changed after.
func (s *session) takeStartup(f []byte, h frame.Header, req *request) ([]byte, action) {
	m := s.p.metrics
	if s.started {
		m.protocolErrors.WithLabelValues("bad_startup").Inc()
		s.log.Info().Msg("STARTUP on a connection already started; refused")
		return nil, s.errorAnswer(h, frame.ErrCodeProtocol, "cqlguard: STARTUP on a connection already started")
	}
	f, err := s.startup(f, h)
	if err != nil {
		m.protocolErrors.WithLabelValues("bad_startup").Inc()
		s.log.Info().Err(err).Msg("STARTUP refused")
		return nil, s.errorAnswer(h, frame.ErrCodeProtocol, err.Error())
	}
	req.reply = replyStartup
	s.awaitingV5.Store(h.Version >= 5)
	return f, action{}
}

// takeAuthResponse learns who the AUTH_RESPONSE f (h) of req logs in as,
// to take effect once the upstream accepts the login (handshake.go); a
// connection that logged in keeps who it is.
func (s *session) takeAuthResponse(f []byte, h frame.Header, req *request) {
	if s.authenticated {
		return
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
}

// unprepared answers h, which executes the statement prepared as id, with
// Unprepared: a statement the proxy has not seen prepared (prepared before
// the proxy started, or forgotten) cannot be classified, so the driver is
// told to prepare it again, through the proxy.
func (s *session) unprepared(h frame.Header, id []byte) action {
	s.p.metrics.protocolErrors.WithLabelValues("unprepared").Inc()
	s.log.Info().Int16("stream", h.Stream).Str("opcode", h.Opcode.String()).Hex("id", id).Msg("statement not prepared through the proxy; answered Unprepared")
	const msg = "cqlguard: prepared statement not known to the proxy; prepare it again"
	s.reqScratch = frame.AppendUnprepared(s.reqScratch[:0], h.Version, h.Stream, msg, id)
	return action{answer: s.reqScratch}
}

// errorAnswer is the action of answering h's stream with an ERROR of code.
func (s *session) errorAnswer(h frame.Header, code int32, msg string) action {
	v := h.Version
	if v < 3 || v > 5 {
		v = 4
	}
	s.reqScratch = frame.AppendError(s.reqScratch[:0], v, h.Stream, code, msg)
	return action{answer: s.reqScratch}
}
