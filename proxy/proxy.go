// Package proxy accepts CQL connections from drivers and forwards each to
// an upstream Cassandra or ScyllaDB node, keeping drivers on the proxy by
// rewriting what they learn of the cluster.
//
// The request path is session.serveRequests: read frame → classify →
// decide → forward (or answer). The response path is session.serveResponses.
package proxy

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/ratelimit"
)

// Proxy accepts client connections and pairs each with one connection to an
// upstream node.
type Proxy struct {
	cfg      Config
	log      zerolog.Logger
	metrics  *Metrics
	topo     *topology
	prepared *preparedRegistry
	schema   SchemaSource
	observe  func(*Classification)
	stopBg   func()    // stops background work (schema loading)
	epoch    time.Time // origin of the monotonic request timestamps
	// epochUnix is epoch in Unix nanoseconds: the limiter's clock reads
	// epochUnix plus a request timestamp, so that the request path reads
	// the time once (see clock).
	epochUnix int64
	// elapsed returns nanoseconds since epoch: the request timestamps.
	// Tests stop it to make the limiter's decisions deterministic.
	elapsed func() int64
	next    atomic.Uint32
	conns   atomic.Int64 // client connections being served
	// inflight is max_in_flight, and counts requests in flight when that
	// is 0; buffered is max_buffered_bytes_total, nil when that is 0.
	inflight *bound
	buffered *bound
	// requestFrames and responseFrames are max_frame_bytes_total, one bound
	// per direction, and count when that is 0. Two bounds, not one: a
	// request path holds its frame while it waits for room to forward it,
	// and the answers that make room must never wait behind requests.
	requestFrames, responseFrames *bound
	// reads are the connections' read buffers, held while bytes arrive.
	reads readBuffers
	// hot tracks the busiest partitions for /hot; nil when turned off.
	hot *ratelimit.TopK
	// adminToken is the bearer token /hot asks for; nil when none is set.
	adminToken []byte
	// tls is the configuration of client connections accepted now; nil
	// when TLS is off.
	tls atomic.Pointer[tls.Config]
	// upstreamTLS is the configuration of upstream connections opened now;
	// nil when TLS towards the upstream is off.
	upstreamTLS atomic.Pointer[tls.Config]

	// limits are the per-partition limits now in effect and limiter the
	// counters that enforce them; ReloadConfig swaps both. The request path
	// loads each once per request.
	limits  atomic.Pointer[limits]
	limiter atomic.Pointer[ratelimit.Limiter]
	// limiterStats exports the limiter's statistics, keeping the counters
	// of limiters a reload replaced.
	limiterStats *limiterCollector
	reload       reloader

	mu        sync.Mutex
	sessions  map[*session]struct{}
	listeners []net.Listener
	draining  bool
	active    sync.WaitGroup
	lastID    uint64
}

// Option configures a Proxy beyond its Config.
type Option func(*Proxy)

// WithObserver has the proxy call fn with the classification of every
// QUERY, EXECUTE and BATCH, on the request path, before it is forwarded:
// for tests and tools. fn must not keep the classification.
func WithObserver(fn func(*Classification)) Option {
	return func(p *Proxy) { p.observe = fn }
}

// WithSchema makes the proxy take partition keys from src instead of
// loading them from the upstreams.
func WithSchema(src SchemaSource) Option {
	return func(p *Proxy) { p.schema = src }
}

// New returns a proxy for cfg, registering its metrics with reg. Unless an
// option says otherwise, it starts loading the upstream's schema.
func New(cfg Config, log zerolog.Logger, reg prometheus.Registerer, opts ...Option) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	topo, err := newTopology(cfg)
	if err != nil {
		return nil, err
	}
	m := NewMetrics(reg)
	p := &Proxy{
		cfg:      cfg,
		log:      log,
		metrics:  m,
		topo:     topo,
		prepared: newPreparedRegistry(cfg.MaxPreparedStatements),
		epoch:    time.Now(),
		sessions: map[*session]struct{}{},
		stopBg:   func() {},
		inflight: newBound(cfg.MaxInFlight, m.proxyInFlightWaits.Inc),
	}
	p.prepared.maxBytes = int(cfg.MaxPreparedBytes)
	p.requestFrames = newBound(int(cfg.MaxFrameBytesTotal), m.frameWaits.Inc)
	p.responseFrames = newBound(int(cfg.MaxFrameBytesTotal), m.frameWaits.Inc)
	if cfg.MaxBufferedBytesTotal > 0 {
		p.buffered = newBound(int(cfg.MaxBufferedBytesTotal), m.bufferWaits.Inc)
	}
	registerLoadGauges(reg, p)
	p.epochUnix = p.epoch.UnixNano()
	p.elapsed = func() int64 { return int64(time.Since(p.epoch)) }
	for _, opt := range opts {
		opt(p)
	}
	if p.adminToken, err = cfg.Admin.token(); err != nil {
		return nil, err
	}
	if cfg.Admin.HotPartitions > 0 {
		p.hot = ratelimit.NewTopK(cfg.Admin.HotPartitions, hotKeyBytes, p.clock)
	}
	p.limiterStats = newLimiterCollector(p)
	reg.MustRegister(p.limiterStats)
	if err := p.initLimits(reg); err != nil {
		return nil, err
	}
	if err := p.loadTLS(cfg.TLS); err != nil {
		return nil, err
	}
	if err := p.loadUpstreamTLS(cfg.UpstreamTLS); err != nil {
		return nil, err
	}
	if p.schema == nil {
		s, stop, err := startSchema(context.Background(), cfg, p.upstreamTLS.Load(), log)
		if err != nil {
			return nil, err
		}
		p.schema, p.stopBg = s, stop
	}
	p.topo.onSchemaChange = p.schema.Refresh
	if d := time.Duration(cfg.UpstreamTimeout); d > 0 {
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.watchUpstreams(d, stop)
		}()
		stopSchema := p.stopBg
		p.stopBg = func() {
			close(stop)
			<-done
			stopSchema()
		}
	}
	return p, nil
}

