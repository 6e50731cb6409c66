package proxy

// Choosing among a partition's replicas, after C3 (Suresh et al., NSDI
// 2015): each node is ranked by what the proxy has seen of it, its
// requests in flight from every session and its recent latency, so that a
// slow replica gets less traffic until it recovers. The latency is
// peak-sensitive (a slow answer counts at once, and is forgotten over
// time), and a node that has stopped answering with requests waiting is
// the last choice before its latency shows it. C3 also has servers report
// their queue and service time; Cassandra reports neither, so the service
// time is estimated as the node's recent best latency.

import (
	"maps"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// nodeLoad is what the proxy knows of one node's load, shared by every
// session's connections to it.
type nodeLoad struct {
	addr     string
	inflight atomic.Int64
	sent     atomic.Uint64 // requests sent to it
	// latency is the mean of its recent answers' latencies and service
	// an estimate of its service time, the recent best of them, both in
	// nanoseconds, 0 until it has answered.
	latency atomic.Int64
	service atomic.Int64
	// seen is when it last answered, in the proxy's nanoseconds.
	seen atomic.Int64
	// shed is the node's shedding signals, found on first use.
	shed atomic.Pointer[nodeSignals]
}

// signals returns the node's shedding signals in sh.
func (n *nodeLoad) signals(sh *shedding) *nodeSignals {
	if s := n.shed.Load(); s != nil {
		return s
	}
	s := sh.node(n.addr)
	n.shed.Store(s)
	return s
}

// observe takes in the latency d, in nanoseconds, of one of the node's
// answers, at now. The node's latency is a peak-sensitive mean: a slower
// answer sets it at once, and it falls back towards faster ones over
// latencyDecay of time, however many answers come meanwhile, so that a
// node that stalls now and then (a pause every few hundred milliseconds)
// stays slow to routing between its stalls, which a mean over answers
// would forget within a few of them. Concurrent calls may lose one
// another's update, which a mean does not mind.
func (n *nodeLoad) observe(d, now int64) {
	if d <= 0 {
		d = 1
	}
	last := n.seen.Swap(now)
	l := n.latency.Load()
	switch {
	case l == 0:
		n.latency.Store(d)
		n.service.Store(d)
		return
	case d >= l:
		n.latency.Store(d)
	default:
		w := decay(float64(now-last) / float64(latencyDecay))
		n.latency.Store(int64(float64(l)*w + float64(d)*(1-w)))
	}
	s := n.service.Load()
	if d < s {
		n.service.Store(d)
	} else {
		// A best that is not seen again fades towards what is.
		n.service.Store(s + (d-s)/serviceWeight)
	}
}

// decay returns e^-x for x ≥ 0. Answers from a busy node come
// microseconds apart, where x is tiny and three terms of the series are
// within 1e-7 of it at a tenth of math.Exp's cost, paid per answer.
func decay(x float64) float64 {
	if x < 1.0/128 {
		return 1 - x*(1-x/2)
	}
	return math.Exp(-x)
}

// latencyDecay is how long a node's latency takes to fall by a factor e
// back towards its answers after a slower one, and serviceWeight the
// weight of one answer in its service time when it is not a new best
// (1/serviceWeight): the best fades within hundreds of answers.
const (
	latencyDecay  = 300 * time.Millisecond
	serviceWeight = 256
)

// score ranks the node, lower being better: what a request sent there now
// may expect to wait, its latency times one more than its requests in
// flight. C3 cubes the queue term instead; measured with a replica that
// pauses 50 ms in every 250 (TestRoutedTail), the cube made a node with a
// few requests in flight look worse than one 25 ms slow, and the pausing
// replica kept a tenth of the reads. A node that has not answered yet
// scores by its queue alone, so that it is tried. A node that has not
// answered for staleAfter, which routing may have avoided since it
// slowed, is scored by its service time: how slow it was is no longer
// known, and it is tried again.
func (n *nodeLoad) score(now int64) float64 {
	inflight := n.inflight.Load()
	q := 1 + float64(inflight)
	l, s := float64(n.latency.Load()), float64(n.service.Load())
	quiet := now - n.seen.Load()
	switch {
	case s == 0:
		return q
	case inflight > 0 && quiet > max(stallFactor*int64(l), minStall):
		// Requests wait on it and it has answered none for many times
		// its usual latency: it has stopped (a pause, a stall), which
		// its latency shows only once they come back. Last choice, the
		// longest quiet last.
		return stalled + float64(quiet)
	case quiet > staleAfter:
		return q * s
	}
	return q * l
}

// A node with requests in flight that has answered nothing for
// stallFactor times its mean latency, and at least minStall, is taken for
// stalled: its score is stalled and more.
const (
	stallFactor = 8
	minStall    = int64(2 * time.Millisecond)
	stalled     = 1e15
)

// staleAfter is how long after its last answer a node's latency is
// forgotten.
const staleAfter = int64(500 * time.Millisecond)

// nodeLoads are the loads of the nodes the proxy sent requests to, by
// address.
// The map is replaced, never changed: routing looks nodes up on every
// request from every session, and a new node is rare, so a lookup takes no
// lock and writes nothing others read.
type nodeLoads struct {
	m  atomic.Pointer[map[string]*nodeLoad]
	mu sync.Mutex // serializes replacing m
}

// of returns the load of the node at addr, made on first use.
func (n *nodeLoads) of(addr string) *nodeLoad {
	if m := n.m.Load(); m != nil {
		if l := (*m)[addr]; l != nil {
			return l
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	old := n.m.Load()
	if old != nil {
		if l := (*old)[addr]; l != nil {
			return l
		}
	}
	m := make(map[string]*nodeLoad, 1)
	if old != nil {
		maps.Copy(m, *old)
	}
	l := &nodeLoad{addr: addr}
	m[addr] = l
	n.m.Store(&m)
	return l
}

// loadCollector exports what routing knows of each node it sent requests
// to, read from the nodes' loads at each scrape: the request path pays no
// metric of its own for them.
type loadCollector struct{ loads *nodeLoads }

var (
	nodeRequestsDesc = prometheus.NewDesc("cqlguard_node_requests_total",
		"Requests sent to each node by sessions that route, to their connections' first nodes too, with what routing asks a node before a request runs there (PREPARE, USE).", []string{"node"}, nil)
	nodeInFlightDesc = prometheus.NewDesc("cqlguard_node_requests_in_flight",
		"Requests in flight on each node that routing counts, over every session: those of clients that are not reading are left out.", []string{"node"}, nil)
	nodeLatencyDesc = prometheus.NewDesc("cqlguard_node_latency_seconds",
		"Each node's latency as routing ranks replicas by it: a slow answer counts at once and is forgotten over 300 ms.", []string{"node"}, nil)
)

// Describe implements prometheus.Collector.
func (c loadCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- nodeRequestsDesc
	ch <- nodeInFlightDesc
	ch <- nodeLatencyDesc
}

// Collect implements prometheus.Collector.
func (c loadCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.loads.m.Load()
	if m == nil {
		return
	}
	for addr, l := range *m {
		ch <- prometheus.MustNewConstMetric(nodeRequestsDesc, prometheus.CounterValue, float64(l.sent.Load()), addr)
		ch <- prometheus.MustNewConstMetric(nodeInFlightDesc, prometheus.GaugeValue, float64(l.inflight.Load()), addr)
		ch <- prometheus.MustNewConstMetric(nodeLatencyDesc, prometheus.GaugeValue, time.Duration(l.latency.Load()).Seconds(), addr)
	}
}
