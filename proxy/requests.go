package proxy

// The request path: what the proxy does with each frame a client sends.

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/cqlguard/cqlguard/classify"
	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/hotread"
)

// serveRequests is the request path: it reads each frame from the client,
// has handle say what to do with it, and forwards it upstream or answers
// it. What is here is the transport's: buffers, budgets, the stream table,
// back-pressure and the v5 switch.
func (s *session) serveRequests() error {
	for {
		// Read a frame. Frames the proxy cannot take are answered, not
		// dropped, so the driver's request never waits for nothing. With
		// nothing buffered, wait for the client without a read buffer.
		s.giveDecompressed()
		if s.fromClient.Buffered() == 0 {
			if err := s.idle(); err != nil {
				return err
			}
			s.clientIn.Park()
			s.clientIn.Wait()
		}
		f, h, err := s.fromClient.Next()
		if err != nil {
			if err = s.readFailed(h, err); err != nil {
				return err
			}
			continue
		}
		// The next frame gets a frame_timeout of its own, not what is left
		// of this one's, however long the request path waits meanwhile.
		s.guard.rearm()
		s.p.metrics.frame(dirRequest, h.Opcode, len(f))
		s.heldLarge = s.heldLarge || len(f) > largeFrame
		now := s.now()
		act := s.handle(f, h, now)
		if act.answer != nil {
			s.writeAnswer(act.answer)
			continue
		}
		if act.joined {
			continue
		}
		if err := s.forward(act.forward, h, act.req, act.route, now); err != nil {
			return err
		}
	}
}

// idle lets go of what the last frames held, before the request path waits
// for the client with nothing buffered, and writes what they queued.
func (s *session) idle() error {
	if s.heldLarge {
		s.classifier.Release()
		s.decomp.Release()
		if cap(s.rewritten) > largeFrame {
			s.rewritten = nil
		}
		s.heldLarge = false
	}
	// What the next read brings has not waited behind anything.
	s.queuedSince = 0
	// The last frame is done with: an idle connection holds
	// nothing of max_frame_bytes_total.
	s.fromClient.Release()
	s.fromClient.Shrink()
	// Everything this read gave is handled: one write each way
	// for all of it.
	return s.push()
}

// readFailed answers, counts and logs what the client's reader could not
// read, h the header it read if any. It returns nil when the connection
// goes on (a frame too large, answered on its stream), and otherwise the
// error that ends it.
func (s *session) readFailed(h frame.Header, err error) error {
	m := s.p.metrics
	var tooLarge *frame.TooLargeError
	var version *frame.UnsupportedVersionError
	switch {
	case errors.As(err, &tooLarge):
		m.protocolErrors.WithLabelValues("frame_too_large").Inc()
		s.log.Warn().Int("bytes", h.Length).Str("opcode", h.Opcode.String()).Msg("request frame too large")
		s.writeError(&s.reqScratch, h.Version, h.Stream, frame.ErrCodeProtocol, err.Error())
		return nil
	case errors.As(err, &version):
		// Drivers ask for the highest version they know and step
		// down when refused (the Python driver starts at DSE's 65
		// and 66): that is negotiation, not an error. Any other
		// first byte is a client that does not speak CQL.
		if negotiating(version.Version) {
			m.versionRefusals.Inc()
			s.log.Debug().Uint8("version", version.Version).Msg("protocol version not spoken; the driver may ask for a lower one")
		} else {
			m.protocolErrors.WithLabelValues("unsupported_version").Inc()
			s.log.Info().Uint8("version", version.Version).Msg("unsupported protocol version")
		}
		s.refuseVersion(version)
		return errVersionRefused
	}
	if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		// Half a frame and then nothing: there is no stream to
		// answer on, so the connection ends.
		m.protocolErrors.WithLabelValues("client_stalled").Inc()
		return fmt.Errorf("client sent part of a frame and nothing more for %s (frame_timeout): %w",
			time.Duration(s.p.cfg.FrameTimeout), err)
	}
	var cut *frame.TruncatedError
	switch {
	case errors.Is(err, net.ErrClosed):
		// The session closed the connection, as its upstream was
		// lost or a write to the client failed first: the client
		// sent nothing wrong, whatever it was sending.
	case errors.As(err, &cut):
		// A client that leaves part way through a frame loses the
		// request it had begun: not malformed, but not a clean end.
		m.protocolErrors.WithLabelValues("truncated_frame").Inc()
		return fmt.Errorf("client left part way through a frame: %w", err)
	case clientLeft(err):
		// Closed or reset between frames: the client has left.
	default:
		m.protocolErrors.WithLabelValues("bad_request_frame").Inc()
	}
	return err
}

