package load

import (
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// Latency range and precision: 1 µs to one minute, three significant
// digits, so that p99.9 of a 40 µs loopback round trip and of a 2 s stall
// are both read to 0.1%.
const (
	minLatency = int64(time.Microsecond)
	maxLatency = int64(time.Minute)
	sigDigits  = 3
)

// Latencies is an HDR histogram of request latencies. It is not safe for
// concurrent use; recording allocates nothing.
type Latencies struct {
	h *hdr.Histogram
}

// NewLatencies returns an empty histogram.
func NewLatencies() *Latencies {
	return &Latencies{h: hdr.New(minLatency, maxLatency, sigDigits)}
}

// Record adds one latency; values out of range are clamped to it.
func (l *Latencies) Record(d time.Duration) {
	v := min(max(int64(d), minLatency), maxLatency)
	l.h.RecordValue(v)
}

// Merge adds o's values to l.
func (l *Latencies) Merge(o *Latencies) { l.h.Merge(o.h) }

// Reset empties the histogram.
func (l *Latencies) Reset() { l.h.Reset() }

// Count is the number of latencies recorded.
func (l *Latencies) Count() int64 { return l.h.TotalCount() }

// Percentile returns the latency below which p percent of the values fall
// (p in 0..100); 0 for an empty histogram.
func (l *Latencies) Percentile(p float64) time.Duration {
	if l.h.TotalCount() == 0 {
		return 0
	}
	return time.Duration(l.h.ValueAtPercentile(p))
}

// Max is the largest latency recorded.
func (l *Latencies) Max() time.Duration {
	if l.h.TotalCount() == 0 {
		return 0
	}
	return time.Duration(l.h.Max())
}

// Mean is the average latency.
func (l *Latencies) Mean() time.Duration { return time.Duration(l.h.Mean()) }
