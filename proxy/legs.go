package proxy

// Routing: a request with a partition goes to a node that holds it. A
// session begins with one connection (up); in front of a cluster whose
// ring the proxy knows (WithRing), it opens a connection of its own to
// each other node a request is routed to, when the first such request
// comes, and logs in there as its client did; on a node that says which
// of its shards owns a token, one per shard a request is routed to
// (shards.go). Each connection carries the identity its client
// authenticated with; the client's stream ids are unique among its
// requests in flight, so they travel unchanged on whichever connection
// runs the request.
//
// Before a request runs on one of these connections, the connection is
// brought to what the request needs: the session's keyspace (USE) and,
// for an EXECUTE, its statement prepared there (PREPARE), each asked on
// the request's own stream while the request path waits, its answer kept
// from the client. A node that cannot be reached, or a connection that
// cannot be brought there, leaves the request on up, where the driver
// sent it: it is coordinated there, as without routing.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cqlguard/cqlguard/classify"
	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/transport"
)

// A Ring says which nodes hold a partition.
type Ring interface {
	// Replicas appends to dst the CQL addresses (host:port) of the nodes
	// holding token in keyspace, the preferred first, and returns dst
	// unchanged when it does not know the keyspace. It must not allocate.
	Replicas(dst []string, keyspace string, token int64) []string
}

// WithRing has the proxy route each request with a partition to a node
// that holds it.
func WithRing(r Ring) Option {
	return func(p *Proxy) { p.ring = r }
}

// route is where a request would best run: the keyspace and token of its
// (first) partition, and the replica chosen first and its load.
type route struct {
	keyspace string
	token    int64
	ok       bool
	to       string
	load     *nodeLoad
	// read is set for a read of one partition, which may be hedged.
	read bool
	// batch are the prepared statements of a BATCH, the classifier's
	// until the next request, to prepare on the node it runs on.
	batch []*classify.Prepared
}

// route returns the route of a request classified as class, its replica
// chosen; the replicas are left in s.replicas, for replica.
func (s *session) route(class *classify.Classification) route {
	r := routeOf(class)
	if !r.ok {
		return r
	}
	s.replicas = s.p.ring.Replicas(s.replicas[:0], r.keyspace, r.token)
	r.to, r.load = s.choose(s.replicas)
	return r
}

// routeOf returns the route of a request classified as class, or none. A
// BATCH is routed when it writes one partition, the most common batch and
// the only one whose replicas are those of each of its statements.
func routeOf(class *classify.Classification) route {
	if class == nil || !class.Pinned || class.Internal || len(class.Partitions) == 0 {
		return route{}
	}
	p := class.Partitions[0]
	r := route{keyspace: p.Table.Keyspace, token: p.Token, ok: true,
		read: class.Op == classify.OpRead && !class.Batch && len(class.Partitions) == 1}
	if class.Batch {
		for _, q := range class.Partitions[1:] {
			if q.Token != p.Token || q.Table.Keyspace != p.Table.Keyspace {
				return route{}
			}
		}
		r.batch = class.BatchPrepared
	}
	return r
}

// upstreamFor returns the connection to run the request req of header h
// on, routed by r: a connection to a node that holds its partition, made
// ready for it, or up. It runs on the request path, and may wait for a
// node to be dialled and for the answers to what it asks the node.
func (s *session) upstreamFor(r route, h frame.Header, req *request) *upstream {
	ring := s.p.ring
	if ring == nil || !r.ok || !s.started {
		return s.up
	}
	u := s.replica(r, h, req)
	if u == nil {
		s.p.metrics.routed[routedFallback].Inc()
		return s.up
	}
	s.p.metrics.routed[routedReplica].Inc()
	return u
}

// replica returns the connection to the replica of r chosen to run the
// request req of header h, made ready for it, or nil when there is none:
// to the shard of the replica that owns r's token when the replica says
// which (shards.go).
func (s *session) replica(r route, h frame.Header, req *request) *upstream {
	// The best replica first, as route chose it among s.replicas; one that
	// cannot be reached or made ready leaves the next best to try.
	addr := r.to
	for range len(s.replicas) {
		if addr == "" {
			return nil
		}
		shard := s.shardFor(addr, r.token)
		var u *upstream
		if addr == s.up.at && (shard == anyShard || shard == s.up.shard) {
			u = s.up
		} else if u = s.leg(addr, shard); shard == anyShard && u != nil && u != s.up {
			// The first connection to a node says whether it has shards:
			// the request goes to its own shard's if the node says which.
			if own := s.shardFor(addr, r.token); own != anyShard && own != u.shard {
				if v := s.leg(addr, own); v != nil {
					u = v
				}
			}
		}
		switch {
		case u != nil && s.holdsLeftover(u, h.Stream):
			// The stream is still busy there with a hedged read's other
			// copy (hedge.go): the next best replica runs the request.
		case u == s.up || (u != nil && s.ready(u, h, req, r.batch)):
			return u
		}
		i := slices.Index(s.replicas, addr)
		s.replicas = slices.Delete(s.replicas, i, i+1)
		addr, _ = s.choose(s.replicas)
	}
	return nil
}