// watchUpstreams closes the upstream connection of each session whose
// upstream has sent nothing for timeout while requests wait for it, until
// stop is closed.
//
// It is one ticker for the whole proxy rather than a timer per session: a
// session's timer would be armed when a request finds none in flight and
// stopped when the last is answered, a timer operation per request when
// requests do not overlap, which is the common case. The ticker costs the
// request path nothing but a counter bumped under the session lock it
// takes anyway, and costs a scan of the sessions four times per timeout.
// Counting ticks instead of reading a clock keeps the watchdog off the
// request timestamps, which tests stop. A stall is seen between timeout
// and timeout plus a quarter of it after the upstream's last frame.
func (p *Proxy) watchUpstreams(timeout time.Duration, stop <-chan struct{}) {
	const ticks = 4
	t := time.NewTicker(max(timeout/ticks, time.Millisecond))
	defer t.Stop()
	var stalled []*session
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		for s := range p.sessions {
			if s.quiet() >= ticks {
				stalled = append(stalled, s)
			}
		}
		p.mu.Unlock()
		for _, s := range stalled {
			s.upstreamStalled(timeout)
		}
		clear(stalled)
		stalled = stalled[:0]
	}
}

// Serve accepts connections on ln until ln is closed or Shutdown is called.
func (p *Proxy) Serve(ln net.Listener) error {
	p.mu.Lock()
	if p.draining {
		p.mu.Unlock()
		ln.Close()
		return nil
	}
	p.listeners = append(p.listeners, ln)
	p.mu.Unlock()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			p.mu.Lock()
			draining := p.draining
			p.mu.Unlock()
			if draining {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, errTooManyFiles) {
				// Out of file descriptors or a transient failure: wait rather
				// than spin, as net/http does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				p.log.Warn().Err(err).Dur("retry_in", backoff).Msg("accept failed")
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("accepting on %s: %w", ln.Addr(), err)
		}
		backoff = 0
		// Counted under the lock that Shutdown sets draining with, so that
		// Shutdown's wait never runs while a connection is being counted.
		p.mu.Lock()
		if p.draining {
			p.mu.Unlock()
			c.Close()
			return nil
		}
		p.active.Add(1)
		p.mu.Unlock()
		go p.handle(c)
	}
}

// Shutdown stops accepting, waits for in-flight requests to be answered
// (each connection closes once it has none), and closes what remains when
// ctx ends.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	p.draining = true
	for _, ln := range p.listeners {
		ln.Close()
	}
	for s := range p.sessions {
		s.drain()
	}
	p.mu.Unlock()

	defer p.stopBg()
	done := make(chan struct{})
	go func() { p.active.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		p.mu.Lock()
		for s := range p.sessions {
			s.close()
		}
		p.mu.Unlock()
		<-done
		return fmt.Errorf("drain: %w", ctx.Err())
	}
}

// handle serves one client connection.
func (p *Proxy) handle(client net.Conn) {
	defer p.active.Done()
	p.metrics.clientConns.Inc()
	p.metrics.clientConnsTot.Inc()
	defer p.metrics.clientConns.Dec()

	p.mu.Lock()
	p.lastID++
	id := p.lastID
	p.mu.Unlock()
	log := p.log.With().Uint64("conn", id).Str("client", client.RemoteAddr().String()).Logger()
	secured, err := p.acceptTLS(client, time.Duration(p.cfg.FrameTimeout))
	if err != nil {
		client.Close()
		p.metrics.protocolErrors.WithLabelValues("tls_handshake").Inc()
		log.Info().Err(err).Msg("connection refused")
		return
	}
	client = secured
	if n := p.conns.Add(1); p.cfg.MaxConnections > 0 && n > int64(p.cfg.MaxConnections) {
		p.conns.Add(-1)
		p.metrics.protocolErrors.WithLabelValues("too_many_connections").Inc()
		log.Warn().Int("max_connections", p.cfg.MaxConnections).Msg("connection refused: too many client connections")
		p.refuse(client, fmt.Sprintf("cqlguard: too many client connections (max_connections %d)", p.cfg.MaxConnections))
		return
	}
	defer p.conns.Add(-1)

	upstream, addr, err := p.dialUpstream()
	if err != nil {
		log.Error().Err(err).Msg("no upstream node reachable")
		p.refuse(client, "cqlguard: no upstream node reachable: "+err.Error())
		return
	}
	log = log.With().Str("upstream", addr).Logger()
	s := newSession(p, client, upstream, log)
	p.mu.Lock()
	if p.draining {
		s.draining = true
	}
	p.sessions[s] = struct{}{}
	p.mu.Unlock()

	s.run()

	p.mu.Lock()
	delete(p.sessions, s)
	p.mu.Unlock()
}

// dialUpstream connects to the next upstream node that answers, trying
// each once, and learns whether it supports the rate-limit error.
func (p *Proxy) dialUpstream() (*upstreamConn, string, error) {
	n := len(p.cfg.Upstreams)
	start := int(p.next.Add(1))
	var errs []error
	for i := range n {
		addr := p.cfg.Upstreams[(start+i)%n]
		u, err := dialUpstream(addr, time.Duration(p.cfg.DialTimeout), forUpstream(p.upstreamTLS.Load(), addr), &p.reads)
		if err == nil {
			return u, addr, nil
		}
		p.metrics.upstreamDialErr.Inc()
		errs = append(errs, err)
	}
	return nil, "", errors.Join(errs...)
}

