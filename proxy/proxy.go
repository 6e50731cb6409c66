// Package proxy accepts CQL connections from drivers and forwards each to
// an upstream Cassandra or ScyllaDB node, keeping drivers on the proxy by
// rewriting what they learn of the cluster.
//
// The request path is session.serveRequests (requests.go): read a frame,
// have session.handle (handler.go) say what to do with it — classify,
// decide, forward or answer, with no socket in sight — and do it. The
// response path is session.serveResponses (responses.go). A session's life
// and what its two paths share are in session.go; the Proxy, which accepts
// connections and pairs each with an upstream connection, is here.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/classify"
	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/fleet"
	"github.com/cqlguard/cqlguard/ratelimit"
	"github.com/cqlguard/cqlguard/transport"
)

// Proxy accepts client connections and pairs each with one connection to an
// upstream node.
type Proxy struct {
	cfg      config.Config
	log      zerolog.Logger
	metrics  *Metrics
	topo     *topology
	prepared *classify.Registry
	// ring says which nodes hold a partition (WithRing), nil when the
	// proxy does not route; ringStale asks for it to be read again, and
	// nodes are the nodes routing avoids.
	ring      Ring
	ringStale func()
	nodes     nodes
	// shards are the nodes' shardings, as routing sends each request to
	// the shard that owns it (shards.go).
	shards shardings
	// loads are the nodes' loads, as routing ranks replicas by them.
	loads  nodeLoads
	schema SchemaSource
	// agreement holds answers to schema changes until the cluster agrees
	// (agreement.go); nil in node mode, where drivers wait themselves.
	agreement *schemaAgreement
	observe   func(*classify.Classification)
	stopBg    func()    // stops background work (schema loading)
	epoch     time.Time // origin of the monotonic request timestamps
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
	inflight *transport.Bound
	buffered *transport.Bound
	// requestFrames and responseFrames are max_frame_bytes_total, one bound
	// per direction, and count when that is 0. Two bounds, not one: a
	// request path holds its frame while it waits for room to forward it,
	// and the answers that make room must never wait behind requests.
	requestFrames, responseFrames *transport.Bound
	// reads are the connections' read buffers, held while bytes arrive.
	reads transport.ReadBuffers
	// hotSketch tracks the busiest partitions for /hot; nil when turned off.
	hotSketch *ratelimit.TopK
	// hotReads serves hot reads (hotreads.go); principalSeed keys the
	// digests of credentials it tells connections apart by.
	hotReads      *hotReads
	principalSeed maphash.Seed
	// settings are what a reload can change, swapped whole (settings.go).
	settings      atomic.Pointer[settings]
	clientMetrics *clientMetrics
	// shedding sheds the least important tiers when a node slows
	// (shedding.go); nil when off.
	shedding *shedding
	// reporter is the fleet's reporter that fills settings.fleet.
	reporter fleetReporter
	// limiterStats exports the limiter's statistics, keeping the counters
	// of limiters a reload replaced.
	limiterStats *limiterCollector
	reload       reloader
	// health is the upstreams' health as /readyz reports it (health.go).
	health *upstreamHealth
	// refuseTimeout bounds the answer to a connection that is refused
	// (refuseConn): reading its first frame, after its TLS handshake, and
	// writing the error. Tests shorten it.
	refuseTimeout time.Duration

	mu        sync.Mutex
	sessions  map[*session]struct{}
	listeners []net.Listener
	draining  bool
	active    sync.WaitGroup
	lastID    uint64
}

// Option configures a Proxy beyond its config.Config.
type Option func(*Proxy)

// WithObserver has the proxy call fn with the classification of every
// QUERY, EXECUTE and BATCH, on the request path, before it is forwarded:
// for tests and tools. fn must not keep the classification.
func WithObserver(fn func(*classify.Classification)) Option {
	return func(p *Proxy) { p.observe = fn }
}

// WithSchema makes the proxy take partition keys from src instead of
// loading them from the upstreams.
func WithSchema(src SchemaSource) Option {
	return func(p *Proxy) { p.schema = src }
}