// leg returns the session's connection to the node at addr served by
// shard, or any of its connections to the node for anyShard, opened if it
// has none; nil when none can be opened. When shard's cannot be, any of
// the node's connections will do.
func (s *session) leg(addr string, shard int) *upstream {
	if u := s.connTo(addr, shard); u != nil {
		return u
	}
	if !s.p.nodes.claim(addr, s.now(), int64(s.p.cfg.DialTimeout)) {
		return nil // another session is finding out whether it is back
	}
	if shard != anyShard {
		u, err := s.openLeg(addr, shard)
		switch {
		case err == nil:
			s.p.nodes.up(addr)
			s.p.metrics.legsOpened.Inc()
			return u
		case errors.Is(err, net.ErrClosed):
			return nil // the session is closing
		}
		// Its shard-aware port is not used for a while, by any session:
		// it may be closed to the proxy, or an address translation
		// between them change source ports.
		s.p.shards.avoidPort(addr, s.now()+shardPortRetry)
		s.p.metrics.legsFailed.Inc()
		s.log.Info().Err(err).Str("node", addr).Msg("cannot open a connection to a replica's shard; the replica's shard-aware port is not used for a while")
		if u := s.connTo(addr, anyShard); u != nil {
			return u
		}
	}
	u, err := s.openLeg(addr, anyShard)
	if err != nil {
		var dial *dialError
		switch {
		case errors.Is(err, net.ErrClosed):
			return nil // the session is closing
		case errors.As(err, &dial):
			s.p.nodes.failed(addr, s.now())
			if s.p.ringStale != nil {
				s.p.ringStale() // the node may have left the ring
			}
		default:
			// Reached, but it would not take the session (its login,
			// its keyspace) or did not answer: not asked again for
			// each request. Others' sessions may fare better there.
			s.leave(addr, s.now())
		}
		s.p.metrics.legsFailed.Inc()
		s.log.Info().Err(err).Str("node", addr).Msg("cannot open a connection to a replica; the request runs on another")
		return nil
	}
	s.p.nodes.up(addr)
	s.p.metrics.legsOpened.Inc()
	return u
}

// choose picks among the replicas the node to send a request to: the
// reachable one of the best score (replicas.go), and returns it and its
// load; "" when none is reachable.
func (s *session) choose(replicas []string) (string, *nodeLoad) {
	best, bestScore := "", 0.0
	var bestLoad *nodeLoad
	now := s.now()
	for _, addr := range replicas {
		if addr != s.up.at && (s.p.nodes.down(addr, now) || s.left(addr, now)) {
			continue
		}
		l := s.p.loads.of(addr)
		if score := l.score(now); best == "" || score < bestScore {
			best, bestScore, bestLoad = addr, score, l
		}
	}
	return best, bestLoad
}

