package proxy

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cqlguard/cqlguard/ratelimit"
)

// limiterCollector exports the limiter's table statistics at scrape time:
// reading them visits every entry, which the request path must not pay for.
type limiterCollector struct {
	p                                           *Proxy
	capacity, entries                           *prometheus.Desc
	allocations, evictions, failed, decisionsBy *prometheus.Desc

	// retired holds the counters of limiters a reload replaced, so that
	// the totals never go back: an alert on a rate of rejections must not
	// see a reset that is not one.
	mu      sync.Mutex
	retired ratelimit.Stats
}

// retire adds the counters of lim, which a reload replaced, to the totals.
func (c *limiterCollector) retire(lim *ratelimit.Limiter) {
	if lim == nil {
		return
	}
	st := lim.Stats()
	c.mu.Lock()
	c.retired.Allocations += st.Allocations
	c.retired.Evictions += st.Evictions
	c.retired.FailedAllocations += st.FailedAllocations
	c.retired.Accepted += st.Accepted
	c.retired.Rejected += st.Rejected
	c.mu.Unlock()
}

func newLimiterCollector(p *Proxy) *limiterCollector {
	return &limiterCollector{
		p: p,
		capacity: prometheus.NewDesc("cqlguard_rate_limiter_capacity_entries",
			"Partition counters the limiter's fixed tables hold.", nil, nil),
		entries: prometheus.NewDesc("cqlguard_rate_limiter_entries",
			"Partition counters in use now: occupancy is this over the capacity.", nil, nil),
		allocations: prometheus.NewDesc("cqlguard_rate_limiter_allocations_total",
			"Counters taken for a partition not in the table.", nil, nil),
		evictions: prometheus.NewDesc("cqlguard_rate_limiter_evictions_total",
			"Allocations that reused the expired counter of another partition.", nil, nil),
		failed: prometheus.NewDesc("cqlguard_rate_limiter_failed_allocations_total",
			"Operations admitted uncounted because no counter was free on their probe sequence (fail open).", nil, nil),
		decisionsBy: prometheus.NewDesc("cqlguard_rate_limiter_decisions_total",
			"Counted operations, by decision, over every limiter a reload put in place.", []string{"decision"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *limiterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.capacity, c.entries, c.allocations, c.evictions, c.failed, c.decisionsBy} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *limiterCollector) Collect(ch chan<- prometheus.Metric) {
	set := c.p.settings.Load()
	if set == nil {
		return
	}
	st := set.limiter.Stats()
	c.mu.Lock()
	r := c.retired
	c.mu.Unlock()
	st.Allocations += r.Allocations
	st.Evictions += r.Evictions
	st.FailedAllocations += r.FailedAllocations
	st.Accepted += r.Accepted
	st.Rejected += r.Rejected
	ch <- prometheus.MustNewConstMetric(c.capacity, prometheus.GaugeValue, float64(st.Capacity))
	ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(st.Entries))
	ch <- prometheus.MustNewConstMetric(c.allocations, prometheus.CounterValue, float64(st.Allocations))
	ch <- prometheus.MustNewConstMetric(c.evictions, prometheus.CounterValue, float64(st.Evictions))
	ch <- prometheus.MustNewConstMetric(c.failed, prometheus.CounterValue, float64(st.FailedAllocations))
	ch <- prometheus.MustNewConstMetric(c.decisionsBy, prometheus.CounterValue, float64(st.Accepted), "accepted")
	ch <- prometheus.MustNewConstMetric(c.decisionsBy, prometheus.CounterValue, float64(st.Rejected), "rejected")
}
