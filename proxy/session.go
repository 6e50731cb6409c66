package proxy

// A session: one client connection and its upstream connection, the two
// paths between them, and what they share.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/classify"
	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/transport"
)

// session is one client connection and its upstream connection.
type session struct {
	p      *Proxy
	log    zerolog.Logger
	client net.Conn
	// up is the connection to the upstream node the session began with:
	// the handshake, events and requests without a node of their own go
	// to it, and the session ends with it.
	up *upstream
	// legs are the session's connections to other nodes, opened as
	// requests are routed to them, each with a response path of its own
	// (serveLeg). Changed by the request path under mu.
	legs    []*upstream
	running sync.WaitGroup // the legs' response paths
	// login is the client's STARTUP and AUTH_RESPONSEs, as forwarded, that
	// the node accepted: a connection to another node logs in with them.
	// Request path only; zeroed when the session ends.
	login [][]byte
	// replicas is routing's scratch space, and askScratch what the
	// request path asks a node itself. Request path only.
	replicas   []string
	askScratch []byte
	// resends keep what the requests routed to other nodes need to be
	// sent again (reprepare.go).
	resends resends
	// written are the legs the request path queued requests on since it
	// last pushed (push), and unready the nodes it could reach but not
	// open a connection to (leave). Request path only.
	written []*upstream
	unready []unreadyNode
	// routing is set while the request path makes a connection ready for
	// a request it read (upstreamFor: dialling, logging in, asking), or
	// waits for its stream to be free on the connection it runs on
	// (hedge.go), until the request is in the stream table: a draining
	// session with nothing in flight meanwhile is not done (drained).
	routing atomic.Bool
	// readied is set once the request path waited for a node while making
	// a connection ready for the request it forwards (openLeg, ask), or
	// for its stream there to be free (hedge.go): the request's latency,
	// which routing and shedding learn the node's from, then counts from
	// when it is sent, not from when it was read. Request path only.
	readied bool
	// cancelOpen gives up on the connection openLeg is opening, if any.
	// Guarded by mu.
	cancelOpen context.CancelFunc
	// respMu is held by a response path while it handles a frame: the
	// response paths of a session's connections take turns, so that what
	// the response path owns (answering, respScratch, markLWT, the stages'
	// answered hooks) has one user at a time.
	respMu sync.Mutex
	// conns are up and the legs, for a response path to look over without
	// mu; handOffs counts the response paths in a row that left their
	// write to the client to another; handOffLooks the looks in a row
	// that found no other to leave it to, or, below zero, the looks still
	// to skip; kickClient is toClient.Kick (handoff.go); kickQueued is
	// the request path's (requests.go).
	conns        atomic.Pointer[[]*upstream]
	handOffs     atomic.Int32
	handOffLooks atomic.Int32
	kickClient   func()
	kickQueued   func()

	fromClient *frame.Reader
	// clientIn holds the client reader's buffer while bytes come.
	clientIn *transport.LazyReader
	toClient *transport.Writer

	// answered carries the upstream's verdict on a request the request
	// path waits on before it reads the next frame (see settled): a
	// STARTUP, an AUTH_RESPONSE or a USE, whose answer changes how what
	// follows is read, classified or charged, or one the proxy asks
	// another node (legs.go); it is closed once up's response path has
	// ended. awaiting is set while one is in flight, awaitingV5 while it
	// is a v5 STARTUP.
	answered   chan verdict
	awaiting   atomic.Bool
	awaitingV5 atomic.Bool
	// unanswered is set, under settling, as answered is closed: settle
	// sends nothing more.
	settling   sync.Mutex
	unanswered bool
	// What the request path has accepted of the handshake, request path
	// only: the compression it reads requests with, and whether the
	// driver's rate-limit opt-in and its login took effect. A STARTUP or
	// AUTH_RESPONSE is learned into pending, and takes effect only once the
	// upstream accepted it, once per connection; the response path reads
	// pending's compression as it takes the STARTUP's answer, while the
	// request path waits for it.
	reqCompression frame.Compression
	started        bool
	authenticated  bool
	pending        handshake

	mu       sync.Mutex // guards what both paths use
	streams  streams
	draining bool
	// room is signalled when a request is answered while the request path
	// waits for one (full), or when the session closes (halted).
	room           sync.Cond
	full, halted   bool
	compression    frame.Compression // negotiated in STARTUP, once the upstream accepted it
	rateLimitOptIn bool              // the driver asked for the rate-limit error; request path only
	// markLWT is set once the upstream accepted a STARTUP asking for the
	// LWT mark that the upstream does not set: the proxy marks the
	// conditional statements the driver prepares. Response path only.
	markLWT bool
	// keyspace is the connection's keyspace, set by the response path from
	// the upstream's answer to a USE and read by the request path.
	keyspace atomic.Pointer[[]byte]

	decomp frame.Decompressor // request path only
	// decompHeld is what a decompressed body over 64 KiB holds of
	// max_frame_bytes_total. Request path only.
	decompHeld int
	// heldLarge is set once the classifier or decomp may hold on to a
	// request larger than largeFrame, which they must let go of before the
	// connection idles. Request path only.
	heldLarge bool
	// classifier classifies each request against classifiedIn: the
	// prepared statements, the connection's keyspace and the bound on
	// partitions the request being handled was classified against, and
	// the schema while it is. Request path only.
	classifier   classify.Classifier
	classifiedIn classify.Env
	// call is the request the stages decide (pipeline.go), request path
	// only; answering the answer their answered hooks are handed,
	// response path only.
	call        call
	answering   answer
	reqScratch  []byte // answers written by the request path
	respScratch []byte // answers written by the response path
	rewritten   []byte // requests the request path rewrote
	guard       *stallGuard
	closing     sync.Once
	clientGone  atomic.Bool // the request path ended on the client's side
	// stopped is set when the session closes, for a request path waiting
	// on max_in_flight.
	stopped atomic.Bool

	// Each stage's own state of the connection (stage_*.go).
	classState
	shedState
	hotReadState
	limitState
	hedgeState

	// clientWaits counts the writes to the client that waited for room
	// (clientStall): those that began in its high 32 bits, those under
	// way in its low 32. While one is under way the connection leads and
	// joins no hot read, and an answer the response path read since one
	// began may have waited on the client in the upstream's socket, and is
	// not timed as the node's (see untimed), nor is an answer to a request
	// in flight while one began (clientHeld).
	clientWaits atomic.Uint64
	// queuedSince is when a request of the current read from the client
	// began to wait for max_in_flight, 0 if none did: the requests read
	// with it have waited inside the proxy since then at least.
	queuedSince int64
}

