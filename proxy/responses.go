package proxy

// The response path: what the proxy does with each frame the upstream sends.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cqlguard/cqlguard/classify"
	"github.com/cqlguard/cqlguard/frame"
)

// serveResponses is a response path: it forwards each frame from the
// upstream connection u to the client, rewriting what reveals the
// upstream's topology.
func (s *session) serveResponses(u *upstream) error {
	if u == s.up {
		defer func() {
			// A request path waiting for an answer must not wait forever,
			// nor one that forwards another awaited request from what it
			// has read already: from now on every wait ends at once,
			// refused.
			s.settling.Lock()
			s.awaiting.Store(false)
			s.awaitingV5.Store(false)
			s.unanswered = true
			close(s.answered)
			s.settling.Unlock()
		}()
	}
	// A path that ends writes what others left it (handoff.go).
	defer s.toClient.Push()
	u.in.SetBeforeWait(s.kickClient)
	var t answerTiming
	// What this path handled since it last wrote or waited (writeLeft).
	handled := 0
	for {
		if u.from.Buffered() == 0 {
			handled = 0
			u.from.Release()
			u.from.Shrink()
			// Everything this read gave is handled: one write to the
			// client for all of it, unless another path that is about
			// to wake writes it with its own.
			if !s.handOff(u) {
				if err := s.toClient.Push(); err != nil {
					return fmt.Errorf("%w: %w", errClientGone, err)
				}
			}
			u.in.Park()
			u.waiting.Store(true)
			waited := u.in.Wait()
			u.waiting.Store(false)
			if waited {
				t.caughtUp(s.clientWaits.Load())
			}
		}
		f, h, err := u.from.Next()
		if handled += 1 + h.Length>>10; handled >= leftWriteWeight {
			handled = 0
			s.writeLeft()
		}
		if err != nil {
			var tooLarge *frame.TooLargeError
			if !errors.As(err, &tooLarge) {
				return err
			}
			s.respMu.Lock()
			s.answerTooLarge(u, h, err)
			s.respMu.Unlock()
			continue
		}
		s.p.metrics.frame(dirResponse, h.Opcode, len(f))
		s.respMu.Lock()
		idle, err := s.serveResponse(u, f, h, &t)
		s.respMu.Unlock()
		if idle || err != nil {
			return err
		}
	}
}

// answerTiming tells the response path whether an answer's time is the
// node's latency: it cannot be if the answer may have waited for the
// client. untimed is set once a write to the client waited (waits is what
// was seen of them, session.clientWaits), and cleared once the response
// path has found the upstream's socket empty, with no such write waiting:
// what it reads next arrived after.
type answerTiming struct {
	waits   uint64
	untimed bool
}

// caughtUp notes that the upstream's socket was found empty, with w
// writes to the client seen.
func (t *answerTiming) caughtUp(w uint64) {
	if uint32(w) == 0 {
		t.waits, t.untimed = w, false
	}
}

// timed reports whether an answer read now, with w writes to the client
// seen, is timed as the node's.
func (t *answerTiming) timed(w uint64) bool {
	if w != t.waits {
		// One began, or is under way (waits was taken with none).
		t.waits, t.untimed = w, true
	}
	return !t.untimed
}

// answerTooLarge answers the stream of a response frame too large to read,
// h its header, with a server error, and ends its request.
func (s *session) answerTooLarge(u *upstream, h frame.Header, err error) {
	s.p.metrics.protocolErrors.WithLabelValues("response_too_large").Inc()
	s.log.Warn().Str("node", u.addr).Int("bytes", h.Length).Msg("response frame too large")
	s.mu.Lock()
	u.activity++
	if len(u.leftovers) > 0 && s.leftoverAnswered(u, h.Stream, 0, false) {
		s.mu.Unlock()
		return
	}
	if e := s.streams.lookup(h.Stream); e != nil && e.hedge == u && u != s.up {
		s.hedgeFailed(u, e, nil, h)
		s.mu.Unlock()
		return
	}
	var unprepared []byte
	if e := s.streams.lookup(h.Stream); e != nil && e.up == u && e.resend != nil && e.resend.state == resendPreparing {
		// The answer to the proxy's PREPARE of a statement the node
		// forgot (reprepare.go): the client gets the node's Unprepared.
		unprepared, _ = s.gaveUp(u, e.resend, "the replica's answer to a PREPARE is too large")
	}
	req, ended := s.endStream(h.Stream)
	s.wakeRequests()
	s.mu.Unlock()
	if ended {
		s.p.inflight.Give(1)
		s.ended(req)
	}
	switch {
	case unprepared != nil:
		// Counted in cqlguard_frames_total as it was read.
		if err := s.toClient.Write(unprepared); err != nil {
			s.log.Debug().Err(err).Msg("cannot answer client")
		}
	case req.reply != replyAsked:
		// The proxy's own request (legs.go) is not the client's to be
		// answered: the request path waiting on it is told it failed.
		s.writeError(&s.respScratch, h.Version, h.Stream, frame.ErrCodeServer, "cqlguard: response "+err.Error())
	}
	if _, awaited := s.verdictOf(&req, ended, h); awaited {
		s.settle(notAccepted)
	}
}