// takeSlot takes a slot of max_in_flight for req, read at now: at that
// bound nothing more is read from this client until some request is
// answered. A request behind another that waited for one, in the same read
// from the client, has waited inside the proxy since then too: queuedSince
// is when. The request's upstream latency counts from when it has its
// slot, so that the node is not blamed for the proxy's own queue. It
// returns when the request began to wait, 0 if it did not.
func (s *session) takeSlot(req *request, now int64) (waitedFrom int64, err error) {
	waitedFrom = s.queuedSince
	if !s.p.inflight.TakeNowFair(1) {
		if waitedFrom == 0 {
			waitedFrom = now
			s.queuedSince = now
		}
		if !s.p.inflight.TakeOr(1, &s.stopped, s.pushQuietly) {
			// Never begun, so no one else ends the flight it leads.
			if req.flight != nil {
				s.p.hotReads.orphan(req.flight)
			}
			return 0, net.ErrClosed
		}
	}
	if waitedFrom != 0 {
		req.start = s.now()
	}
	return waitedFrom, nil
}

// waitForRoom writes what the request path queued and waits until the
// connection has fewer than max requests in flight, or the session ends.
func (s *session) waitForRoom(max int) error {
	s.p.metrics.inFlightWaits.Inc()
	if err := s.push(); err != nil {
		return err
	}
	s.mu.Lock()
	for s.streams.inflight >= max && !s.halted {
		s.full = true
		s.room.Wait()
	}
	s.mu.Unlock()
	return nil
}