// Ready reports whether some upstream node answers OPTIONS.
func (p *Proxy) Ready() error {
	p.mu.Lock()
	draining := p.draining
	p.mu.Unlock()
	if draining {
		return errors.New("draining")
	}
	u, _, err := p.dialUpstream()
	if err != nil {
		return err
	}
	u.conn.Close()
	u.in.park()
	return nil
}

// session is one client connection and its upstream connection.
type session struct {
	p        *Proxy
	log      zerolog.Logger
	client   net.Conn
	upstream net.Conn

	fromClient   *frame.Reader
	fromUpstream *frame.Reader
	// clientIn and upstreamIn hold the readers' buffers while bytes come.
	clientIn   *lazyReader
	upstreamIn *lazyReader
	toClient   *writer
	toUpstream *writer

	upstreamRateLimit bool              // the upstream advertised the rate-limit error
	handshake         chan bool         // v5: true once the upstream switched to segments
	awaitingV5        atomic.Bool       // a v5 STARTUP waits for its answer
	reqCompression    frame.Compression // the request path's own copy of compression

	mu       sync.Mutex // guards what both paths use
	streams  streams
	draining bool
	// room is signalled when a request is answered while the request path
	// waits for one (full), or when the session closes (halted).
	room           sync.Cond
	full, halted   bool
	compression    frame.Compression // negotiated in STARTUP
	rateLimitOptIn bool              // the driver asked for the rate-limit error
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
	heldLarge   bool
	class       classifier // request path only
	reqScratch  []byte     // answers written by the request path
	respScratch []byte     // answers written by the response path
	rewritten   []byte     // requests the request path rewrote
	guard       *stallGuard
	// waitingForRoom is set while the response path waits for room in
	// max_frame_bytes_total rather than for the upstream. (While it waits
	// for the client, the client's writer holds bytes: see quiet.)
	waitingForRoom atomic.Bool
	closing        sync.Once
	clientGone     atomic.Bool // the request path ended on the client's side
	// stopped is set when the session closes, for a request path waiting
	// on max_in_flight.
	stopped atomic.Bool

	// activity counts the upstream's frames, and requests that found none
	// in flight: the watchdog takes a count unchanged over a tick, with
	// requests in flight, for a tick of silence. Guarded by mu.
	activity uint32
	// lastActivity and quietTicks are the watchdog's own: the count it saw
	// last and for how many ticks it has not changed.
	lastActivity uint32
	quietTicks   int
	// stalled is set when the watchdog closed the upstream connection.
	stalled atomic.Bool
}

func newSession(p *Proxy, client net.Conn, u *upstreamConn, log zerolog.Logger) *session {
	guard := &stallGuard{Conn: client, timeout: time.Duration(p.cfg.FrameTimeout)}
	clientIn := newLazyReader(guard, &p.reads)
	upstreamIn := u.in
	s := &session{
		p:                 p,
		log:               log,
		client:            client,
		upstream:          u.conn,
		fromClient:        frame.NewReader(clientIn.br, p.cfg.MaxFrameBytes),
		fromUpstream:      frame.NewReader(upstreamIn.br, p.cfg.MaxFrameBytes),
		clientIn:          clientIn,
		upstreamIn:        upstreamIn,
		toClient:          newBudgetWriter(client, p.cfg.MaxBufferedBytes, p.buffered),
		toUpstream:        newBudgetWriter(u.conn, p.cfg.MaxBufferedBytes, p.buffered),
		upstreamRateLimit: u.rateLimitError,
		handshake:         make(chan bool, 1),
	}
	guard.frames = s.fromClient
	s.guard = guard
	s.fromClient.SetBudget(frameBudget{s, p.requestFrames, guard})
	s.fromUpstream.SetBudget(frameBudget{s, p.responseFrames, nil})
	s.room.L = &s.mu
	return s
}

// frameBudget is max_frame_bytes_total as one side of a session reads it.
type frameBudget struct {
	s     *session
	b     *bound
	guard *stallGuard // the client side's; nil for the upstream side
}

// errSessionClosed is the error of a frame budget's Take given up because
// its session is closing.
var errSessionClosed = fmt.Errorf("waiting for max_frame_bytes_total: %w", net.ErrClosed)

// Take waits for room for a large frame. Its wait is the proxy's, not the
// peer's: the client's frame_timeout starts again once there is room, and
// the upstream is not taken for silent meanwhile (upstream_timeout).
func (b frameBudget) Take(n int) error {
	if b.guard == nil {
		b.s.waitingForRoom.Store(true)
		defer b.s.waitingForRoom.Store(false)
	}
	if !b.b.take(int64(n), &b.s.stopped, nil) {
		return errSessionClosed
	}
	if b.guard != nil {
		b.guard.rearm()
	}
	return nil
}

func (b frameBudget) Give(n int) { b.b.give(n) }

// stallGuard is a client connection as the request path reads it: once a
// frame has begun to arrive, the rest must come within timeout, else the
// read fails and the connection ends. Waiting for the next frame is not
// bounded: drivers keep idle connections open.
type stallGuard struct {
	net.Conn
	frames  *frame.Reader // reads through the guard
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
	return g.Conn.Read(b)
}

// run serves the session until either side closes.
func (s *session) run() {
	defer s.giveBack()
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := s.serveResponses()
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
			// and did not answer gets an error rather than silence.
			s.failInFlight(err)
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
		s.upstream.Close()
		<-done
		s.toUpstream.Close()
		return
	}
	s.clientGone.Store(true)
	// An answer to the last frame (a version the proxy does not speak) must
	// reach the client before the connection closes.
	s.client.SetWriteDeadline(time.Now().Add(flushTimeout))
	s.toClient.Flush()
	s.close()
	s.toUpstream.Close()
	<-done
}