// New returns a proxy for cfg, registering its metrics with reg. Unless an
// option says otherwise, it starts loading the upstream's schema.
func New(cfg config.Config, log zerolog.Logger, reg prometheus.Registerer, opts ...Option) (*Proxy, error) {
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
		prepared: classify.NewRegistry(cfg.MaxPreparedStatements, int(cfg.MaxPreparedBytes)),
		epoch:    time.Now(),
		sessions: map[*session]struct{}{},
		stopBg:   func() {},
		inflight: transport.NewBound(cfg.MaxInFlight, m.proxyInFlightWaits.Inc),
		health:   newUpstreamHealth(),

		refuseTimeout: refuseTimeout,
	}
	p.requestFrames = transport.NewBound(int(cfg.MaxFrameBytesTotal), m.frameWaits.Inc)
	p.responseFrames = transport.NewBound(int(cfg.MaxFrameBytesTotal), m.frameWaits.Inc)
	if cfg.MaxBufferedBytesTotal > 0 {
		p.buffered = transport.NewBound(int(cfg.MaxBufferedBytesTotal), m.bufferWaits.Inc)
	}
	registerLoadGauges(reg, p)
	reg.MustRegister(loadCollector{&p.loads})
	p.epochUnix = p.epoch.UnixNano()
	p.elapsed = func() int64 { return int64(time.Since(p.epoch)) }
	for _, opt := range opts {
		opt(p)
	}
	if cfg.Admin.HotPartitions > 0 {
		p.hotSketch = ratelimit.NewTopK(cfg.Admin.HotPartitions, hotKeyBytes, p.clock)
	}
	p.hotReads = newHotReads(cfg.HotReads, reg)
	p.clientMetrics = newClientMetrics(reg)
	if p.shedding, err = newShedding(cfg.Shedding, cfg.Clients, reg); err != nil {
		return nil, err
	}
	p.principalSeed = maphash.MakeSeed()
	p.limiterStats = newLimiterCollector(p)
	reg.MustRegister(p.limiterStats)
	p.reporter.metrics = fleet.NewMetrics(reg)
	first, err := p.buildSettings(cfg, nil)
	if err != nil {
		return nil, err
	}
	p.reload.init(reg, cfg)
	p.commit(first)
	if p.schema == nil {
		s, src, stop, err := startSchema(context.Background(), cfg, first.next.upstreamTLS, log)
		if err != nil {
			p.stopReporter()
			return nil, err
		}
		p.schema, p.stopBg = s, stop
		if p.agreement == nil && cfg.Mode == config.ModeCluster {
			p.agreement = newSchemaAgreement(agreementOf(src))
		}
		if p.ring == nil && cfg.Mode == config.ModeCluster && cfg.Routing.Replicas {
			p.stopBg = p.startRing(src, stop)
		}
	}
	if st, ok := p.ring.(interface{ Stale() }); ok && p.ringStale == nil {
		// A ring given (WithRing) that can be read again is asked to be.
		p.ringStale = st.Stale
	}
	if cfg.Mode != config.ModeCluster {
		// Drivers see every node, through its proxy, and wait themselves.
		p.agreement = nil
	}
	p.topo.onSchemaChange = p.schema.Refresh
	reg.MustRegister(newGuardCollector(p))
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() { p.watchSessions(time.Duration(cfg.UpstreamTimeout), stop) })
	bg.Go(func() { p.watchUpstreams(stop) })
	bg.Go(func() { p.watchGuard(stop) })
	bg.Go(func() { p.expireWaits(stop) })
	if p.shedding != nil {
		bg.Go(func() { p.updateShedding(stop) })
	}
	stopSchema := p.stopBg
	p.stopBg = func() {
		close(stop)
		bg.Wait()
		stopSchema()
		p.stopReporter()
	}
	return p, nil
}

// tidyEvery is how often an idle session gives back a stream table a burst
// grew, when upstream_timeout does not tick more often.
const tidyEvery = 10 * time.Second

