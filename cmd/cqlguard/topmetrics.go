package main

// What cqlguard top reads of /metrics: the text format, through expfmt
// (OpenMetrics and protobuf are not asked for), of which the four metrics
// named below are kept; and the rates of the counters between two
// readings.

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metricsSample is what top shows of one reading of /metrics.
type metricsSample struct {
	connections, inFlight float64
	// upstream counts requests answered upstream, when the histogram of
	// their durations is there.
	upstream     float64
	haveUpstream bool
	rejections   map[rejectionKey]float64
}

// rejectionKey is the labels of cqlguard_rate_limit_rejections_total.
type rejectionKey struct{ keyspace, table, op, outcome string }

// Metric names top reads.
const (
	metricConnections = "cqlguard_client_connections"
	metricInFlight    = "cqlguard_requests_in_flight"
	metricUpstream    = "cqlguard_upstream_request_duration_seconds"
	metricRejections  = "cqlguard_rate_limit_rejections_total"
)

// parseMetrics reads the Prometheus text format.
func parseMetrics(r io.Reader) (*metricsSample, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("/metrics: %w", err)
	}
	m := &metricsSample{rejections: map[rejectionKey]float64{}}
	one := func(name string) *dto.Metric {
		if f := families[name]; f != nil && len(f.GetMetric()) > 0 {
			return f.GetMetric()[0]
		}
		return nil
	}
	m.connections = one(metricConnections).GetGauge().GetValue()
	m.inFlight = one(metricInFlight).GetGauge().GetValue()
	if h := one(metricUpstream).GetHistogram(); h != nil {
		m.upstream, m.haveUpstream = float64(h.GetSampleCount()), true
	}
	for _, metric := range families[metricRejections].GetMetric() {
		var k rejectionKey
		for _, l := range metric.GetLabel() {
			v := l.GetValue()
			switch l.GetName() {
			case "keyspace":
				k.keyspace = v
			case "table":
				k.table = v
			case "op":
				k.op = v
			case "outcome":
				k.outcome = v
			}
		}
		m.rejections[k] += metric.GetCounter().GetValue()
	}
	return m, nil
}

// rates are the counters' rates between two readings of /metrics.
type rates struct {
	upstream     float64 // requests answered upstream per second
	haveUpstream bool
	refusals     []refusalRate // busiest first
}

// refusalRate is one label set of cqlguard_rate_limit_rejections_total.
type refusalRate struct {
	rejectionKey
	perSecond, total float64
}

// increase is how much a counter went up from prev to cur: a counter that
// went down was reset, by a restart, and counted cur since.
func increase(prev, cur float64) float64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}

// rateBetween computes the rates from prev, read at prevAt, to cur, read
// at curAt; nil when there is no earlier reading or no time between them.
// A label set missing from prev had not counted yet: it counts from 0.
func rateBetween(prev *metricsSample, prevAt time.Time, cur *metricsSample, curAt time.Time) *rates {
	dt := curAt.Sub(prevAt).Seconds()
	if prev == nil || cur == nil || dt <= 0 {
		return nil
	}
	r := &rates{}
	if prev.haveUpstream && cur.haveUpstream {
		r.upstream, r.haveUpstream = increase(prev.upstream, cur.upstream)/dt, true
	}
	for k, v := range cur.rejections {
		r.refusals = append(r.refusals, refusalRate{rejectionKey: k, perSecond: increase(prev.rejections[k], v) / dt, total: v})
	}
	slices.SortFunc(r.refusals, func(a, b refusalRate) int {
		if a.perSecond != b.perSecond {
			if a.perSecond > b.perSecond {
				return -1
			}
			return 1
		}
		return strings.Compare(a.keyspace+"."+a.table+" "+a.op+" "+a.outcome, b.keyspace+"."+b.table+" "+b.op+" "+b.outcome)
	})
	return r
}
