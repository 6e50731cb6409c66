package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/cqlguard/cqlguard/test/load"
)

// writeReport writes the machine, the method and the tables, in Markdown.
// unpinned are the gocql rows measured again with nothing pinned.
func (s *suite) writeReport(w io.Writer, rows []*row, driven, unpinned []*gocqlRow, took time.Duration) {
	fmt.Fprintf(w, "Machine: %s. Run took %s, started at load average %s.\n\n", machine(), took.Round(time.Second), loadAverage())
	if s.pin {
		fmt.Fprintln(w, "Pinning: the load generators and the fake upstream on CPU 0, the proxy (cqlguard, the relays, HAProxy) on CPU 1.")
	} else {
		fmt.Fprintln(w, "Pinning: none; the load generators, the fake upstream and the proxies share the CPUs.")
	}
	if len(rows) > 0 {
		s.writePipelinedTable(w, rows)
	}
	if len(driven) > 0 {
		fmt.Fprintln(w)
		s.writeGocqlTable(w, driven)
	}
	if len(unpinned) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "The gocql rows again, unpinned: a new fake upstream and new proxies, sharing both CPUs with "+
			"the driver (cqlguard and the relays with a P per CPU, HAProxy with a thread per CPU). Here the direct "+
			"row is the fastest path and each proxy's added p50 is what its hop costs; pinned, the driver and the "+
			"node share one CPU on the direct row, which slows it at the light loads more than a hop through the "+
			"other CPU adds.")
		fmt.Fprintln(w)
		s.writeGocqlTable(w, unpinned)
	}
	if len(driven) > 0 {
		fmt.Fprint(w, "\n"+gocqlLegend)
	}
}

// writePipelinedTable writes the load generator's rows as a Markdown
// table.
func (s *suite) writePipelinedTable(w io.Writer, rows []*row) {
	fmt.Fprintf(w, "Throughput: %d connections x %d requests in flight, %s warmup then %s measured. "+
		"Latency: %.0f requests/s over %d connections, %s warmup then %s measured.\n\n",
		s.conns, s.concurrency, s.satWarmup, s.satDuration, s.latRate, s.conns, s.latWarmup, s.latDuration)
	fmt.Fprintln(w, "| workload | path | req/s | vs direct | p50 | p99 | p99.9 | CPU µs/req | allocs/req | RSS MiB | load+upstream CPU µs/req | vs relay |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rows {
		fmt.Fprintln(w, r.markdown())
	}
	fmt.Fprint(w, `
req/s: answered requests per second, saturated. p50, p99, p99.9: latency at the fixed rate,
measured by the load generator; through a proxy, the difference from the direct p50 in
brackets. CPU µs/req: the proxy's user and system time (/proc/<pid>/stat) per request it
received (cqlguard's count; the relay's, the load generator's), saturated / at the fixed
rate. allocs/req: cqlguard's go_memstats_mallocs_total per request, less what the scrapes
of /metrics allocate, saturated / at the fixed rate; ± is what the scrapes' own variation
could account for. RSS: the proxy's resident set after the saturated run. load+upstream CPU
µs/req: the load generator's and the fake upstream's CPU time per request, saturated: what
the other side pays, more when the proxy's writes carry fewer requests each. vs relay:
cqlguard's req/s, saturated CPU µs/req and added p50 divided by the Go relay's on the same
workload in the same run ("-" where the relay's figure is not above zero).
`)
}

func (r *row) markdown() string {
	const columns = 12
	if r.note != "" && r.sat.Answered() == 0 {
		return fmt.Sprintf("| %s | %s | %s |%s", r.name, r.path, r.note, strings.Repeat(" |", columns-3))
	}
	cells := make([]string, columns)
	cells[0], cells[1], cells[2] = r.name, r.path, fmt.Sprintf("%.0f", r.sat.Rate)
	if r.direct != nil && r.direct.sat.Rate > 0 {
		cells[3] = fmt.Sprintf("%.0f%%", 100*r.sat.Rate/r.direct.sat.Rate)
	}
	if r.lat.Answered() > 0 {
		cells[4] = load.FormatLatency(r.lat.P50)
		if r.direct != nil && r.direct.lat.Answered() > 0 {
			cells[4] += fmt.Sprintf(" (%+.0fµs)", float64(r.lat.P50-r.direct.lat.P50)/1e3)
		}
		cells[5], cells[6] = load.FormatLatency(r.lat.P99), load.FormatLatency(r.lat.P999)
	} else {
		// The rejected row has no fixed-rate run: its latencies are saturated.
		for i, p := range []time.Duration{r.sat.P50, r.sat.P99, r.sat.P999} {
			cells[4+i] = load.FormatLatency(p) + " (sat.)"
		}
	}
	if c := r.cost; c != nil {
		us := func(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/1e3) }
		cells[7] = us(c.cpuSat)
		if c.cpuLat > 0 {
			cells[7] += " / " + us(c.cpuLat)
		}
		if c.fromMetrics {
			cells[8] = allocs(c.allocsSat, c.allocsSatNoise)
			if c.cpuLat > 0 {
				cells[8] += " / " + allocs(c.allocsLat, c.allocsLatNoise)
			}
		}
		cells[9] = fmt.Sprintf("%.1f", float64(c.rss)/(1<<20))
	}
	if r.sideCPU > 0 {
		cells[10] = fmt.Sprintf("%.2f", float64(r.sideCPU)/1e3)
	}
	cells[11] = r.vsRelay()
	if r.note != "" {
		cells[11] += " " + r.note
	}
	return "| " + strings.Join(cells, " | ") + " |"
}

// vsRelay writes the row's req/s, saturated CPU per request and added p50
// as ratios to the Go relay's row of the same load, the added p50s both
// taken from the relay's direct row.
func (r *row) vsRelay() string {
	f := r.relay
	if f == nil || r.cost == nil || f.cost == nil || f.sat.Answered() == 0 || r.sat.Answered() == 0 {
		return ""
	}
	out := ratio(r.sat.Rate, f.sat.Rate) + " / " + ratio(float64(r.cost.cpuSat), float64(f.cost.cpuSat))
	if d := f.direct; d != nil && d.lat.Answered() > 0 && r.lat.Answered() > 0 && f.lat.Answered() > 0 {
		out += " / " + ratio(float64(r.lat.P50-d.lat.P50), float64(f.lat.P50-d.lat.P50))
	}
	return out
}

// allocs writes allocations per request, with the noise bound when it is
// not negligible.
func allocs(v, noise float64) string {
	if noise < 0.0005 {
		return fmt.Sprintf("%.3f", v)
	}
	return fmt.Sprintf("%.3f ±%.3f", v, noise)
}

// machine describes the CPU, memory, kernel and Go version.
func machine() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		mem = fmt.Sprintf(", %.1f GiB", float64(statusKB(string(b), "MemTotal:"))/(1<<20))
	}
	kernel := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = ", Linux " + strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%s, %d CPUs%s%s, %s", cpu, runtime.NumCPU(), mem, kernel, runtime.Version())
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
