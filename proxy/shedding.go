package proxy

// Shedding (shedding in the configuration): each upstream node's latency
// ratio and the proxy's queue feed a controller per node, which sheds the
// least important client tiers first when the node slows. A shed request
// is answered at once and never reaches the node.

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/shed"
)

// tierIdle is how long a tier counts as in use after its last request:
// the controllers shed only the tiers in use, so that a class no
// connection has (say, the default one) does not stand between the
// pressure and the tiers that carry the load.
const tierIdle = 10 * time.Second

// traceTicks is how many of its last updates each node's controller keeps
// for /shed/trace: two minutes at the default update_every, in about
// 48 KiB a node.
const traceTicks = 1200

// shedding holds the signals and controllers; nil when shedding is off.
type shedding struct {
	cfg   config.SheddingConfig
	queue *shed.Queue
	// classTiers are the tiers of the configuration's classes: their
	// fractions are shown even while no request has them.
	classTiers []int
	// seen has bit t set once tier t sent a request since the last
	// update: set by the request paths, taken by the update.
	seen atomic.Uint32

	mu       sync.Mutex
	tiers    []int                   // the tiers in use, for the controllers
	lastSeen [shed.MaxTier + 1]int64 // when each tier last sent a request
	nodes    map[string]*nodeSignals

	ratio, short, pressure *prometheus.GaugeVec
	fraction               *prometheus.GaugeVec
	standing               prometheus.Gauge
	shedTotal              *prometheus.CounterVec
	// shedByTier and dryByTier are shedTotal's series by tier, resolved
	// once: a node under pressure may shed most requests.
	shedByTier, dryByTier [shed.MaxTier + 1]prometheus.Counter
	// pricedByTier and dryPricedByTier count the requests priced up
	// instead (max_price).
	pricedByTier, dryPricedByTier [shed.MaxTier + 1]prometheus.Counter
}

// nodeSignals are one upstream node's latencies and controller.
//
// Latency is tracked per client tier, each tier's against its own usual:
// a batch class whose scans take ten times a point read must not look like
// the node slowing down when it joins. The node's reading is its slowest
// tier's (shed.Controller.Slower).
type nodeSignals struct {
	addr    string
	cfg     shed.LatencyConfig
	latency [shed.MaxTier + 1]atomic.Pointer[shed.Latency] // made on a tier's first answer
	ctl     *shed.Controller
}

// observe records the latency of an answer to a request of tier.
func (n *nodeSignals) observe(tier int, now, latency int64) {
	t := min(max(tier, 0), shed.MaxTier)
	l := n.latency[t].Load()
	if l == nil {
		// The configuration was checked: this does not fail. Once per
		// tier and node; a racing maker's is dropped.
		made, _ := shed.NewLatency(n.cfg)
		if !n.latency[t].CompareAndSwap(nil, made) {
			made = n.latency[t].Load()
		}
		l = made
	}
	l.Observe(now, latency)
}

// reading returns the node's latency reading at now: its slowest tier's,
// trusted if any tier's is.
func (n *nodeSignals) reading(now int64) shed.Reading {
	slowest := shed.Reading{Ratio: 1}
	for t := range n.latency {
		if l := n.latency[t].Load(); l != nil {
			if r := l.Read(now); r.OK && n.ctl.Slower(r, slowest) {
				slowest = r
			}
		}
	}
	return slowest
}

