package proxy

// Choosing among a partition's replicas, after C3 (Suresh et al., NSDI
// 2015): each node is ranked by what the proxy has seen of it, its
// requests in flight from every session and its recent latency, with the
// queue term cubed so that a replica with a longer queue is avoided
// sharply, and a slow replica gets less traffic until it recovers. C3
// also has servers report their queue and service time; Cassandra reports
// neither, so the service time is estimated as the node's recent best
// latency.

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// nodeLoad is what the proxy knows of one node's load, shared by every
// session's connections to it.
type nodeLoad struct {
	addr     string
	inflight atomic.Int64
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
// answers. Concurrent calls may lose one another's update, which a mean
// of many answers does not mind.
func (n *nodeLoad) observe(d, now int64) {
	n.seen.Store(now)
	if d <= 0 {
		d = 1
	}
	l := n.latency.Load()
	if l == 0 {
		n.latency.Store(d)
		n.service.Store(d)
		return
	}
	n.latency.Store(l + (d-l)/latencyWeight)
	s := n.service.Load()
	if d < s {
		n.service.Store(d)
	} else {
		// A best that is not seen again fades towards what is.
		n.service.Store(s + (d-s)/serviceWeight)
	}
}

// The weights of one answer in a node's mean latency (1/latencyWeight)
// and in its service time when it is not a new best (1/serviceWeight):
// the mean follows a change within tens of answers, the best fades
// within hundreds.
const (
	latencyWeight = 16
	serviceWeight = 256
)

// score ranks the node as C3 does, lower being better: its latency
// beyond its service time, plus its service time for each request queued
// before one more, cubed. A node that has not answered yet scores by its
// queue alone, so that it is tried. A node that has not answered for
// staleAfter, which routing may have avoided since it slowed, is scored
// as if its latency were its service time: how slow it was is no longer
// known, and it is tried again.
func (n *nodeLoad) score(now int64) float64 {
	q := 1 + float64(n.inflight.Load())
	l, s := float64(n.latency.Load()), float64(n.service.Load())
	switch {
	case s == 0:
		return q * q * q
	case now-n.seen.Load() > staleAfter:
		return q * q * q * s
	}
	return math.Max(l-s, 0) + q*q*q*s
}

// staleAfter is how long after its last answer a node's latency is
// forgotten.
const staleAfter = int64(500 * time.Millisecond)

// nodeLoads are the loads of the nodes the proxy sent requests to, by
// address.
type nodeLoads struct {
	mu sync.RWMutex
	m  map[string]*nodeLoad
}

// of returns the load of the node at addr, made on first use.
func (n *nodeLoads) of(addr string) *nodeLoad {
	n.mu.RLock()
	l := n.m[addr]
	n.mu.RUnlock()
	if l != nil {
		return l
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if l = n.m[addr]; l == nil {
		if n.m == nil {
			n.m = make(map[string]*nodeLoad)
		}
		l = &nodeLoad{addr: addr}
		n.m[addr] = l
	}
	return l
}
