package load

import (
	"fmt"
	"io"
	"sort"
	"time"
)

// WriteSecond writes one line per loader of s, and one per event.
func WriteSecond(w io.Writer, s Second) {
	for _, e := range s.Events {
		fmt.Fprintf(w, "%7.1fs  event: %s\n", s.T.Seconds(), e)
	}
	for _, iv := range s.Loaders {
		rate := func(n uint64) float64 { return float64(n) / s.Length.Seconds() }
		fmt.Fprintf(w, "%7.1fs  %-10s %-12s attempted %9.0f/s  ok %9.0f/s  rejected %8.0f/s  failed %6.0f/s  p50 %8s  p99 %8s  p99.9 %8s\n",
			s.T.Seconds(), s.Phase, iv.Loader, rate(iv.Attempted), rate(iv.Succeeded), rate(iv.Rejected), rate(iv.Failed),
			FormatLatency(iv.P50), FormatLatency(iv.P99), FormatLatency(iv.P999))
	}
}

// WriteSummaries writes a summary line per loader, and its errors.
func WriteSummaries(w io.Writer, sums []Summary) {
	for _, s := range sums {
		fmt.Fprintf(w, "%-12s %6.1fs  %9.0f req/s  attempted %d  ok %d  rejected %d  failed %d  p50 %s  p90 %s  p99 %s  p99.9 %s  max %s\n",
			s.Loader, s.Seconds, s.Rate, s.Attempted, s.Succeeded, s.Rejected, s.Failed,
			FormatLatency(s.P50), FormatLatency(s.P90), FormatLatency(s.P99), FormatLatency(s.P999), FormatLatency(s.Max))
		msgs := make([]string, 0, len(s.Errors))
		for m := range s.Errors {
			msgs = append(msgs, m)
		}
		sort.Strings(msgs)
		for _, m := range msgs {
			fmt.Fprintf(w, "%-12s error (%d times): %s\n", s.Loader, s.Errors[m], m)
		}
	}
}

// FormatLatency writes d with about three significant digits, in µs, ms
// or s.
func FormatLatency(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Millisecond:
		return sig3(float64(d)/1e3) + "µs"
	case d < time.Second:
		return sig3(float64(d)/1e6) + "ms"
	}
	return sig3(d.Seconds()) + "s"
}

func sig3(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