// watchSessions closes the upstream connection of each session whose
// upstream has sent nothing for timeout (0: never) while requests wait for
// it, and has idle sessions give back stream tables that bursts grew,
// until stop is closed.
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
func (p *Proxy) watchSessions(timeout time.Duration, stop <-chan struct{}) {
	const ticks = 4
	every := tidyEvery
	if timeout > 0 {
		every = min(max(timeout/ticks, time.Millisecond), tidyEvery)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var stalled []stalledUpstream
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		for s := range p.sessions {
			stalled = s.tick(timeout > 0, ticks, stalled)
		}
		p.mu.Unlock()
		for _, st := range stalled {
			st.s.upstreamStalled(st.u, timeout)
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
			if acceptRetryable(err) {
				// Out of file descriptors or a transient failure: wait rather
				// than spin, as net/http does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				p.log.Warn().Err(err).Float64("retry_in_seconds", backoff.Seconds()).Msg("accept failed")
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
		go p.serveConn(c)
	}
}

// acceptRetryable reports whether accept failed for want of a resource
// that connections ending give back (descriptors of the process or of the
// system, socket buffers, kernel memory) or for a timeout: the listener
// itself is fine, and serving goes on once the failure passes.
func acceptRetryable(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() ||
		errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
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

// serveConn serves one client connection.
func (p *Proxy) serveConn(client net.Conn) {
	defer p.active.Done()
	p.metrics.clientConns.Inc()
	p.metrics.clientConnsTot.Inc()
	defer p.metrics.clientConns.Dec()

	p.mu.Lock()
	p.lastID++
	id := p.lastID
	p.mu.Unlock()
	log := p.log.With().Uint64("conn", id).Str("client", client.RemoteAddr().String()).Logger()
	// A connection counts from its accept, before its TLS handshake: one
	// that never finishes it holds a descriptor and a goroutine all the
	// same, for up to frame_timeout.
	if n := p.conns.Add(1); p.cfg.MaxConnections > 0 && n > int64(p.cfg.MaxConnections) {
		p.conns.Add(-1)
		p.metrics.protocolErrors.WithLabelValues("too_many_connections").Inc()
		log.Warn().Int("max_connections", p.cfg.MaxConnections).Msg("connection refused: too many client connections")
		// The handshake, with TLS on, is part of the refusal and within
		// its deadline.
		p.refuseConn(p.serverTLS(client), fmt.Sprintf("cqlguard: too many client connections (max_connections %d)", p.cfg.MaxConnections))
		return
	}
	defer p.conns.Add(-1)
	secured, err := p.acceptTLS(client, time.Duration(p.cfg.FrameTimeout))
	if err != nil {
		client.Close()
		p.metrics.protocolErrors.WithLabelValues("tls_handshake").Inc()
		log.Info().Err(err).Msg("connection refused")
		return
	}
	client = secured

	upstream, addr, err := p.dialUpstream()
	if err != nil {
		log.Error().Err(err).Msg("no upstream node reachable")
		p.refuseConn(client, "cqlguard: no upstream node reachable: "+err.Error())
		return
	}
	log = log.With().Str("upstream", addr).Logger()
	s := newSession(p, client, upstream, log)
	s.hotRNG = id
	if p.shedding != nil {
		// By the node's address, as routing judges the requests it
		// sends there (upstream.at), not the name it was dialled by.
		s.up.node = p.shedding.node(upstream.at)
		s.rng = id*0x9e3779b97f4a7c15 | 1
	}
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
func (p *Proxy) dialUpstream() (*upstream, string, error) {
	n := len(p.cfg.Upstreams)
	start := int(p.next.Add(1))
	var errs []error
	for i := range n {
		addr := p.cfg.Upstreams[(start+i)%n]
		u, err := dialUpstream(context.Background(), addr, time.Duration(p.cfg.DialTimeout), forUpstream(p.settings.Load().upstreamTLS, addr), &p.reads)
		if err == nil {
			return u, addr, nil
		}
		p.metrics.upstreamDialErr.Inc()
		errs = append(errs, err)
	}
	return nil, "", errors.Join(errs...)
}

// Ready reports whether the proxy is ready for drivers: not draining, an
// upstream node answered its last health check (health.go), and, with
// admin.ready_needs_schema, the limits configured can be enforced.
func (p *Proxy) Ready() error {
	p.mu.Lock()
	draining := p.draining
	p.mu.Unlock()
	if draining {
		return errors.New("draining")
	}
	if err := p.health.wait(time.Duration(p.cfg.DialTimeout)); err != nil {
		return err
	}
	if p.cfg.Admin.ReadyNeedsSchema && !p.armed() {
		return errors.New("limits are configured and the schema has not loaded, so none would be enforced (admin.ready_needs_schema)")
	}
	return nil
}

// clock is the limiter's and the hot partitions' clock: Unix nanoseconds
// that advance with the monotonic clock. A request's timestamp from
// session.now is the same clock less epochUnix.
func (p *Proxy) clock() int64 { return p.epochUnix + p.elapsed() }