func newSession(p *Proxy, client net.Conn, u *upstream, log zerolog.Logger) *session {
	guard := &stallGuard{Conn: client, in: transport.NewSockReader(client), timeout: time.Duration(p.cfg.FrameTimeout)}
	clientIn := transport.NewLazyReader(guard, guard.in, &p.reads)
	u.from = frame.NewReader(u.in.Reader(), int(p.cfg.MaxFrameBytes))
	u.to = transport.NewWriter(u.conn, int(p.cfg.MaxBufferedBytes), p.buffered)
	if p.ring != nil {
		// What routing ranks replicas by; without it, nothing reads it.
		// By the node's address, as the ring names it and as the
		// session's other connections to it count: an upstream named
		// by a host name is the same node.
		u.load = p.loads.of(u.at)
		p.shards.learn(u.at, u.sharding, u.sharded)
	}
	s := &session{
		p:          p,
		log:        log,
		client:     client,
		up:         u,
		fromClient: frame.NewReader(clientIn.Reader(), int(p.cfg.MaxFrameBytes)),
		clientIn:   clientIn,
		toClient:   transport.NewWriter(client, int(p.cfg.MaxBufferedBytes), p.buffered),
		answered:   make(chan verdict, 1),
	}
	s.identity.addr = addrOf(client)
	s.toClient.SetStall(s.clientStall)
	s.kickClient = s.toClient.Kick
	s.kickQueued = s.kickWritten
	// Part way through a frame, the frames before it do not wait for
	// the rest of it.
	guard.in.SetBeforeWait(s.kickQueued)
	u.to.SetStall(s.upstreamStall)
	s.setConns()
	guard.frames = s.fromClient
	s.guard = guard
	s.fromClient.SetBudget(frameBudget{s, p.requestFrames, guard, nil})
	s.up.from.SetBudget(frameBudget{s, p.responseFrames, nil, u})
	s.room.L = &s.mu
	return s
}