// openLeg opens a connection of the session to the node at addr, served
// by shard, or by the shard the node gives it for anyShard: it dials,
// logs in as the client did (its STARTUP and AUTH_RESPONSEs again), takes
// the session's keyspace, and starts the connection's response path.
func (s *session) openLeg(addr string, shard int) (*upstream, error) {
	p := s.p
	s.readied = true
	// The session closing gives up on the connection being opened too,
	// rather than wait out its timeouts.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.mu.Lock()
	halted := s.halted
	s.cancelOpen = cancel
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.cancelOpen = nil
		s.mu.Unlock()
	}()
	if halted {
		return nil, net.ErrClosed
	}
	// The requests read before this one do not wait, up to dial_timeout,
	// for the node to be dialled and logged in to.
	s.kickWritten()
	timeout := time.Duration(p.cfg.DialTimeout)
	tlsConf := forUpstream(p.settings.Load().upstreamTLS, addr)
	var u *upstream
	var err error
	if shard == anyShard {
		u, err = dialUpstream(ctx, addr, timeout, tlsConf, &p.reads)
	} else if ns, ok := p.shards.of(addr); ok {
		u, err = dialShard(ctx, addr, ns.Sharding, shard, timeout, tlsConf, &p.reads)
	} else {
		return nil, fmt.Errorf("node %s: its shards are no longer known", addr)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, net.ErrClosed
		}
		if errors.Is(err, errWrongShard) {
			return nil, err
		}
		p.metrics.upstreamDialErr.Inc()
		return nil, &dialError{err}
	}
	p.shards.learn(u.at, u.sharding, u.sharded)
	s.attach(u)
	u.conn.SetDeadline(time.Now().Add(timeout))
	stop := context.AfterFunc(ctx, func() { u.conn.Close() })
	err = s.logIn(u)
	stop()
	if err != nil {
		u.conn.Close()
		u.from.Release()
		u.in.Park()
		u.to.Close()
		if ctx.Err() != nil {
			return nil, net.ErrClosed
		}
		return nil, fmt.Errorf("node %s: %w", addr, err)
	}
	u.conn.SetDeadline(time.Time{})
	u.in.Park()
	s.mu.Lock()
	if s.halted {
		s.mu.Unlock()
		u.conn.Close()
		u.to.Close()
		return nil, net.ErrClosed
	}
	s.legs = append(s.legs, u)
	s.setConns()
	s.running.Add(1)
	s.mu.Unlock()
	go s.serveLeg(u)
	return u, nil
}

// leave has the session route nothing to node for nodeRetry from now.
func (s *session) leave(node string, now int64) {
	for i := range s.unready {
		if s.unready[i].node == node {
			s.unready[i].until = now + nodeRetry
			return
		}
	}
	s.unready = append(s.unready, unreadyNode{node, now + nodeRetry})
}

// left reports whether the session routes nothing to node at now.
func (s *session) left(node string, now int64) bool {
	for _, n := range s.unready {
		if n.node == node {
			return now < n.until
		}
	}
	return false
}

// unreadyNode is a node the session could not open a connection to, and
// until when, in the proxy's nanoseconds, it routes nothing there.
type unreadyNode struct {
	node  string
	until int64
}

// dialError is a failure to reach a node, as opposed to one to log in.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// attach gives u, a new connection of the session, its reader and writer.
func (s *session) attach(u *upstream) {
	p := s.p
	u.from = frame.NewReader(u.in.Reader(), int(p.cfg.MaxFrameBytes))
	u.to = transport.NewWriter(u.conn, int(p.cfg.MaxBufferedBytes), p.buffered)
	u.to.SetStall(s.upstreamStall)
	u.from.SetBudget(frameBudget{s, p.responseFrames, nil, u})
	u.load = p.loads.of(u.addr)
	if p.shedding != nil {
		u.node = p.shedding.node(u.addr)
	}
}

// logIn logs in on u, a new connection, as the client did: its STARTUP,
// then its AUTH_RESPONSEs while the node asks for them. The connection is
// then in the same protocol version and compression as the client's.
func (s *session) logIn(u *upstream) error {
	if len(s.login) == 0 {
		return errors.New("no login to repeat")
	}
	startup := s.login[0]
	h, err := s.exchange(u, startup)
	if err != nil {
		return fmt.Errorf("STARTUP: %w", err)
	}
	if h.Opcode != frame.OpReady && h.Opcode != frame.OpAuthenticate {
		return fmt.Errorf("STARTUP answered with %s", h.Opcode)
	}
	if h.Version >= 5 {
		lz4 := s.reqCompression == frame.CompressionLZ4
		u.to.UseSegments(lz4)
		u.from.UseSegments(lz4)
	}
	for _, auth := range s.login[1:] {
		if h.Opcode == frame.OpReady || h.Opcode == frame.OpAuthSuccess {
			break
		}
		if h, err = s.exchange(u, auth); err != nil {
			return fmt.Errorf("AUTH_RESPONSE: %w", err)
		}
	}
	if h.Opcode != frame.OpReady && h.Opcode != frame.OpAuthSuccess {
		return fmt.Errorf("login answered with %s", h.Opcode)
	}
	if ks := s.keyspace.Load(); ks != nil {
		if h, err = s.exchange(u, frame.AppendQueryRequest(nil, startup[0]&0x7f, 0, useStatement(*ks))); err != nil {
			return fmt.Errorf("USE: %w", err)
		}
		if h.Opcode != frame.OpResult {
			return fmt.Errorf("USE answered with %s", h.Opcode)
		}
		// A copy: ready changes it in place, and the session's keyspace
		// is other connections' too.
		u.keyspace = slices.Clone(*ks)
	}
	return nil
}