// serveResponse hands the upstream's frame f, whose header is h, to the
// client: it ends the request it answers, runs what the answer does (the
// stages' answered hooks, the connection's keyspace),
// rewrites what the proxy must, and settles a request the request path
// waits on. It reports whether the session, draining, has nothing left in
// flight.
func (s *session) serveResponse(u *upstream, f []byte, h frame.Header, t *answerTiming) (idle bool, err error) {
	// The request is ended into the session's answer, which the stages are
	// handed, rather than copied there; nothing of it is kept past it.
	a := &s.answering
	defer func() { *a = answer{} }()
	req := &a.req
	var ok bool
	verdict, awaited := notAccepted, false
	s.mu.Lock()
	u.activity++
	comp := s.compression
	waits := s.clientWaits.Load()
	if len(u.leftovers) > 0 && s.leftoverAnswered(u, h.Stream, waits, t.timed(waits)) {
		// A hedged read's copy answered second (hedge.go).
		s.mu.Unlock()
		return false, nil
	}
	kept := false // a request kept for resending (reprepare.go)
	if u != s.up {
		// A connection to another node carries only requests sent on it:
		// a frame on another stream (a misbehaving node's, or an event,
		// which it never registered for) answers nothing of the client's.
		e := s.streams.lookup(h.Stream)
		if e == nil || e.up != u && e.hedge != u {
			s.mu.Unlock()
			s.p.metrics.protocolErrors.WithLabelValues("stray_response").Inc()
			s.log.Info().Str("node", u.addr).Int16("stream", h.Stream).Str("opcode", h.Opcode.String()).Msg("frame from a replica on a stream it was sent no request on; dropped")
			return false, nil
		}
		hedgeWon := false
		if e.hedge == u {
			if h.Opcode == frame.OpError {
				// The hedge failed where the read may not have: the
				// first copy's answer is the client's.
				s.hedgeFailed(u, e, f, h)
				s.mu.Unlock()
				return false, nil
			}
			s.hedgeWon(u, e)
			hedgeWon = true
		}
		if kept = e.resend != nil; kept && !hedgeWon {
			var send []byte
			if send, f, h = s.resent(u, e, f, h, comp); send != nil {
				// The node forgot the request's statements: the answer is
				// the proxy's, and the request stays in flight. Offered,
				// not written: the response path must not wait on the
				// node's socket, and what it adds is bounded by the
				// requests in flight.
				s.mu.Unlock()
				if err := u.to.Offer(send, h.Stream, true); err != nil {
					u.conn.Close() // its response path ends the request
				}
				return false, nil
			}
		}
	}
	*req, ok = s.endStream(h.Stream)
	idle = s.drained()
	if s.awaiting.Load() {
		verdict, awaited = s.verdictOf(req, ok, h)
		if awaited && verdict == accepted && req.reply == replyStartup {
			// What the upstream sends after READY or AUTHENTICATE is
			// compressed as the STARTUP asked.
			s.compression = s.pending.comp
			s.markLWT = s.pending.lwtMark && !s.up.lwtMark
		}
	}
	s.wakeRequests()
	s.mu.Unlock()
	if ok && req.reply == replyAsked {
		// The proxy's own request (legs.go): its answer is the request
		// path's, not the client's.
		s.p.inflight.Give(1)
		if verdict == accepted && req.prepared != nil && !s.preparedAs(f, h, comp, req.prepared.ID()) {
			verdict = notAccepted
		}
		s.settle(verdict)
		return idle, nil
	}
	if ok {
		s.p.inflight.Give(1)
		a.f, a.h, a.now = f, h, s.now()
		a.timed = t.timed(waits) && !clientHeld(req.waits, waits)
		if a.timed && u.load != nil {
			u.load.observe(a.now-req.start, a.now)
		}
		if u != s.up && h.Opcode == frame.OpError && (req.prepared != nil || kept) {
			s.forgetPrepared(u, f, h, comp)
		}
		s.answeredRequest(a, comp)
		if req.ddl && h.Opcode == frame.OpResult && s.p.agreement != nil && s.schemaChanged(f, h, comp) {
			if err := s.awaitAgreement(u.addr); err != nil {
				return idle, err
			}
		}
	}
	if h.Opcode == frame.OpEvent || req.reply != replyForward {
		var keep bool
		if f, keep = s.rewriteForClient(f, h, *req, comp, awaited); !keep {
			return false, nil
		}
	}
	if err := s.toClient.Write(f); err != nil {
		return idle, fmt.Errorf("%w: %w", errClientGone, err)
	}
	if awaited {
		if verdict == accepted && req.reply == replyStartup && s.awaitingV5.Load() {
			// READY and AUTHENTICATE are the last plain frames; what
			// follows, both ways, travels in segments.
			lz4 := s.pending.comp == frame.CompressionLZ4
			s.toClient.UseSegments(lz4)
			u.to.UseSegments(lz4)
			u.from.UseSegments(lz4)
		}
		s.settle(verdict)
	}
	return idle, nil
}