// forward forwards the frame f of the request req, whose header is h, read
// at now: it takes a slot of max_in_flight, records the stream, writes the
// frame upstream, and holds the request path back while the connection has
// as many requests in flight as allowed, or while req's answer decides how
// what follows is read.
func (s *session) forward(f []byte, h frame.Header, req request, r route, now int64) error {
	u := s.up
	var rs *resend
	var hedgeTo *upstream
	if r.ok {
		s.routing.Store(true)
		u = s.upstreamFor(r, h, &req)
		if r.read && s.p.cfg.Routing.HedgeAfter > 0 {
			hedgeTo = s.hedgeTarget(u, h, &req)
		}
		if u != s.up || hedgeTo != nil {
			rs = s.keepForResend(f, h, &req, r.batch, hedgeTo != nil)
		}
	}
	waitedFrom, err := s.takeSlot(&req, now)
	if err != nil {
		s.routing.Store(false)
		if rs != nil {
			s.resends.give(rs)
		}
		return err
	}
	var login []byte
	if s.p.ring != nil && (req.reply == replyStartup || req.reply == replyAuth) {
		// Kept, if the node accepts it, for the session's connections
		// to other nodes; f is the reader's.
		login = slices.Clone(f)
	}
	// The stream is recorded before forwarding so that a fast response
	// finds it.
	max := s.p.cfg.MaxInFlightPerConnection
	s.mu.Lock()
	for {
		if u.dead.Load() {
			// The connection chosen was lost since (while the request
			// waited for its slot, say), and what was in flight on it
			// answered: the request goes where the driver sent it.
			u = s.up
		}
		// Only up may still hold the stream (routing avoided the others
		// that do), and rarely: it is free once the node answers.
		if !u.awaitsLeftover(h.Stream) || s.halted || u.dead.Load() {
			break
		}
		// Read, so in flight to the client: a session draining meanwhile
		// is not done (drained) until it is answered.
		s.routing.Store(true)
		s.leftoverWait = true
		s.readied = true
		// The requests read before this one do not wait with it. Kick
		// takes only each writer's lock, which no writer holds while it
		// takes s.mu.
		s.kickWritten()
		s.room.Wait()
	}
	if s.readied {
		// What the request waited for since it was read (a connection
		// opened, a statement prepared, a stream freed) is not the
		// node's slowness in answering it.
		s.readied = false
		req.start = s.now()
	}
	if hedgeTo == u || hedgeTo != nil && hedgeTo.dead.Load() {
		hedgeTo = nil
	}
	if u == s.up && rs != nil && hedgeTo == nil {
		s.resends.give(rs)
		rs = nil
	}
	req.resend, req.hedgeTo = rs, hedgeTo
	if hedgeTo != nil {
		req.hedgeStart = s.now()
	}
	s.sentOn(&req, u)
	// A hot read led while the client's writer waits for room would be
	// answered to nobody until it has room (clientStall).
	var orphaned *hotread.Flight[waiter]
	if req.flight != nil && s.clientWaiting() {
		orphaned, req.flight = req.flight, nil
	}
	// badStream saw the id free, and only this path begins streams.
	s.streams.begin(h.Stream, req)
	if hedgeTo != nil {
		s.queueHedge(req.hedgeStart)
	}
	s.routing.Store(false)
	if awaited(&req) {
		s.awaiting.Store(true)
	}
	full := max > 0 && s.streams.inflight >= max
	s.mu.Unlock()
	if orphaned != nil {
		s.p.hotReads.orphan(orphaned)
	}
	if req.use && s.joined.Load() > 0 {
		// The reads of this client waiting on others' are forwarded
		// now, ahead of the USE, if at all: handed on after it, they
		// would run in the keyspace it sets.
		s.expireWaits(-1)
	}
	s.wrote(u)
	if err := u.to.Write(f); err != nil {
		if u != s.up {
			// Its response path answers what is in flight on it, this
			// request too; the session goes on.
			u.conn.Close()
			return nil
		}
		return fmt.Errorf("%w %s: %w", errForward, h.Opcode, err)
	}
	// How long the request waited inside the proxy, for its slot and
	// for room in the upstream's writer, is the shedding queue's
	// signal; the clock is read only when it waited.
	if sh := s.p.shedding; sh != nil {
		switch w := u.to.Waited(); {
		case waitedFrom != 0:
			sh.queue.Observe(waitedFrom, s.now()-waitedFrom)
		case w:
			sh.queue.Observe(now, s.now()-now)
		default:
			sh.queue.Observe(now, 0)
		}
	}
	// Write copied the frame: give its share of max_frame_bytes_total
	// back before waiting on anything.
	s.fromClient.Release()
	s.giveDecompressed()
	// Back-pressure: with as many requests in flight as allowed, read
	// nothing more from this client until one is answered.
	if full {
		if err := s.waitForRoom(max); err != nil {
			return err
		}
	}
	if awaited(&req) {
		// What follows is read (v5 segments, compression), classified
		// (the keyspace) or charged (the class) as this request's
		// answer says: wait for it.
		if err := s.push(); err != nil {
			return err
		}
		v := <-s.answered
		s.settled(h, &req, v)
		s.keepLogin(login, req.reply, v)
	}
	return nil
}

// keepLogin keeps the STARTUP or AUTH_RESPONSE f, a copy, answered with
// v, for the session's connections to other nodes to log in with
// (legs.go).
func (s *session) keepLogin(f []byte, reply reply, v verdict) {
	switch {
	case f == nil:
	case reply == replyStartup && v == accepted:
		s.login = append(s.login[:0], f)
	case reply == replyAuth && v != notAccepted && len(s.login) > 0:
		s.login = append(s.login, f)
	default:
		// A refused login: what was kept of it is forgotten.
		clear(f)
		if reply == replyAuth {
			s.forgetLogin()
			s.login = s.login[:min(1, len(s.login))]
		}
	}
}

// forgetLogin zeroes what the session kept of its client's credentials.
func (s *session) forgetLogin() {
	for _, f := range s.login[min(1, len(s.login)):] {
		clear(f)
	}
}

// push writes what the request path queued both ways: the requests it
// forwards and the answers it made itself. It is called before the path
// waits for anything, so that nothing it queued waits with it.
func (s *session) push() error {
	// The client's answers first: a failure to write them is the
	// client's, which its next read reports.
	s.toClient.Push()
	for _, u := range s.written {
		// A failed write stops the writer; its response path answers
		// what is in flight on it.
		if u.to.Push() != nil {
			u.conn.Close()
		}
	}
	clear(s.written)
	s.written = s.written[:0]
	if err := s.up.to.Push(); err != nil {
		return fmt.Errorf("%w: %w", errForward, err)
	}
	return nil
}

