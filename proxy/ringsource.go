package proxy

// The cluster's ring, as routing reads it: kept fresh by reading the
// upstreams' system tables, with the schema's connection (schemasource.go),
// every routing.refresh and as the cluster's events say (ringevents.go).

import (
	"context"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/ring"
	ringloader "github.com/cqlguard/cqlguard/ring/loader"
)

// ringView is a ring with what Replicas hands out made once: each node's
// address as text, and whether it is in the local datacenter.
type ringView struct {
	r     *ring.Ring
	addrs []string
	local []bool
}

// newRingView makes the view of r whose local datacenter is local, or,
// when local is empty, that of the first of r's nodes at one of the
// upstreams' addresses.
func newRingView(r *ring.Ring, local string, upstreams []string) *ringView {
	nodes := r.Nodes()
	v := &ringView{r: r, addrs: make([]string, len(nodes)), local: make([]bool, len(nodes))}
	for i, n := range nodes {
		v.addrs[i] = n.Addr.String()
	}
	if local == "" {
		for i, n := range nodes {
			if slices.Contains(upstreams, v.addrs[i]) {
				local = n.Datacenter
				break
			}
		}
	}
	for i, n := range nodes {
		v.local[i] = local == "" || n.Datacenter == local
	}
	return v
}

// resolved returns addrs, host:port each, with each host that is a name
// replaced by its addresses, as a ring names its nodes.
func resolved(addrs []string) []string {
	var out []string
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			continue
		}
		ips, err := net.LookupHost(host)
		if err != nil {
			continue
		}
		for _, ip := range ips {
			out = append(out, net.JoinHostPort(ip, port))
		}
	}
	return out
}

// replicas appends to dst the addresses of the replicas of token t of
// keyspace in the local datacenter, or, when it has none, everywhere.
func (v *ringView) replicas(dst []string, keyspace string, t int64) []string {
	idx := v.r.Replicas(keyspace, t)
	n := len(dst)
	for _, i := range idx {
		if v.local[i] {
			dst = append(dst, v.addrs[i])
		}
	}
	if len(dst) == n {
		for _, i := range idx {
			dst = append(dst, v.addrs[i])
		}
	}
	return dst
}

// upstreamRing is the cluster's ring, read again every refresh and soon
// after Stale is called. Until it has been read once, it knows no
// keyspace, and nothing is routed.
type upstreamRing struct {
	load      func(context.Context) (*ring.Ring, error)
	local     string
	upstreams []string
	refresh   time.Duration
	log       zerolog.Logger
	nodes     prometheus.Gauge // how many nodes the ring has
	cur       atomic.Pointer[ringView]
	stale     chan struct{}
	failing   bool // the last read failed; run's only
}

// Replicas implements Ring.
func (u *upstreamRing) Replicas(dst []string, keyspace string, t int64) []string {
	v := u.cur.Load()
	if v == nil {
		return dst
	}
	return v.replicas(dst, keyspace, t)
}

// Stale asks for the ring to be read again soon, without waiting.
func (u *upstreamRing) Stale() {
	select {
	case u.stale <- struct{}{}:
	default:
	}
}

// ringRetry is how soon a ring that failed to load is read again.
const ringRetry = time.Second

// run reads the ring until ctx ends. A ring read with parts left out is
// used; one not read at all leaves the last one in place.
func (u *upstreamRing) run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-u.stale:
		}
		next := u.refresh
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		r, err := u.load(lctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case r == nil:
			// Said once until it is read again; tried again soon.
			ev := u.log.Debug()
			if !u.failing {
				ev = u.log.Warn()
			}
			u.failing = true
			ev.Err(err).Msg("cannot read the cluster's ring; requests run on their connections' nodes until it is read")
			next = min(ringRetry, u.refresh)
		default:
			first := u.cur.Load() == nil || u.failing
			u.failing = false
			u.cur.Store(newRingView(r, u.local, resolved(u.upstreams)))
			u.nodes.Set(float64(len(r.Nodes())))
			if first {
				u.log.Info().Int("nodes", len(r.Nodes())).Int("tokens", r.Tokens()).Msg("cluster ring read; routing requests to replicas")
			}
			if err != nil {
				// A ring that leaves out what it could not read (a peer's
				// row, a keyspace's strategy): those run unrouted.
				u.log.Debug().Err(err).Msg("the cluster's ring leaves some out")
			}
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(next)
	}
}

// startRing starts reading the ring with src's session, for routing, and
// returns what stops it and then calls then.
func (p *Proxy) startRing(src *upstreamSchema, then func()) func() {
	u := &upstreamRing{
		load: func(ctx context.Context) (r *ring.Ring, err error) {
			var partial error
			err = src.withSession(ctx, func(s *gocql.Session) error {
				// Only a ring not read at all gives up on the session.
				if r, partial = ringloader.New(s).Load(ctx); r == nil {
					return partial
				}
				return nil
			})
			if err == nil {
				err = partial
			}
			return r, err
		},
		local:     p.cfg.Routing.LocalDatacenter,
		upstreams: p.cfg.Upstreams,
		refresh:   time.Duration(p.cfg.Routing.Refresh),
		log:       p.log.With().Str("component", "ring").Logger(),
		nodes:     p.metrics.ringNodes,
		stale:     make(chan struct{}, 1),
	}
	p.ring, p.ringStale = u, u.Stale
	c := src.cfg
	events := &ringEvents{
		addrs: c.Upstreams, username: c.Username, password: c.Password, tls: c.TLS, timeout: c.Timeout,
		stale:     u.Stale,
		up:        p.nodes.up,
		down:      func(node string) { p.nodes.failed(node, p.elapsed()) },
		heartbeat: eventsHeartbeat,
		retry:     ringRetry,
		log:       u.log,
	}
	ctx, cancel := context.WithCancel(context.Background())
	var running sync.WaitGroup
	running.Go(func() { u.run(ctx) })
	running.Go(func() { events.run(ctx) })
	return func() {
		cancel()
		running.Wait()
		then()
	}
}