// giveBack returns to max_in_flight the slots of requests still in flight
// when the session ends: requests of a client that left, or that began
// after failInFlight. Both paths have stopped (run's last step).
func (s *session) giveBack() {
	s.mu.Lock()
	n := s.streams.inflight
	s.streams.inflight = 0
	s.mu.Unlock()
	s.p.inflight.give(n)
	s.fromClient.Release()
	s.fromUpstream.Release()
	s.giveDecompressed()
}

// quiet is called by the watchdog on each tick; it returns for how many
// ticks in a row the upstream has sent nothing while requests waited.
func (s *session) quiet() int {
	s.mu.Lock()
	busy, activity := s.streams.inflight > 0, s.activity
	s.mu.Unlock()
	// A response path waiting on the client (its writer holds bytes) or
	// on max_frame_bytes_total is not waiting on the upstream.
	waitingElsewhere := s.toClient.held.Load() > 0 || s.waitingForRoom.Load()
	if !busy || activity != s.lastActivity || waitingElsewhere {
		s.lastActivity, s.quietTicks = activity, 0
		return 0
	}
	s.quietTicks++
	return s.quietTicks
}

// upstreamStalled closes the upstream connection of a session whose
// upstream has sent nothing for timeout with requests waiting: the response
// path then ends, and failInFlight answers each request.
func (s *session) upstreamStalled(timeout time.Duration) {
	if s.stalled.Swap(true) {
		return
	}
	s.log.Warn().Dur("upstream_timeout", timeout).Msg("upstream sent nothing for upstream_timeout with requests waiting; closing the connection to it")
	s.upstream.Close()
}

// largeFrame is the size past which a request is not kept alive by an
// idle connection (see classifier.release), as frame.Reader does not keep
// the buffers of frames past 64 KiB.
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

func (s *session) logEnd(side string, err error) {
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, errWriterClosed) || errors.Is(err, errVersionRefused) {
		s.log.Debug().Str("side", side).Msg("connection closed")
		return
	}
	s.log.Info().Str("side", side).Err(err).Msg("connection ended")
}

// close closes both sockets, ending both loops.
func (s *session) close() {
	s.closing.Do(func() {
		s.mu.Lock()
		s.halted = true
		s.room.Broadcast()
		s.mu.Unlock()
		s.stopped.Store(true)
		s.p.inflight.wake()
		s.p.requestFrames.wake()
		s.p.responseFrames.wake()
		s.client.Close()
		s.upstream.Close()
	})
}

// failInFlight answers every request still in flight with a server error
// naming err, after the upstream connection ended: the requests may or may
// not have been applied, which a driver's retry policy must know. It is
// called once the response path has stopped.
func (s *session) failInFlight(err error) {
	type stream struct {
		id      int16
		version uint8
	}
	var lost []stream
	s.mu.Lock()
	s.streams.each(func(id int16, r request) { lost = append(lost, stream{id, r.version}) })
	for _, l := range lost {
		s.streams.end(l.id)
	}
	s.wakeRequests()
	s.mu.Unlock()
	s.p.inflight.give(len(lost))
	if len(lost) == 0 {
		return
	}
	reason := "upstream_lost"
	msg := "cqlguard: the connection to the upstream node was lost before it answered; the request may or may not have been applied"
	if s.stalled.Load() {
		reason = "upstream_stalled"
		msg = fmt.Sprintf("cqlguard: the upstream node sent nothing for %s (upstream_timeout) while requests waited; the request may or may not have been applied",
			time.Duration(s.p.cfg.UpstreamTimeout))
	}
	s.p.metrics.protocolErrors.WithLabelValues(reason).Add(float64(len(lost)))
	s.log.Warn().Int("requests", len(lost)).Str("reason", reason).Err(err).Msg("upstream connection ended with requests in flight; answering them with a server error")
	for _, l := range lost {
		s.answer(&s.respScratch, l.version, l.id, frame.ErrCodeServer, msg)
	}
}