// frameBudget is max_frame_bytes_total as one side of a session reads it.
type frameBudget struct {
	s     *session
	b     *transport.Bound
	guard *stallGuard // the client side's; nil for the upstream side
	up    *upstream   // the upstream side's; nil for the client side
}

// errSessionClosed is the error of a frame budget's Take given up because
// its session is closing.
var errSessionClosed = fmt.Errorf("waiting for max_frame_bytes_total: %w", net.ErrClosed)

// Take waits for room for a large frame. Its wait is the proxy's, not the
// peer's: the client's frame_timeout starts again once there is room, and
// the upstream is not taken for silent meanwhile (upstream_timeout).
func (b frameBudget) Take(n int) error {
	var before func()
	if b.up != nil {
		b.up.waitingForRoom.Store(true)
		defer b.up.waitingForRoom.Store(false)
		// What other response paths left this one to write waits neither
		// for room nor for a frame over 64 KiB to be read (handoff.go).
		before = b.s.kickClient
		b.s.writeLeft()
	} else {
		// Nor do the requests read before a large frame wait for
		// room for it.
		before = b.s.kickQueued
	}
	if !b.b.TakeOr(int64(n), &b.s.stopped, before) {
		return errSessionClosed
	}
	if b.guard != nil {
		b.guard.rearm()
	}
	return nil
}

func (b frameBudget) Give(n int) { b.b.Give(int64(n)) }

// stallGuard is a client connection as the request path reads it: once a
// frame has begun to arrive, the rest must come within timeout, else the
// read fails and the connection ends. Waiting for the next frame is not
// bounded: drivers keep idle connections open.
type stallGuard struct {
	net.Conn
	in      *transport.SockReader // reads Conn
	frames  *frame.Reader         // reads through the guard
	timeout time.Duration
	armed   bool // a read deadline is set
}

// rearm makes the next read of a started frame set a fresh deadline.
func (g *stallGuard) rearm() {
	if g.armed {
		g.Conn.SetReadDeadline(time.Time{})
		g.armed = false
	}
}

func (g *stallGuard) Read(b []byte) (int, error) {
	// The deadline is set when a frame starts, not pushed back on each
	// read: a client trickling a byte at a time gets no longer.
	switch started := g.frames.Started(); {
	case started && !g.armed:
		g.Conn.SetReadDeadline(time.Now().Add(g.timeout))
		g.armed = true
	case !started && g.armed:
		g.Conn.SetReadDeadline(time.Time{})
		g.armed = false
	}
	return g.in.Read(b)
}

