package proxy

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cqlguard/cqlguard/ratelimit"
	"github.com/cqlguard/cqlguard/schema"
)

// hotKeyBytes is how much of a partition key /hot keeps.
const hotKeyBytes = 64

// HotPartition is one entry of /hot.
type HotPartition struct {
	Keyspace string `json:"keyspace"`
	Table    string `json:"table"`
	Op       string `json:"op"`
	Token    int64  `json:"token"`
	// Key is the partition key as CQL would print a single-column key of
	// a text or integer type, else as a blob literal (0x...) of its
	// serialized bytes; KeyTruncated says only its start was kept. Keys
	// are user data: they are left out unless admin.show_keys is set.
	Key          string `json:"key,omitempty"`
	KeyTruncated bool   `json:"key_truncated,omitempty"`
	// Rate is operations per second, decayed with a 2 s half-life; the
	// true rate is at least Rate - RateError.
	Rate      float64 `json:"rate"`
	RateError float64 `json:"rate_error"`
	// Limit is the partition's limit for Op now, 0 when unlimited.
	Limit uint32 `json:"limit"`
	// Class is the client class (clients) of the partition's last
	// operation.
	Class string `json:"class,omitempty"`
	// Served says how the partition's reads are served now (hot_reads):
	// "cache" (from the cache, else coalesced), "coalesce", or empty when
	// each is forwarded.
	Served string `json:"served,omitempty"`
}

// Hot returns the busiest partitions now, busiest first; nil when
// admin.hot_partitions is 0. Partitions of tables the schema no longer
// holds are left out.
func (p *Proxy) Hot() []HotPartition {
	if p.hot == nil {
		return nil
	}
	top := p.hot.Top(nil)
	// Labels are hashes of table names: map them back through the
	// schema, which is as cheap as it gets off the request path.
	tables := map[ratelimit.Label]*schema.Table{}
	for _, t := range p.schema.Current().Tables() {
		tables[labelOf(t, OpRead)] = t
		tables[labelOf(t, OpWrite)] = t
	}
	set := p.settings.Load()
	l, hotTables, classes := set.limits, set.hotReads, set.clients
	out := make([]HotPartition, 0, len(top))
	for _, e := range top {
		t := tables[e.Label]
		if t == nil {
			continue
		}
		op := OpRead
		if e.Label&1 == 1 {
			op = OpWrite
		}
		reads, writes := l.forTable(t)
		limit := reads
		if op == OpWrite {
			limit = writes
		}
		h := HotPartition{
			Keyspace: t.Keyspace, Table: t.Name, Op: op.String(), Token: e.Token,
			Rate: e.Rate, RateError: e.Error, Limit: limit, Class: classes.className(e.Tag),
		}
		if ht := hotTables.table(t); ht != nil && op == OpRead && e.Rate >= ht.rate {
			h.Served = "coalesce"
			if ht.ttl > 0 {
				h.Served = "cache"
			}
		}
		if p.cfg.Admin.ShowKeys {
			h.Key, h.KeyTruncated = formatKey(t, e.Key, e.Truncated), e.Truncated
		}
		out = append(out, h)
	}
	return out
}

// serveHot answers /hot with Hot as JSON; ?n= keeps the first n.
func (p *Proxy) serveHot(w http.ResponseWriter, r *http.Request) {
	if p.hot == nil {
		http.Error(w, "hot partition tracking is off (admin.hot_partitions: 0)", http.StatusNotFound)
		return
	}
	hot := p.Hot()
	if s := r.URL.Query().Get("n"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			http.Error(w, "n: want a count", http.StatusBadRequest)
			return
		}
		hot = hot[:min(n, len(hot))]
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(hot)
}

// formatKey renders a partition key for people: a single text or integer
// column as its value, anything else as the blob literal of its bytes.
func formatKey(t *schema.Table, key []byte, truncated bool) string {
	if len(t.PartitionKey) == 1 && !truncated {
		switch t.PartitionKey[0].Type.Kind {
		case schema.Text, schema.Ascii:
			if utf8.Valid(key) {
				return strconv.Quote(string(key))
			}
		case schema.Int:
			if len(key) == 4 {
				return strconv.FormatInt(int64(int32(binary.BigEndian.Uint32(key))), 10)
			}
		case schema.Bigint:
			if len(key) == 8 {
				return strconv.FormatInt(int64(binary.BigEndian.Uint64(key)), 10)
			}
		}
	}
	return "0x" + hex.EncodeToString(key)
}

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