func newShedding(cfg config.SheddingConfig, clients config.ClientsConfig, reg prometheus.Registerer) (*shedding, error) {
	if !cfg.Enabled {
		return nil, nil
	}
	q, err := shed.NewQueue(cfg.Queue())
	if err != nil {
		return nil, fmt.Errorf("shedding: %w", err)
	}
	sh := &shedding{
		cfg: cfg, queue: q, nodes: map[string]*nodeSignals{},
		ratio: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cqlguard_shed_latency_ratio",
			Help: "Each upstream node's long-term latency quantile over its short-term one, of its slowest client tier (each tier against its own usual): about 1 when healthy, falling as the node slows (shedding).",
		}, []string{"node"}),
		short: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cqlguard_shed_latency_short_seconds",
			Help: "Each upstream node's short-term latency quantile, of the tier whose ratio cqlguard_shed_latency_ratio is: under shedding.latency_floor, the node is not slow whatever its ratio.",
		}, []string{"node"}),
		pressure: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cqlguard_shed_pressure_tiers",
			Help: "How many tiers' worth of requests to each node are being shed.",
		}, []string{"node"}),
		fraction: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cqlguard_shed_fraction",
			Help: "The fraction of each tier's requests to each node being shed, 0 to 1.",
		}, []string{"node", "tier"}),
		standing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cqlguard_shed_queue_standing_seconds",
			Help: "The shortest wait for max_in_flight over the last queue interval: a standing queue when over queue_target.",
		}),
		shedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cqlguard_shed_requests_total",
			Help: "Requests shed, by tier and outcome: shed (answered with shedding.error), priced (forwarded at a higher price in request units, shedding.max_price), or dry_run and dry_run_priced (let through as they were).",
		}, []string{"tier", "outcome"}),
	}
	for tier := range sh.shedByTier {
		sh.shedByTier[tier] = sh.shedTotal.WithLabelValues(strconv.Itoa(tier), "shed")
		sh.dryByTier[tier] = sh.shedTotal.WithLabelValues(strconv.Itoa(tier), "dry_run")
		sh.pricedByTier[tier] = sh.shedTotal.WithLabelValues(strconv.Itoa(tier), "priced")
		sh.dryPricedByTier[tier] = sh.shedTotal.WithLabelValues(strconv.Itoa(tier), "dry_run_priced")
	}
	// Until the traffic says otherwise, every class's tier is in use.
	sh.classTiers = tiersOf(clients)
	sh.tiers = sh.classTiers
	if _, err := shed.NewController(cfg.Controller(sh.tiers)); err != nil {
		return nil, fmt.Errorf("shedding: %w", err)
	}
	reg.MustRegister(sh.ratio, sh.short, sh.pressure, sh.fraction, sh.standing, sh.shedTotal)
	return sh, nil
}

// tiersOf returns the tiers the classes use.
func tiersOf(c config.ClientsConfig) []int {
	tiers := []int{c.Default.TierOrDefault()}
	for _, cl := range c.Classes {
		tiers = append(tiers, cl.TierOrDefault())
	}
	slices.Sort(tiers)
	return slices.Compact(tiers)
}

// node returns the signals of the node at addr, made on first use.
func (sh *shedding) node(addr string) *nodeSignals {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if n := sh.nodes[addr]; n != nil {
		return n
	}
	// The configuration was checked: this does not fail.
	cfg := sh.cfg.Controller(sh.tiers)
	cfg.Trace = traceTicks
	ctl, _ := shed.NewController(cfg)
	n := &nodeSignals{addr: addr, cfg: sh.cfg.Latency(), ctl: ctl}
	sh.nodes[addr] = n
	return n
}

// update moves every node's shedding on from its signals, every
// update_every until stop is closed.
func (p *Proxy) updateShedding(stop <-chan struct{}) {
	sh := p.shedding
	t := time.NewTicker(time.Duration(sh.cfg.UpdateEvery))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		now := p.elapsed()
		standing, over := sh.queue.Standing(now)
		sh.standing.Set(standing.Seconds())
		sh.mu.Lock()
		changed := sh.useTiers(now)
		for _, n := range sh.nodes {
			if changed {
				n.ctl.SetTiers(sh.tiers)
			}
			r := n.reading(now)
			n.ctl.Update(now, r, over)
			if r.OK {
				sh.ratio.WithLabelValues(n.addr).Set(r.Ratio)
				sh.short.WithLabelValues(n.addr).Set(r.Short.Seconds())
			}
			sh.pressure.WithLabelValues(n.addr).Set(n.ctl.Pressure())
			for tier := range shed.MaxTier + 1 {
				if slices.Contains(sh.classTiers, tier) || slices.Contains(sh.tiers, tier) {
					sh.fraction.WithLabelValues(n.addr, strconv.Itoa(tier)).Set(n.ctl.Fraction(tier))
				}
			}
		}
		sh.mu.Unlock()
	}
}

// useTiers moves the tiers in use on to those that sent a request in the
// last tierIdle, once any did, and reports whether they changed. sh.mu is
// held.
func (sh *shedding) useTiers(now int64) bool {
	seen := sh.seen.Swap(0)
	for t := range sh.lastSeen {
		if seen&(1<<t) != 0 {
			sh.lastSeen[t] = now
		}
	}
	var tiers []int
	for t, at := range sh.lastSeen {
		if at != 0 && now-at <= int64(tierIdle) {
			tiers = append(tiers, t)
		}
	}
	if len(tiers) == 0 || slices.Equal(tiers, sh.tiers) {
		return false
	}
	sh.tiers = tiers
	return true
}

// draw returns a pseudo-random number uniform in [0, 1), from the
// session's own xorshift state.
func (s *session) draw() float64 {
	x := s.rng
	if x == 0 {
		x = 0x9e3779b97f4a7c15
	}
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	s.rng = x
	return float64(x>>11) * 0x1p-53
}