// run serves the session until either side closes.
func (s *session) run() {
	defer s.giveBack()
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := s.serveResponses(s.up)
		if errors.Is(err, errClientGone) {
			// The client left while its answers were being written: it
			// may be noticed here before the request path sees it.
			s.clientGone.Store(true)
			s.logEnd("client", err)
		} else {
			s.logEnd("upstream", err)
		}
		if !s.clientGone.Load() {
			// The upstream failed, not the client: every request it took
			// and did not answer gets an error rather than silence, those
			// in flight on the session's other connections too, as the
			// session ends with it.
			s.failInFlight(err, s.up, nil)
		} else {
			s.abandonInFlight()
		}
		// Deliver the answers already queued before closing, but do not
		// wait long on a client that does not read.
		s.client.SetWriteDeadline(time.Now().Add(flushTimeout))
		s.toClient.Close()
		s.close()
	}()
	err := s.serveRequests()
	s.logEnd("client", err)
	if errors.Is(err, errForward) {
		// The upstream failed under the request path: the response path
		// answers what is in flight, then closes both sides.
		s.up.conn.Close()
		<-done
		s.up.to.Close()
		s.running.Wait()
		return
	}
	s.clientGone.Store(true)
	// An answer to the last frame (a version the proxy does not speak) must
	// reach the client before the connection closes.
	s.client.SetWriteDeadline(time.Now().Add(flushTimeout))
	s.toClient.Flush()
	s.close()
	s.up.to.Close()
	<-done
	s.running.Wait()
}

// giveBack returns to max_in_flight the slots of requests still in flight
// when the session ends: requests of a client that left, or that began
// after failInFlight or abandonInFlight (the request path reads on from
// what it has read already once the response path has ended); of these it
// ends, as abandonInFlight does, those that lead a flight or may have
// written. Both paths have stopped (run's last step).
func (s *session) giveBack() {
	s.leaveClass()
	s.mu.Lock()
	n := s.streams.inflight
	ended, priced := s.takeUnanswered()
	s.streams.inflight = 0
	s.uncount(s.up) // the legs did as they ended
	s.mu.Unlock()
	s.endUnanswered(ended, priced)
	s.p.inflight.Give(int64(n))
	s.forgetLogin()
	s.fromClient.Release()
	s.up.from.Release()
	s.giveDecompressed()
}

// tick is called by the watchdog on each tick. An idle session gives back
// a stream table that a burst grew. With watch set, it appends to stalled
// the session's connections whose node has sent nothing, while requests
// waited on it, for ticks ticks in a row.
func (s *session) tick(watch bool, ticks int, stalled []stalledUpstream) []stalledUpstream {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streams.shrinkIdle()
	s.resends.shrinkIdle()
	if !watch {
		return stalled
	}
	// A response path waiting on the client (its writer holds bytes) is
	// not waiting on the node.
	clientHolds := s.toClient.Held() > 0
	if s.up.quiet(clientHolds) >= ticks {
		stalled = append(stalled, stalledUpstream{s, s.up})
	}
	for _, u := range s.legs {
		if u.quiet(clientHolds) >= ticks {
			stalled = append(stalled, stalledUpstream{s, u})
		}
	}
	return stalled
}

// stalledUpstream is a session's connection the watchdog found silent.
type stalledUpstream struct {
	s *session
	u *upstream
}

// quiet returns for how many watchdog ticks in a row the node has sent
// nothing while requests waited on it. A response path waiting on the
// client (clientHolds) or on max_frame_bytes_total is not waiting on the
// node. The session's mu is held.
func (u *upstream) quiet(clientHolds bool) int {
	if u.inflight.Load() == 0 || u.activity != u.lastActivity || clientHolds || u.waitingForRoom.Load() {
		u.lastActivity, u.quietTicks = u.activity, 0
		return 0
	}
	u.quietTicks++
	return u.quietTicks
}

// upstreamStalled closes the connection u of a session whose node has sent
// nothing for timeout with requests waiting: its response path then ends,
// and failInFlight answers each request.
func (s *session) upstreamStalled(u *upstream, timeout time.Duration) {
	if u.stalled.Swap(true) {
		return
	}
	s.log.Warn().Str("node", u.addr).Float64("upstream_timeout_seconds", timeout.Seconds()).Msg("upstream sent nothing for upstream_timeout with requests waiting; closing the connection to it")
	u.conn.Close()
}