// kickWritten starts the flush loops of the writers the request path has
// queued to since it last pushed, and returns at once: for the request
// path about to wait part way through a frame (from inside the client's
// read, where it must not block), for room in max_frame_bytes_total, for
// a node to be dialled, or for a hedged read's copy to free its stream. The requests and answers of the frames before
// go meanwhile; push, once the path goes on, finds them written or being
// written.
func (s *session) kickWritten() {
	s.toClient.Kick()
	s.up.to.Kick()
	for _, u := range s.written {
		u.to.Kick()
	}
}

// upstreamStall is the stall hook of the writers to the session's nodes:
// a write that waits for one node to read, whichever goroutine makes it
// (the request path's Write or push, a flush loop), starts the flush
// loops of the client's writer and of the other nodes', so that what was
// queued for them does not wait with it.
func (s *session) upstreamStall(waiting bool) {
	if !waiting {
		return
	}
	s.toClient.Kick()
	for _, u := range *s.conns.Load() {
		u.to.Kick()
	}
}

// wrote notes that the request path queued a request on u, which push
// writes.
func (s *session) wrote(u *upstream) {
	if u != s.up && !slices.Contains(s.written, u) {
		s.written = append(s.written, u)
	}
}

// pushQuietly is push for a wait that reports no error: a failed write
// stops its writer, and the next Write says so.
func (s *session) pushQuietly() { s.push() }

// badStream returns the reason and message to refuse a request on stream
// id with, or "" for an id that may carry a new request: not negative and
// not in flight.
func (s *session) badStream(id int16) (reason, msg string) {
	if id < 0 {
		return "negative_stream", fmt.Sprintf("request on stream %d: negative stream ids are the server's", id)
	}
	if !s.streams.any.Load() {
		// Nothing in flight: no lock to take, as for a client whose
		// requests are all refused.
		return "", ""
	}
	s.mu.Lock()
	busy := s.streams.busy(id)
	s.mu.Unlock()
	if busy {
		return "stream_in_use", fmt.Sprintf("request on stream %d, which has a request in flight", id)
	}
	return "", ""
}

// startup notes the driver's compression, rate-limit and LWT mark opt-ins
// and the options classes match on, which take effect once the upstream
// accepts the STARTUP, and keeps each opt-in from an upstream that did not
// advertise it.
func (s *session) startup(f []byte, h frame.Header) ([]byte, error) {
	if len(f) < frame.HeaderSize {
		return nil, fmt.Errorf("reading STARTUP options: %w", frame.ErrShortBody)
	}
	c, ok, err := frame.StartupOption(f[frame.HeaderSize:], "COMPRESSION")
	if err != nil {
		return nil, fmt.Errorf("reading STARTUP options: %w", err)
	}
	comp := frame.CompressionNone
	if ok {
		if comp, err = frame.ParseCompression(string(c)); err != nil {
			// Unknown compression: let the upstream refuse it in its words.
			comp = frame.CompressionNone
		}
	}
	_, optIn, _ := frame.StartupOption(f[frame.HeaderSize:], rateLimitKey)
	_, lwtMark, _ := frame.StartupOption(f[frame.HeaderSize:], lwtMarkKey)
	s.pending.comp, s.pending.optIn, s.pending.lwtMark = comp, optIn, lwtMark
	s.pending.options = s.p.optionsDigest(f[frame.HeaderSize:])
	s.learnStartup(f[frame.HeaderSize:])
	if optIn && !s.up.rateLimitError {
		if f, err = frame.AppendStartupWithout(nil, f, rateLimitKey); err != nil {
			return nil, err
		}
	}
	if lwtMark && !s.up.lwtMark {
		return frame.AppendStartupWithout(nil, f, lwtMarkKey)
	}
	return f, nil
}

