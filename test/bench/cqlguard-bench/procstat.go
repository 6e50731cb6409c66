package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cqlguard/cqlguard/test/load"
)

// procSample is what the kernel says of a process at one moment.
type procSample struct {
	cpu      time.Duration // user and system time so far
	rss, hwm int64         // resident set size now and at its peak, bytes
}

// sampleProc reads /proc/<pid>/stat and /proc/<pid>/status.
func sampleProc(pid int) (procSample, error) {
	var s procSample
	var err error
	if s.cpu, err = load.CPUTime(pid); err != nil {
		return s, err
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	s.rss, s.hwm = statusKB(string(status), "VmRSS:")*1024, statusKB(string(status), "VmHWM:")*1024
	return s, nil
}

// statusKB returns the value of a "Key:   123 kB" line of
// /proc/<pid>/status, or 0.
func statusKB(status, key string) int64 {
	for line := range strings.SplitSeq(status, "\n") {
		if rest, ok := strings.CutPrefix(line, key); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// metrics is one scrape of a Prometheus text endpoint: values by series,
// the series written as the endpoint writes it (name{labels}).
type metrics map[string]float64

// scrape fetches and parses url.
func scrape(ctx context.Context, url string) (metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return parseMetrics(resp.Body)
}

// parseMetrics reads the Prometheus text format into one value a series,
// keyed by name{label="value",...} with labels in order.
func parseMetrics(r io.Reader) (metrics, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("reading metrics: %w", err)
	}
	m := metrics{}
	for name, f := range families {
		for _, s := range f.GetMetric() {
			key := name
			if len(s.GetLabel()) > 0 {
				var b strings.Builder
				for i, l := range s.GetLabel() {
					if i > 0 {
						b.WriteByte(',')
					}
					fmt.Fprintf(&b, "%s=%q", l.GetName(), l.GetValue())
				}
				key += "{" + b.String() + "}"
			}
			switch {
			case s.Counter != nil:
				m[key] = s.GetCounter().GetValue()
			case s.Gauge != nil:
				m[key] = s.GetGauge().GetValue()
			case s.Untyped != nil:
				m[key] = s.GetUntyped().GetValue()
			case s.Histogram != nil:
				m[strings.Replace(key, name, name+"_count", 1)] = float64(s.GetHistogram().GetSampleCount())
			}
		}
	}
	return m, nil
}

// sum adds the series whose name is name and whose labels include all of
// labels (each written as key="value").
func (m metrics) sum(name string, labels ...string) float64 {
	var total float64
	for series, v := range m {
		n, rest, _ := strings.Cut(series, "{")
		if n != name {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(rest, l) {
				ok = false
				break
			}
		}
		if ok {
			total += v
		}
	}
	return total
}