// largeFrame is the size past which a request is not kept alive by an
// idle connection (see session.idle), as frame.Reader does not keep the
// buffers of frames past 64 KiB, nor classify.Classifier.Release its
// scratch space.
const largeFrame = 64 << 10

// negotiating reports whether a frame's version byte is one a driver asks
// for while negotiating: a CQL version (1 to 6 are known, up to 15
// allowed for) or one of DataStax Enterprise's (65, 66).
func negotiating(v uint8) bool {
	return v >= 1 && v <= 15 || v == 65 || v == 66
}

// errVersionRefused ends a connection whose client asked for a protocol
// version the proxy does not speak, once it has been told so.
var errVersionRefused = errors.New("protocol version refused")

// errClientGone wraps the response path's failures to write to the
// client: the client left, which is no fault of the upstream's.
var errClientGone = errors.New("client connection")

// errForward wraps the request path's errors that come from the upstream
// side, after which the client is still there to be answered.
var errForward = errors.New("forwarding")

// flushTimeout bounds writing what is queued for a closing connection.
const flushTimeout = 5 * time.Second

// logEnd logs how one side of the session ended: at debug an end that is
// nobody's fault, at info an error.
func (s *session) logEnd(side string, err error) {
	if cleanEnd(side, err) {
		s.log.Debug().Str("side", side).Msg("connection closed")
		return
	}
	s.log.Info().Str("side", side).Err(err).Msg("connection ended")
}

// cleanEnd reports whether err, which ended one side of a session, is
// nobody's fault: the proxy closed the connection, or the peer closed it
// between frames, or, the client's side, reset it between frames.
func cleanEnd(side string, err error) bool {
	var cut *frame.TruncatedError
	switch {
	case err == nil || errors.Is(err, net.ErrClosed) || errors.Is(err, transport.ErrWriterClosed) || errors.Is(err, errVersionRefused):
		return true
	case errors.As(err, &cut):
		return false
	case side == "client":
		return clientLeft(err)
	}
	return errors.Is(err, io.EOF)
}