// exchange writes f on u, a connection no response path reads yet, and
// returns the header of the node's answer.
func (s *session) exchange(u *upstream, f []byte) (frame.Header, error) {
	if err := u.to.Write(f); err != nil {
		return frame.Header{}, err
	}
	if err := u.to.Push(); err != nil {
		return frame.Header{}, err
	}
	_, h, err := u.from.Next()
	return h, err
}

// useStatement returns the USE statement for keyspace, as a node named it.
func useStatement(keyspace []byte) []byte {
	return []byte("USE \"" + strings.ReplaceAll(string(keyspace), "\"", "\"\"") + "\"")
}

// ready brings u, a connection of the session to another node, to what
// the request req of header h needs there: the session's keyspace, and an
// EXECUTE's statement, or batch, a BATCH's statements, prepared. It
// reports false when u cannot be brought there; the request then goes to
// up.
func (s *session) ready(u *upstream, h frame.Header, req *request, batch []*classify.Prepared) bool {
	if u.dead.Load() {
		return false
	}
	ks := s.keyspace.Load()
	if ks != nil && string(*ks) != string(u.keyspace) {
		s.askScratch = frame.AppendQueryRequest(s.askScratch[:0], h.Version, h.Stream, useStatement(*ks))
		if s.ask(u, s.askScratch, h, nil) != accepted {
			s.leave(u.at, s.now()) // not asked again for each request
			return false
		}
		u.keyspace = append(u.keyspace[:0], *ks...)
	}
	if u.forget.Swap(false) {
		clear(u.prepared)
	}
	switch h.Opcode {
	case frame.OpExecute:
		return s.preparedOn(u, h, req.prepared)
	case frame.OpBatch:
		for _, st := range batch {
			if !s.preparedOn(u, h, st) {
				return false
			}
		}
	}
	return true
}

// preparedOn makes sure the statement st is prepared on u, preparing it
// there on the stream of the request of header h if the session has not,
// and reports whether it is.
func (s *session) preparedOn(u *upstream, h frame.Header, st *classify.Prepared) bool {
	if st == nil || st.ID() == nil {
		return false
	}
	id := st.ID()
	if _, known := u.prepared[string(id)]; known {
		return true
	}
	inKeyspace, ok := keyspaceToPrepare(st, u.keyspace, h.Version)
	if !ok {
		return false
	}
	f := frame.AppendPrepareRequest(s.askScratch[:0], h.Version, h.Stream, st.Text(), inKeyspace)
	s.askScratch = f
	if s.ask(u, f, h, st) != accepted {
		// Not asked again for each request: a node that will not prepare
		// what another did (its schema behind, say) is left alone a while.
		s.leave(u.at, s.now())
		return false
	}
	if u.prepared == nil {
		u.prepared = make(map[string]struct{})
	}
	if len(u.prepared) >= s.p.cfg.MaxPreparedStatements {
		// No more than the proxy knows of: a client preparing ever new
		// statements does not grow the set for ever. One forgotten, at
		// random, is prepared again if executed again.
		for id := range u.prepared {
			delete(u.prepared, id)
			break
		}
	}
	u.prepared[string(id)] = struct{}{}
	return true
}

// ask sends f, a request of the proxy's own, on u on the stream of the
// request of header h, and waits for the node's verdict; for a PREPARE,
// st is the statement, whose id the node must answer with. The answer does
// not reach the client.
func (s *session) ask(u *upstream, f []byte, h frame.Header, st *classify.Prepared) verdict {
	s.readied = true
	if !s.p.inflight.TakeOr(1, &s.stopped, s.pushQuietly) {
		return notAccepted
	}
	s.mu.Lock()
	if u.dead.Load() {
		// Lost while the request path waited for the slot: nobody would
		// answer.
		s.mu.Unlock()
		s.p.inflight.Give(1)
		return notAccepted
	}
	req := request{start: s.now(), version: h.Version, reply: replyAsked, prepared: st}
	s.sentOn(&req, u)
	s.streams.begin(h.Stream, req)
	s.awaiting.Store(true)
	s.mu.Unlock()
	s.wrote(u)
	if err := u.to.Write(f); err != nil {
		u.conn.Close() // its response path ends what is in flight on it
	}
	v := notAccepted
	if err := s.push(); err == nil {
		v = <-s.answered
	}
	// A wait that ended before the answer came (up's response path
	// ended, or writing failed) leaves the request in the stream table:
	// it leaves it here, so that the client's request can take its stream
	// and nothing settles a wait that is over.
	s.mu.Lock()
	r := s.streams.lookup(h.Stream)
	left := r != nil && r.reply == replyAsked
	if left {
		s.endStream(h.Stream)
	}
	s.mu.Unlock()
	if left {
		s.p.inflight.Give(1)
	}
	return v
}