// classify classifies the QUERY, PREPARE, EXECUTE or BATCH f (h) (package
// classify), and notes in req what its answer needs: topology rows
// rewritten, a prepared statement learned, the keyspace a USE sets. It
// returns nil for a request whose body does not decode, which is forwarded
// unclassified and never limited.
func (s *session) classify(f []byte, h frame.Header, req *request) *classify.Classification {
	body := f[frame.HeaderSize:]
	if h.Compressed() {
		var err error
		if body, err = s.decompress(body, len(f)); err != nil {
			if !errors.Is(err, errSessionClosed) {
				s.unclassified(h, err)
			}
			return nil
		}
	}
	env := &s.classifiedIn
	env.Schema, env.Prepared = s.p.schema.Current(), s.p.prepared
	if ks := s.keyspace.Load(); ks != nil {
		env.Keyspace = *ks
	}
	env.MaxPartitions = req.set.limits.maxPartitions
	cl, err := s.classifier.Classify(h, body, env)
	// An idle connection does not keep a schema the proxy has replaced.
	env.Schema = nil
	if err != nil {
		s.unclassified(h, err)
		return nil
	}
	req.reply, req.use, req.prepared = replyOf(cl.Topology), cl.Use, cl.Prepared
	if h.Opcode == frame.OpPrepare {
		req.reply = replyPrepared
	}
	return cl
}

// decompress returns the decompressed body of a request frame of n bytes.
// A body over 64 KiB takes its size from max_frame_bytes_total in place of
// its frame's share, which it gives back (the frame's bytes are held no
// longer than its body's), and holds it until giveDecompressed: after the
// request is forwarded or answered. So the request path never waits for
// room while it holds any, and a compressed body, small on the wire, is
// counted at the size it takes in memory.
func (s *session) decompress(body []byte, n int) ([]byte, error) {
	size, err := frame.DecodedLen(s.reqCompression, body, int(s.p.cfg.MaxFrameBytes))
	if err != nil {
		return nil, err
	}
	if size > largeFrame && size > s.decompHeld {
		if s.fromClient != nil { // nil where a test calls the handler alone
			s.fromClient.Release()
		}
		s.giveDecompressed()
		share := max(size, n)
		// The requests read before this one do not wait for room for it
		// (kickWritten).
		if !s.p.requestFrames.TakeOr(int64(share), &s.stopped, s.kickQueued) {
			return nil, errSessionClosed
		}
		s.decompHeld = share
		s.heldLarge = true
	}
	return s.decomp.Body(s.reqCompression, body, int(s.p.cfg.MaxFrameBytes))
}

// giveDecompressed lets go of a decompressed body over 64 KiB and gives
// its share of max_frame_bytes_total back.
func (s *session) giveDecompressed() {
	if s.decompHeld > 0 {
		s.decomp.Release()
		s.p.requestFrames.Give(int64(s.decompHeld))
		s.decompHeld = 0
	}
}

// unclassified notes a request whose body the proxy cannot decode. It is
// forwarded as it is and never limited: the upstream says what is wrong.
func (s *session) unclassified(h frame.Header, err error) {
	s.p.metrics.protocolErrors.WithLabelValues("bad_request_body").Inc()
	s.log.Info().Err(err).Int16("stream", h.Stream).Str("opcode", h.Opcode.String()).Msg("request body not understood; forwarded unclassified")
}

// dropUsingTimeout returns the QUERY or PREPARE f without the trailing
// USING TIMEOUT clause its classification c found, or f itself if it has
// none. The frame it returns is uncompressed, which a v4 frame may be
// whatever the connection negotiated.
func (s *session) dropUsingTimeout(f []byte, h frame.Header, c *classify.Classification) []byte {
	n := c.WithoutTimeout
	if n == 0 || (h.Opcode != frame.OpQuery && h.Opcode != frame.OpPrepare) || h.Flags&frame.FlagCustomPayload != 0 {
		return f
	}
	// QUERY and PREPARE bodies both start with the statement, a [long
	// string]; the classification kept the body, decompressed.
	body := c.Body
	q, err := frame.QueryString(body)
	if err != nil || n > len(q) {
		return f
	}
	out, err := frame.AppendStatement(s.rewritten[:0], h, body, q[:n])
	if err != nil {
		return f
	}
	s.rewritten = out
	s.log.Debug().Int16("stream", h.Stream).Msg("dropped USING TIMEOUT, which the upstream does not take")
	return out
}