// answeredRequest does what the answer a does before the client sees it
// (the stages' answered hooks, the connection's keyspace).
func (s *session) answeredRequest(a *answer, comp frame.Compression) {
	// The node's latency, for the histogram and for shedding, is not what
	// a client that does not read makes it look.
	if a.timed {
		s.p.metrics.upstreamLatency.Observe(float64(a.now-a.req.start) / 1e9)
	}
	if a.req.use && a.h.Opcode == frame.OpResult {
		s.learnKeyspace(a.f, a.h, comp)
	}
	// Before the client sees the answer: a read it sends next must not be
	// served from before its write (the hot reads' stage).
	s.stagesAnswered(a)
}

// rewriteForClient rewrites f (h), the answer to req or an event, as its
// classification asked, and reports whether the client is to get it: an
// event the client did not register for is dropped, and an answer that
// cannot be rewritten is answered with a server error instead.
func (s *session) rewriteForClient(f []byte, h frame.Header, req request, comp frame.Compression, awaited bool) ([]byte, bool) {
	f, keep, err := s.rewriteResponse(f, h, req, comp)
	if err != nil {
		s.p.metrics.protocolErrors.WithLabelValues("bad_response").Inc()
		s.log.Warn().Err(err).Str("opcode", h.Opcode.String()).Msg("cannot rewrite response")
		if h.Stream < 0 {
			return nil, false
		}
		s.writeError(&s.respScratch, h.Version, h.Stream, frame.ErrCodeServer, "cqlguard: "+err.Error())
		if awaited {
			s.settle(notAccepted)
		}
		return nil, false
	}
	if !keep {
		s.p.metrics.filteredEvents.Inc()
	}
	return f, keep
}

// rewriteResponse applies what classification asked of a response.
func (s *session) rewriteResponse(f []byte, h frame.Header, req request, negotiated frame.Compression) ([]byte, bool, error) {
	comp := frame.CompressionNone
	if h.Compressed() {
		comp = negotiated
	}
	t := s.p.topo
	switch {
	case h.Opcode == frame.OpEvent:
		body, err := s.responseBody(f, comp)
		if err != nil {
			return nil, false, fmt.Errorf("EVENT: %w", err)
		}
		return t.event(f, h, body)
	case req.reply == replySupported && h.Opcode == frame.OpSupported:
		body, err := s.responseBody(f, comp)
		if err != nil {
			return nil, false, fmt.Errorf("SUPPORTED: %w", err)
		}
		out, err := t.supported(h, body)
		return out, true, err
	case h.Opcode != frame.OpResult:
		return f, true, nil
	case req.reply == replyPrepared:
		out, err := s.learnPrepared(f, h, comp, req.prepared)
		return out, true, err
	case req.reply == replyLocal, req.reply == replyPeers, req.reply == replyPeersV2:
		body, err := s.responseBody(f, comp)
		if err != nil {
			return nil, false, fmt.Errorf("topology rows: %w", err)
		}
		var cols []string
		if req.prepared != nil {
			cols = req.prepared.Columns()
		}
		out, err := t.rows(f, h, body, req.reply, cols)
		return out, true, err
	}
	return f, true, nil
}

// responseBody returns the body of the response f, decompressed with comp.
// It is for the responses the proxy rewrites, which are few: the
// decompressed body is not kept.
func (s *session) responseBody(f []byte, comp frame.Compression) ([]byte, error) {
	body := f[frame.HeaderSize:]
	if comp == frame.CompressionNone {
		return body, nil
	}
	var d frame.Decompressor
	return d.Body(comp, body, int(s.p.cfg.MaxFrameBytes))
}