// clientLeft reports whether err, reading or writing a client's connection,
// is the client closing or resetting it.
func clientLeft(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// close closes both sockets, ending both loops.
func (s *session) close() {
	s.closing.Do(func() {
		s.mu.Lock()
		s.halted = true
		s.room.Broadcast()
		s.stopHedging()
		s.mu.Unlock()
		s.stopped.Store(true)
		s.p.inflight.Wake()
		s.p.requestFrames.Wake()
		s.p.responseFrames.Wake()
		s.client.Close()
		s.up.conn.Close()
		s.mu.Lock()
		for _, u := range s.legs {
			u.conn.Close()
		}
		if s.cancelOpen != nil {
			s.cancelOpen()
		}
		s.mu.Unlock()
	})
}

// failInFlight answers with a server error naming err the requests still
// in flight on the connection u, after it ended, or with all set every
// request in flight: the requests may or may not have been applied, which
// a driver's retry policy must know. It is called once u's response path
// has stopped.
func (s *session) failInFlight(err error, u *upstream, only *upstream) {
	type stream struct {
		id      int16
		version uint8
	}
	var lost []stream
	var ended, priced []request
	// The response paths take turns with this one: it writes to the
	// client with their scratch space.
	s.respMu.Lock()
	defer s.respMu.Unlock()
	s.mu.Lock()
	if only != nil {
		// A hedged read lost on one connection is answered from the
		// other, if it still can be.
		s.streams.update(func(r *request) {
			switch {
			case r.hedge == only:
				r.hedge = nil
			case r.up == only && r.hedge != nil && !r.hedge.dead.Load():
				r.up, r.hedge, r.start = r.hedge, nil, r.hedgeStart
				if r.resend != nil {
					r.resend.state = resendDone
				}
			}
			if r.hedgeTo == only {
				r.hedgeTo = nil
			}
		})
	}
	asked, askedOn := false, int16(0)
	s.streams.each(func(id int16, r request) {
		switch {
		case only != nil && r.up != only:
		case r.reply == replyAsked:
			asked, askedOn = true, id
		default:
			lost = append(lost, stream{id, r.version})
		}
	})
	if asked {
		// The proxy's own request (legs.go), one at most, is not the
		// client's to be answered: the request path waiting on it is
		// told it failed.
		s.endStream(askedOn)
		s.p.inflight.Give(1)
		if only != nil {
			s.settle(notAccepted) // else up's response path has ended every wait
		}
	}
	for _, l := range lost {
		r, _ := s.endStream(l.id)
		if r.wrote.kind != wroteNone || r.flight != nil || r.joined != nil {
			ended = append(ended, r)
		}
		if chargedUnanswered(&r) {
			priced = append(priced, r)
		}
	}
	s.wakeRequests()
	s.mu.Unlock()
	for _, r := range ended {
		s.ended(r)
	}
	s.chargeUnanswered(priced, s.now())
	s.p.inflight.Give(int64(len(lost)))
	if len(lost) == 0 {
		return
	}
	reason := "upstream_lost"
	msg := "cqlguard: the connection to the upstream node was lost before it answered; the request may or may not have been applied"
	if u.stalled.Load() {
		reason = "upstream_stalled"
		msg = fmt.Sprintf("cqlguard: the upstream node sent nothing for %s (upstream_timeout) while requests waited; the request may or may not have been applied",
			time.Duration(s.p.cfg.UpstreamTimeout))
	}
	s.p.metrics.protocolErrors.WithLabelValues(reason).Add(float64(len(lost)))
	s.log.Warn().Str("node", u.addr).Int("requests", len(lost)).Str("reason", reason).Err(err).Msg("upstream connection ended with requests in flight; answering them with a server error")
	for _, l := range lost {
		s.writeError(&s.respScratch, l.version, l.id, frame.ErrCodeServer, msg)
	}
}

// abandonInFlight counts the requests in flight when the client left:
// nobody is left to answer, and the upstream is not at fault. It is called
// once the response path has stopped; giveBack returns their slots.
func (s *session) abandonInFlight() {
	s.mu.Lock()
	n := s.streams.inflight
	ended, priced := s.takeUnanswered()
	s.mu.Unlock()
	s.endUnanswered(ended, priced)
	if n > 0 {
		s.p.metrics.abandoned.Add(float64(n))
		s.log.Debug().Int("requests", n).Msg("client left with requests in flight")
	}
}

// takeUnanswered takes from the stream table what its requests, which
// will get no answer, still need done: those that lead a flight or may
// have written, to be ended, and those with a price, to be charged. What
// it takes it clears, so that nothing is ended or charged twice (the
// request path may begin more after abandonInFlight looked; giveBack
// looks again). s.mu is held.
func (s *session) takeUnanswered() (ended, priced []request) {
	s.streams.update(func(r *request) {
		if r.wrote.kind != wroteNone || r.flight != nil {
			ended = append(ended, *r)
			r.flight, r.wrote = nil, wrote{}
		}
		if chargedUnanswered(r) {
			priced = append(priced, *r)
			r.client, r.nCharges = nil, 0
		}
	})
	return ended, priced
}

// endUnanswered does for requests that will get no answer what
// takeUnanswered took them for: they were forwarded, so charged, answered
// or not; writes may have been applied; and reads that joined a flight
// they lead must not wait for answers that will not be read.
func (s *session) endUnanswered(ended, priced []request) {
	s.chargeUnanswered(priced, s.now())
	for _, r := range ended {
		r.joined = nil
		s.ended(r)
	}
}

// endStream ends the request on stream id, and its connection's count
// of requests in flight. s.mu is held.
func (s *session) endStream(id int16) (request, bool) {
	r, ok := s.streams.end(id)
	if r.resend != nil {
		s.resends.give(r.resend)
		r.resend = nil
	}
	if u := r.up; ok && u != nil {
		s.endOn(u)
	}
	if ok && r.hedge != nil {
		// The other copy of a hedged read is still awaited there.
		s.addLeftover(r.hedge, id, &r, r.hedgeStart)
	}
	return r, ok
}

// endOn ends one of the requests in flight on u in its count, and in its
// node's load. s.mu is held.
func (s *session) endOn(u *upstream) {
	if u.counted > u.inflight.Add(-1) {
		u.counted--
		u.load.inflight.Add(-1)
	}
}

// uncount takes the requests in flight on u out of its node's load, which
// other sessions rank replicas by: the session ends, or its client is not
// reading, and their answers, whenever the node sends them, may wait in
// the socket. s.mu is held.
func (s *session) uncount(u *upstream) {
	if u.counted > 0 {
		u.load.inflight.Add(-int64(u.counted))
		u.counted = 0
	}
}

// sentOn records that the request r is sent on u. s.mu is held.
func (s *session) sentOn(r *request, u *upstream) {
	r.up = u
	r.waits = s.clientWaits.Load()
	s.countOn(u)
}

// clientHeld reports whether a request sent with the session's
// clientWaits at sent and answered with them at now may have been held up
// by its client: a write to the client waited between the two, or was
// under way. Its answer may have waited in the node's socket, and so may
// the requests the node read after it, behind answers the node could not
// send: however soon the response path next finds the socket empty, their
// time is not the node's latency.
func clientHeld(sent, now uint64) bool { return sent != now || uint32(now) != 0 }

// countOn counts one more request in flight on u, and in its node's load.
// s.mu is held.
func (s *session) countOn(u *upstream) {
	if u.inflight.Add(1) == 1 {
		u.activity++ // the node's silence counts from now
	}
	if u.load == nil {
		return
	}
	u.load.sent.Add(1)
	if !s.clientWaiting() {
		u.load.inflight.Add(1)
		u.counted++
	}
}

// wakeRequests lets the request path read again if it stopped at
// max_in_flight_per_connection. s.mu is held.
func (s *session) wakeRequests() {
	if s.full {
		s.full = false
		s.room.Signal()
	}
}

// drain closes the session as soon as no request is in flight.
func (s *session) drain() {
	s.mu.Lock()
	s.draining = true
	idle := s.drained()
	s.mu.Unlock()
	if idle {
		s.close()
	}
}

// drained reports whether the session, draining, has no request left: none
// in flight, and none being routed. s.mu is held.
func (s *session) drained() bool {
	return s.draining && s.streams.inflight == 0 && !s.routing.Load()
}

// writeError sends the client an ERROR on stream, in place of a response
// from the upstream. buf is the calling path's scratch buffer.
func (s *session) writeError(buf *[]byte, v uint8, stream int16, code int32, msg string) {
	if v < 3 || v > 5 {
		v = 4
	}
	*buf = frame.AppendError((*buf)[:0], v, stream, code, msg)
	s.writeAnswer(*buf)
}

// writeAnswer writes an answer the proxy made itself to the client, counted in
// cqlguard_frames_total like the answers it forwards.
func (s *session) writeAnswer(f []byte) {
	s.p.metrics.frame(dirResponse, frame.Opcode(f[4]), len(f))
	if err := s.toClient.Write(f); err != nil {
		s.log.Debug().Err(err).Msg("cannot answer client")
	}
}

// refuseVersion answers a frame of a protocol version cqlguard does not
// speak the way Cassandra does, so that the driver retries with a lower one.
func (s *session) refuseVersion(e *frame.UnsupportedVersionError) {
	b := frame.AppendVersionError(nil, e)
	s.p.metrics.frame(dirResponse, frame.OpError, len(b))
	s.toClient.Write(b)
}

func (s *session) now() int64 { return s.p.elapsed() }