// serveLeg is the response path of u, a connection of the session to
// another node. When it ends, the requests in flight on u are answered
// with an error, and the session goes on without u.
func (s *session) serveLeg(u *upstream) {
	defer s.running.Done()
	err := s.serveResponses(u)
	s.mu.Lock()
	// Under mu, as the request path begins a request on u under mu: a
	// request that found u alive is in the stream table before
	// failInFlight looks.
	u.dead.Store(true)
	s.legs = slices.DeleteFunc(s.legs, func(l *upstream) bool { return l == u })
	s.setConns()
	s.uncount(u)
	s.mu.Unlock()
	switch {
	case err == nil:
		// Draining, and nothing is left in flight: the response path of
		// up ends the session, once what is queued for the client, this
		// last answer too, is written.
		s.up.conn.Close()
	case errors.Is(err, errClientGone):
		s.clientGone.Store(true)
		s.close()
	case !s.clientGone.Load():
		s.logEnd("upstream", err)
		if !errors.Is(err, net.ErrClosed) || u.stalled.Load() {
			// The node closed a connection the proxy did not ask it to:
			// other sessions avoid it for a while, rather than each find
			// out for itself.
			s.p.nodes.failed(u.at, s.now())
		}
		s.failInFlight(err, u, u)
		defer func() {
			// The answers failInFlight queued go now: no other path may
			// write to the client for a while. A failure to is the
			// client's, which the other paths see.
			s.toClient.Push()
		}()
	}
	u.conn.Close()
	u.to.Close()
	u.from.Release()
}

// nodes are the nodes the proxy found it could not reach, which routing
// avoids for a while. The map is replaced, never changed: every routed
// request of every session asks it of each replica, during an outage too,
// so asking takes no lock.
type nodes struct {
	until atomic.Pointer[map[string]int64] // node -> until when, in the proxy's nanoseconds; nil: none
	mu    sync.Mutex                       // serializes replacing until
}

// nodeRetry is how long a node the proxy could not reach is avoided.
const nodeRetry = int64(2 * time.Second)

// set replaces the map with a copy whose node is avoided until until, or,
// with until 0, not at all. n.mu is held.
func (n *nodes) set(node string, until int64) {
	old := n.until.Load()
	m := map[string]int64{}
	if old != nil {
		maps.Copy(m, *old)
	}
	if until == 0 {
		delete(m, node)
	} else {
		m[node] = until
	}
	if len(m) == 0 {
		n.until.Store(nil)
		return
	}
	n.until.Store(&m)
}

// failed notes that node could not be reached at now.
func (n *nodes) failed(node string, now int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.set(node, now+nodeRetry)
}

// down reports whether node is avoided at now.
func (n *nodes) down(node string, now int64) bool {
	m := n.until.Load()
	if m == nil {
		return false
	}
	until, ok := (*m)[node]
	return ok && now < until
}

// claim reports whether a session may dial node at now: yes for a node
// not avoided, and for a node avoided until before now, for one session,
// which has for dials to find out whether it is back; the others avoid it
// meanwhile, so that a node that does not answer holds up one session's
// requests, not every session's.
func (n *nodes) claim(node string, now, dial int64) bool {
	if m := n.until.Load(); m == nil {
		return true
	} else if _, ok := (*m)[node]; !ok {
		return true
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	m := n.until.Load()
	if m == nil {
		return true
	}
	until, ok := (*m)[node]
	switch {
	case !ok:
		return true
	case now < until:
		return false
	}
	n.set(node, now+dial)
	return true
}

// up notes that node could be reached.
func (n *nodes) up(node string) {
	if m := n.until.Load(); m == nil {
		return
	} else if _, ok := (*m)[node]; !ok {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.set(node, 0)
}