// abandonInFlight counts the requests in flight when the client left:
// nobody is left to answer, and the upstream is not at fault. It is called
// once the response path has stopped; giveBack returns their slots.
func (s *session) abandonInFlight() {
	s.mu.Lock()
	n := s.streams.inflight
	s.mu.Unlock()
	if n > 0 {
		s.p.metrics.abandoned.Add(float64(n))
		s.log.Debug().Int("requests", n).Msg("client left with requests in flight")
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
	idle := s.streams.inflight == 0
	s.mu.Unlock()
	if idle {
		s.close()
	}
}

// serveRequests is the request path: it reads each frame from the client,
// classifies it, decides, and forwards it upstream or answers it.
func (s *session) serveRequests() error {
	m := s.p.metrics
	for {
		// Read a frame. Frames the proxy cannot take are answered, not
		// dropped, so the driver's request never waits for nothing. With
		// nothing buffered, wait for the client without a read buffer.
		s.giveDecompressed()
		if s.fromClient.Buffered() == 0 {
			if s.heldLarge {
				s.class.release()
				s.decomp.Release()
				if cap(s.rewritten) > largeFrame {
					s.rewritten = nil
				}
				s.heldLarge = false
			}
			// The last frame is done with: an idle connection holds
			// nothing of max_frame_bytes_total.
			s.fromClient.Release()
			s.fromClient.Shrink()
			s.clientIn.park()
			s.clientIn.wait()
		}
		f, h, err := s.fromClient.Next()
		if err != nil {
			var tooLarge *frame.TooLargeError
			var version *frame.UnsupportedVersionError
			switch {
			case errors.As(err, &tooLarge):
				m.protocolErrors.WithLabelValues("frame_too_large").Inc()
				s.log.Warn().Int("bytes", h.Length).Str("opcode", h.Opcode.String()).Msg("request frame too large")
				s.answer(&s.reqScratch, h.Version, h.Stream, frame.ErrCodeProtocol, err.Error())
				continue
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
			if !errors.Is(err, io.EOF) && !errors.Is(err, errSessionClosed) {
				m.protocolErrors.WithLabelValues("bad_request_frame").Inc()
			}
			return err
		}
		// The next frame gets a frame_timeout of its own, not what is left
		// of this one's, however long the request path waits meanwhile.
		s.guard.rearm()
		m.frame(dirRequest, h.Opcode, len(f))
		s.heldLarge = s.heldLarge || len(f) > largeFrame
		if h.Response {
			m.protocolErrors.WithLabelValues("response_from_client").Inc()
			s.log.Info().Int16("stream", h.Stream).Str("opcode", h.Opcode.String()).Msg("request frame with the response bit set")
			s.answer(&s.reqScratch, h.Version, h.Stream, frame.ErrCodeProtocol, "frame from client has the response bit set")
			continue
		}

		// A stream id names one request until its answer. A negative id is
		// the server's (events), and a second request on an id in flight
		// would take the first one's answer, or its place in the stream
		// table: both are refused before anything else is done with them,
		// so that they change nothing the proxy shares.
		if reason, msg := s.badStream(h.Stream); reason != "" {
			m.protocolErrors.WithLabelValues(reason).Inc()
			s.log.Info().Int16("stream", h.Stream).Str("opcode", h.Opcode.String()).Msg(msg)
			s.answer(&s.reqScratch, h.Version, h.Stream, frame.ErrCodeProtocol, "cqlguard: "+msg)
			continue
		}

		// Classify: what the proxy must do with the response, and which
		// tables, operation and partitions the request touches.
		req := request{start: s.now(), version: h.Version}
		var class *Classification
		switch h.Opcode {
		case frame.OpStartup:
			if f, err = s.startup(f, h); err != nil {
				m.protocolErrors.WithLabelValues("bad_startup").Inc()
				s.log.Info().Err(err).Msg("STARTUP refused")
				s.answer(&s.reqScratch, h.Version, h.Stream, frame.ErrCodeProtocol, err.Error())
				continue
			}
			req.reply = replyStartup
			s.awaitingV5.Store(h.Version >= 5)
		case frame.OpOptions:
			req.reply = replySupported
		case frame.OpQuery, frame.OpPrepare, frame.OpExecute, frame.OpBatch:
			var unknown []byte
			class, unknown = s.classify(f, h, &req)
			// A statement the proxy has not seen prepared (prepared before
			// the proxy started, or forgotten) cannot be classified: the
			// driver is told to prepare it again, through the proxy.
			if unknown != nil {
				m.protocolErrors.WithLabelValues("unprepared").Inc()
				s.log.Info().Int16("stream", h.Stream).Str("opcode", h.Opcode.String()).Hex("id", unknown).Msg("statement not prepared through the proxy; answered Unprepared")
				s.answerUnprepared(h, unknown)
				continue
			}
		default:
			// The upstream answers what it does not know in its own words;
			// the proxy only notes it.
			if !h.Opcode.Valid() {
				m.protocolErrors.WithLabelValues("unknown_opcode").Inc()
				s.log.Info().Int16("stream", h.Stream).Uint8("opcode", uint8(h.Opcode)).Msg("unknown opcode; forwarded for the upstream to answer")
			}
		}

		// A driver that takes cqlguard for ScyllaDB, because it advertises
		// ScyllaDB's rate-limit error, may add ScyllaDB's USING TIMEOUT to
		// its queries of the system tables (ScyllaDB's Rust driver does),
		// which Cassandra refuses as a syntax error.
		internal := class != nil && class.Internal || h.Opcode == frame.OpPrepare && req.prepared != nil && req.prepared.internal
		if internal && !s.upstreamRateLimit {
			f = s.dropUsingTimeout(f, h)
		}

		// Decide: a request over its partition's limit is answered here
		// and never costs the upstream anything.
		if class != nil {
			req.ddl = class.Op == OpNone && !class.Internal
			if s.p.observe != nil {
				s.p.observe(class)
			}
			if r, reject := s.decide(class, s.p.epochUnix+req.start); reject {
				s.answerRateLimited(h, r)
				continue
			}
		}

		// Forward. A slot of max_in_flight first: at that bound nothing
		// more is read from this client until some request is answered.
		if !s.p.inflight.take(1, &s.stopped, nil) {
			return net.ErrClosed
		}
		// The stream is recorded before forwarding so that a fast response
		// finds it.
		max := s.p.cfg.MaxInFlightPerConnection
		s.mu.Lock()
		if s.streams.inflight == 0 {
			s.activity++ // the upstream's silence counts from now
		}
		// badStream saw the id free, and only this path begins streams.
		s.streams.begin(h.Stream, req)
		full := max > 0 && s.streams.inflight >= max
		s.mu.Unlock()
		if err := s.toUpstream.Write(f); err != nil {
			return fmt.Errorf("%w %s: %w", errForward, h.Opcode, err)
		}
		// Write copied the frame: give its share of max_frame_bytes_total
		// back before waiting on anything.
		s.fromClient.Release()
		s.giveDecompressed()
		// Back-pressure: with as many requests in flight as allowed, read
		// nothing more from this client until one is answered.
		if full {
			m.inFlightWaits.Inc()
			s.mu.Lock()
			for s.streams.inflight >= max && !s.halted {
				s.full = true
				s.room.Wait()
			}
			s.mu.Unlock()
		}
		if h.Opcode == frame.OpStartup && h.Version >= 5 {
			// v5 framing starts once the upstream has answered STARTUP, and
			// the client's next bytes may already be segments: wait.
			if !<-s.handshake {
				continue
			}
			s.fromClient.UseSegments(s.reqCompression == frame.CompressionLZ4)
		}
	}
}

// badStream returns the reason and message to refuse a request on stream
// id with, or "" for an id that may carry a new request: not negative and
// not in flight.
func (s *session) badStream(id int16) (reason, msg string) {
	if id < 0 {
		return "negative_stream", fmt.Sprintf("request on stream %d: negative stream ids are the server's", id)
	}
	s.mu.Lock()
	busy := s.streams.busy(id)
	s.mu.Unlock()
	if busy {
		return "stream_in_use", fmt.Sprintf("request on stream %d, which has a request in flight", id)
	}
	return "", ""
}

// serveResponses is the response path: it forwards each frame from the
// upstream to the client, rewriting what reveals the upstream's topology.
func (s *session) serveResponses() error {
	m := s.p.metrics
	defer func() {
		// A v5 STARTUP waiting for its answer must not wait forever.
		select {
		case s.handshake <- false:
		default:
		}
	}()
	for {
		if s.fromUpstream.Buffered() == 0 {
			s.fromUpstream.Release()
			s.fromUpstream.Shrink()
			s.upstreamIn.park()
			s.upstreamIn.wait()
		}
		f, h, err := s.fromUpstream.Next()
		if err != nil {
			var tooLarge *frame.TooLargeError
			if !errors.As(err, &tooLarge) {
				return err
			}
			// The client still gets an answer on its stream.
			m.protocolErrors.WithLabelValues("response_too_large").Inc()
			s.log.Warn().Int("bytes", h.Length).Msg("response frame too large")
			s.mu.Lock()
			s.activity++
			_, ended := s.streams.end(h.Stream)
			s.wakeRequests()
			s.mu.Unlock()
			if ended {
				s.p.inflight.give(1)
			}
			s.answer(&s.respScratch, h.Version, h.Stream, frame.ErrCodeServer, "cqlguard: response "+err.Error())
			continue
		}
		m.frame(dirResponse, h.Opcode, len(f))

		s.mu.Lock()
		s.activity++
		req, ok := s.streams.end(h.Stream)
		idle := s.draining && s.streams.inflight == 0
		comp := s.compression
		s.wakeRequests()
		s.mu.Unlock()
		if ok {
			s.p.inflight.give(1)
			m.upstreamLatency.Observe(float64(s.now()-req.start) / 1e9)
			// Only a statement that ran can have changed the schema: an
			// error (say, to garbage CQL sent in a loop) must not keep the
			// schema loader reloading.
			if req.ddl && h.Opcode == frame.OpResult {
				s.p.schema.Refresh()
			}
			if req.use && h.Opcode == frame.OpResult {
				s.learnKeyspace(f, h, comp)
			}
		}

		if h.Opcode == frame.OpEvent || req.reply != replyForward {
			var keep bool
			if f, keep, err = s.rewriteResponse(f, h, req, comp); err != nil {
				m.protocolErrors.WithLabelValues("bad_response").Inc()
				s.log.Warn().Err(err).Str("opcode", h.Opcode.String()).Msg("cannot rewrite response")
				if h.Stream < 0 {
					continue
				}
				s.answer(&s.respScratch, h.Version, h.Stream, frame.ErrCodeServer, "cqlguard: "+err.Error())
				continue
			}
			if !keep {
				m.filteredEvents.Inc()
				continue
			}
		}
		if err := s.toClient.Write(f); err != nil {
			return fmt.Errorf("%w: %w", errClientGone, err)
		}

		// Cassandra answers a version it does not speak on stream 0,
		// whatever stream the STARTUP used.
		if s.awaitingV5.Load() && (req.reply == replyStartup || h.Opcode == frame.OpError && h.Stream == 0) {
			// READY and AUTHENTICATE are the last plain frames; what follows,
			// both ways, travels in segments.
			segments := h.Opcode == frame.OpReady || h.Opcode == frame.OpAuthenticate
			if segments {
				lz4 := comp == frame.CompressionLZ4
				s.toClient.UseSegments(lz4)
				s.toUpstream.UseSegments(lz4)
				s.fromUpstream.UseSegments(lz4)
			}
			s.awaitingV5.Store(false)
			s.handshake <- segments
		}
		if idle {
			return nil
		}
	}
}

// startup remembers the driver's compression and rate-limit opt-in, and
// keeps the opt-in from an upstream that did not advertise it.
func (s *session) startup(f []byte, h frame.Header) ([]byte, error) {
	opts, err := startupOptions(f)
	if err != nil {
		return nil, fmt.Errorf("reading STARTUP options: %w", err)
	}
	comp := frame.CompressionNone
	if c, ok := opts["COMPRESSION"]; ok {
		if comp, err = frame.ParseCompression(c); err != nil {
			// Unknown compression: let the upstream refuse it in its words.
			comp = frame.CompressionNone
		}
	}
	_, optIn := opts[rateLimitKey]
	s.mu.Lock()
	s.compression, s.rateLimitOptIn = comp, optIn
	s.mu.Unlock()
	s.reqCompression = comp
	if optIn && !s.upstreamRateLimit {
		return startupWithout(f, opts, rateLimitKey)
	}
	return f, nil
}

// classify classifies a QUERY, PREPARE, EXECUTE or BATCH, and notes in
// req what its response needs (topology rows rewritten, a prepared
// statement learned). It returns the id of a statement the proxy has not
// seen prepared, which the driver must prepare again.
func (s *session) classify(f []byte, h frame.Header, req *request) (*Classification, []byte) {
	body := f[frame.HeaderSize:]
	if h.Compressed() {
		var err error
		if body, err = s.decompress(body, len(f)); err != nil {
			if !errors.Is(err, errSessionClosed) {
				s.unclassified(h, err)
			}
			return nil, nil
		}
	}
	body = skipRequestPrefix(body, h)
	snap := s.p.schema.Current()
	if ks := s.keyspace.Load(); ks != nil {
		s.class.keyspace = *ks
	}
	if l := s.p.limits.Load(); l != nil {
		s.class.maxPartitions = l.maxPartitions
	}
	switch h.Opcode {
	case frame.OpQuery:
		q, err := frame.ParseQuery(body, h.Version)
		if err != nil {
			s.unclassified(h, err)
			return nil, nil
		}
		req.reply = tableOf(q.Text)
		c := s.class.query(&q, snap)
		req.use = s.class.use
		return c, nil
	case frame.OpPrepare:
		q, err := frame.QueryString(body)
		if err != nil {
			s.unclassified(h, err)
			return nil, nil
		}
		req.reply, req.table = replyPrepared, tableOf(q)
		req.prepared = s.class.prepare(q, nil, snap)
		return nil, nil
	case frame.OpExecute:
		q, err := frame.ParseExecute(body, h.Version)
		if err != nil {
			s.unclassified(h, err)
			return nil, nil
		}
		p := s.p.prepared.get(q.ID)
		if p == nil {
			return nil, q.ID
		}
		p = s.p.prepared.resolve(q.ID, p, snap, &s.class)
		req.reply, req.prepared, req.use = p.table, p, p.use
		return s.class.execute(&q, p, snap), nil
	case frame.OpBatch:
		b, err := frame.ParseBatch(body, h.Version)
		if err != nil {
			s.unclassified(h, err)
			return nil, nil
		}
		return s.class.batch(&b, s.p.prepared, snap)
	}
	return nil, nil
}

// decompress returns the decompressed body of a request frame of n bytes.
// A body over 64 KiB takes its size from max_frame_bytes_total in place of
// its frame's share, which it gives back (the frame's bytes are held no
// longer than its body's), and holds it until giveDecompressed: after the
// request is forwarded or answered. So the request path never waits for
// room while it holds any, and a compressed body, small on the wire, is
// counted at the size it takes in memory.
func (s *session) decompress(body []byte, n int) ([]byte, error) {
	size, err := frame.DecodedLen(s.reqCompression, body, s.p.cfg.MaxFrameBytes)
	if err != nil {
		return nil, err
	}
	if size > largeFrame && size > s.decompHeld {
		s.fromClient.Release()
		s.giveDecompressed()
		share := max(size, n)
		if !s.p.requestFrames.take(int64(share), &s.stopped, nil) {
			return nil, errSessionClosed
		}
		s.decompHeld = share
		s.heldLarge = true
	}
	return s.decomp.Body(s.reqCompression, body, s.p.cfg.MaxFrameBytes)
}

// giveDecompressed lets go of a decompressed body over 64 KiB and gives
// its share of max_frame_bytes_total back.
func (s *session) giveDecompressed() {
	if s.decompHeld > 0 {
		s.decomp.Release()
		s.p.requestFrames.give(s.decompHeld)
		s.decompHeld = 0
	}
}

// unclassified notes a request whose body the proxy cannot decode. It is
// forwarded as it is and never limited: the upstream says what is wrong.
func (s *session) unclassified(h frame.Header, err error) {
	s.p.metrics.protocolErrors.WithLabelValues("bad_request_body").Inc()
	s.log.Info().Err(err).Int16("stream", h.Stream).Str("opcode", h.Opcode.String()).Msg("request body not understood; forwarded unclassified")
}

// dropUsingTimeout returns the QUERY or PREPARE f without a trailing USING
// TIMEOUT clause, or f itself if it has none. The frame it returns is
// uncompressed, which a v4 frame may be whatever the connection negotiated.
func (s *session) dropUsingTimeout(f []byte, h frame.Header) []byte {
	if (h.Opcode != frame.OpQuery && h.Opcode != frame.OpPrepare) || h.Flags&frame.FlagCustomPayload != 0 {
		return f
	}
	body := f[frame.HeaderSize:]
	if h.Compressed() {
		var err error
		if body, err = s.decomp.Body(s.reqCompression, body, s.p.cfg.MaxFrameBytes); err != nil {
			return f
		}
	}
	// QUERY and PREPARE bodies both start with the statement, a [long
	// string].
	q, err := frame.QueryString(body)
	if err != nil {
		return f
	}
	n, ok := frame.TrimUsingTimeout(q)
	if !ok {
		return f
	}
	rest := body[4+len(q):]
	h.Flags &^= frame.FlagCompression
	h.Length = 4 + n + len(rest)
	out := frame.AppendHeader(s.rewritten[:0], h)
	out = binary.BigEndian.AppendUint32(out, uint32(n))
	out = append(out, q[:n]...)
	out = append(out, rest...)
	s.rewritten = out
	s.log.Debug().Int16("stream", h.Stream).Msg("dropped USING TIMEOUT, which the upstream does not take")
	return out
}

// skipRequestPrefix skips the tracing-free prefix a request body may carry:
// a custom payload ([bytes map]) when its flag is set.
func skipRequestPrefix(body []byte, h frame.Header) []byte {
	if h.Flags&frame.FlagCustomPayload == 0 {
		return body
	}
	n, ok := frame.BytesMapLen(body)
	if !ok {
		return nil
	}
	return body[n:]
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
		return t.event(f, comp)
	case req.reply == replySupported && h.Opcode == frame.OpSupported:
		out, err := t.supported(f, comp)
		return out, true, err
	case h.Opcode != frame.OpResult:
		return f, true, nil
	case req.reply == replyPrepared:
		return f, true, s.learnPrepared(f, h, comp, req.table, req.prepared)
	case req.reply == replyLocal, req.reply == replyPeers, req.reply == replyPeersV2:
		var cols []*message.ColumnMetadata
		if req.prepared != nil {
			cols = req.prepared.columns
		}
		out, err := t.rows(f, comp, req.reply, cols)
		return out, true, err
	}
	return f, true, nil
}

// learnPrepared records the statement a RESULT Prepared names: what the
// request path learned of its text (p), completed with the partition key
// indexes the upstream reports.
func (s *session) learnPrepared(f []byte, h frame.Header, comp frame.Compression, table reply, p *preparedStatement) error {
	body := f[frame.HeaderSize:]
	if comp != frame.CompressionNone {
		var d frame.Decompressor
		var err error
		if body, err = d.Body(comp, body, s.p.cfg.MaxFrameBytes); err != nil {
			return err
		}
	}
	body = skipResponsePrefix(body, h)
	if len(body) < 4 || binary.BigEndian.Uint32(body) != resultPrepared {
		return nil // an error, say
	}
	prep, err := frame.ParsePrepared(body, h.Version)
	if err != nil {
		return fmt.Errorf("RESULT Prepared: %w", err)
	}
	if p == nil {
		p = &preparedStatement{}
	}
	p.table = table
	if p.sources == nil && prep.PKIndexes.Len() > 0 && p.op != OpNone {
		// The schema did not say (a table it does not know yet, say), but
		// the upstream did (v4 and later): each partition key column is
		// one bound variable.
		for i := range prep.PKIndexes.Len() {
			p.sources = append(p.sources, []pkSource{{index: int32(prep.PKIndexes.At(i))}})
		}
		if len(p.keyspace) == 0 {
			p.keyspace = append([]byte(nil), prep.Keyspace...)
		}
	}
	p.lwt = p.lwt || prep.LWT
	if table != replyForward {
		if p.columns, err = s.p.topo.preparedColumns(f, comp); err != nil {
			return err
		}
	}
	s.p.prepared.put(prep.ID, p)
	return nil
}

// learnKeyspace sets the connection's keyspace from the upstream's answer
// to a USE: a RESULT Set_keyspace, which names the keyspace as stored.
// Anything else leaves the keyspace as it was.
func (s *session) learnKeyspace(f []byte, h frame.Header, comp frame.Compression) {
	body := f[frame.HeaderSize:]
	if h.Compressed() {
		var d frame.Decompressor
		var err error
		if body, err = d.Body(comp, body, s.p.cfg.MaxFrameBytes); err != nil {
			return
		}
	}
	body = skipResponsePrefix(body, h)
	if len(body) < 6 || binary.BigEndian.Uint32(body) != resultSetKeyspace {
		return
	}
	n := int(binary.BigEndian.Uint16(body[4:]))
	if len(body) < 6+n {
		return
	}
	ks := append([]byte(nil), body[6:6+n]...)
	s.keyspace.Store(&ks)
}

// Kinds of RESULT the proxy reads.
const (
	resultSetKeyspace = 3
	resultPrepared    = 4
)

// skipResponsePrefix skips what a response body may carry before its
// message: a tracing id, warnings and a custom payload, as the flags say.
func skipResponsePrefix(body []byte, h frame.Header) []byte {
	if h.Flags&frame.FlagTracing != 0 {
		if len(body) < 16 {
			return nil
		}
		body = body[16:]
	}
	if h.Flags&frame.FlagWarning != 0 {
		if len(body) < 2 {
			return nil
		}
		n := int(binary.BigEndian.Uint16(body))
		body = body[2:]
		for range n {
			if len(body) < 2 || len(body) < 2+int(binary.BigEndian.Uint16(body)) {
				return nil
			}
			body = body[2+int(binary.BigEndian.Uint16(body)):]
		}
	}
	return skipRequestPrefix(body, h)
}

// answerUnprepared tells the driver to prepare statement id again.
func (s *session) answerUnprepared(h frame.Header, id []byte) {
	const msg = "cqlguard: prepared statement not known to the proxy; prepare it again"
	s.reqScratch = frame.AppendUnprepared(s.reqScratch[:0], h.Version, h.Stream, msg, id)
	s.reply(s.reqScratch)
}

// answer sends the client an ERROR on stream, in place of a response from
// the upstream. buf is the calling path's scratch buffer.
func (s *session) answer(buf *[]byte, v uint8, stream int16, code int32, msg string) {
	if v < 3 || v > 5 {
		v = 4
	}
	*buf = frame.AppendError((*buf)[:0], v, stream, code, msg)
	s.reply(*buf)
}

// reply writes an answer the proxy made itself to the client, counted in
// cqlguard_frames_total like the answers it forwards.
func (s *session) reply(f []byte) {
	s.p.metrics.frame(dirResponse, frame.Opcode(f[4]), len(f))
	if err := s.toClient.Write(f); err != nil {
		s.log.Debug().Err(err).Msg("cannot answer client")
	}
}

// refuseVersion answers a frame of a protocol version cqlguard does not
// speak the way Cassandra does, so that the driver retries with a lower one.
func (s *session) refuseVersion(e *frame.UnsupportedVersionError) {
	b := versionError(e)
	s.p.metrics.frame(dirResponse, frame.OpError, len(b))
	s.toClient.Write(b)
}

func (s *session) now() int64 { return s.p.elapsed() }

// clock is the limiter's and the hot partitions' clock: Unix nanoseconds
// that advance with the monotonic clock. A request's timestamp from
// session.now is the same clock less epochUnix.
func (p *Proxy) clock() int64 { return p.epochUnix + p.elapsed() }