// learnPrepared records the statement a RESULT Prepared f names: what the
// request path learned of its text (p), completed with what the upstream
// reports (classify.Registry.Learn). It returns f, or f with the LWT mark
// set for a conditional statement when the driver asked for the mark and
// the upstream does not set it.
func (s *session) learnPrepared(f []byte, h frame.Header, comp frame.Compression, p *classify.Prepared) ([]byte, error) {
	whole, err := s.responseBody(f, comp)
	if err != nil {
		return nil, err
	}
	body, _ := frame.ResponseMessage(whole, h)
	if kind, ok := frame.ResultKind(body); !ok || kind != frame.ResultKindPrepared {
		return f, nil // an error, say
	}
	prep, err := frame.ParsePrepared(body, h.Version)
	if err != nil {
		return nil, fmt.Errorf("RESULT Prepared: %w", err)
	}
	p = s.p.prepared.Learn(p, &prep)
	if s.markLWT && p.LWT() && !prep.LWT {
		return frame.AppendPreparedLWT(nil, h, whole)
	}
	return f, nil
}

// learnKeyspace sets the connection's keyspace from the upstream's answer
// to a USE: a RESULT Set_keyspace, which names the keyspace as stored.
// Anything else leaves the keyspace as it was.
func (s *session) learnKeyspace(f []byte, h frame.Header, comp frame.Compression) {
	body := f[frame.HeaderSize:]
	if h.Compressed() {
		var err error
		if body, err = s.responseBody(f, comp); err != nil {
			return
		}
	}
	body, _ = frame.ResponseMessage(body, h)
	name, ok := frame.SetKeyspace(body)
	if !ok {
		return
	}
	ks := append([]byte(nil), name...)
	s.keyspace.Store(&ks)
}

// preparedAs reports whether f (h), a RESULT, names the prepared
// statement id.
func (s *session) preparedAs(f []byte, h frame.Header, comp frame.Compression, id []byte) bool {
	if !h.Compressed() {
		comp = frame.CompressionNone
	}
	whole, err := s.responseBody(f, comp)
	if err != nil {
		return false
	}
	body, _ := frame.ResponseMessage(whole, h)
	prep, err := frame.ParsePrepared(body, h.Version)
	return err == nil && bytes.Equal(prep.ID, id)
}

// forgetPrepared notes, for an ERROR f (h) from u, a connection to another
// node, that says a statement is not prepared there (the node restarted,
// or evicted it), that it is not: the next EXECUTE prepares it again.
func (s *session) forgetPrepared(u *upstream, f []byte, h frame.Header, comp frame.Compression) {
	if s.unpreparedAnswer(f, h, comp) {
		u.forget.Store(true)
	}
}

// unpreparedAnswer reports whether f (h), an ERROR, is Unprepared.
func (s *session) unpreparedAnswer(f []byte, h frame.Header, comp frame.Compression) bool {
	body, ok := s.responseMessage(f, h, comp)
	return ok && len(body) >= 4 && int32(binary.BigEndian.Uint32(body)) == frame.ErrCodeUnprepared
}

// schemaChanged reports whether f (h), a RESULT, is a Schema_change.
func (s *session) schemaChanged(f []byte, h frame.Header, comp frame.Compression) bool {
	body, ok := s.responseMessage(f, h, comp)
	if !ok {
		return false
	}
	kind, ok := frame.ResultKind(body)
	return ok && kind == frame.ResultKindSchemaChange
}

// responseMessage returns the message of f (h), an answer on a connection
// of compression comp, decompressed and past its tracing id, warnings and
// custom payload; ok is false when it does not decompress.
func (s *session) responseMessage(f []byte, h frame.Header, comp frame.Compression) (body []byte, ok bool) {
	if !h.Compressed() {
		comp = frame.CompressionNone
	}
	whole, err := s.responseBody(f, comp)
	if err != nil {
		return nil, false
	}
	body, _ = frame.ResponseMessage(whole, h)
	return body, true
}

// awaitAgreement holds the answer to a schema change from node, about to be
// written, until the cluster's nodes agree on the schema, or for
// schemaAgreementWait at most: the client's next statement may run on any
// node. What is already written is sent first; the client's other answers
// on this connection wait with it, as they would behind a slow answer.
func (s *session) awaitAgreement(node string) error {
	if err := s.toClient.Push(); err != nil {
		return fmt.Errorf("%w: %w", errClientGone, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), schemaAgreementWait)
	defer cancel()
	start := time.Now()
	if err := s.p.agreement.wait(ctx, node); err != nil {
		s.log.Warn().Err(err).Float64("waited_seconds", time.Since(start).Seconds()).Msg("the nodes do not agree on the schema; answering the schema change anyway")
	}
	return nil
}
