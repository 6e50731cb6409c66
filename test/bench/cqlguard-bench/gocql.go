package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cqlguard/cqlguard/test/load"
)

// gocqlMode is one load of the rows driven by gocql.
type gocqlMode struct {
	name       string
	rate       float64 // requests/s; 0 saturates
	noCoalesce bool
}

// gocqlModes are the loads users run, from saturated to light; at the
// lightest the driver's write coalescing is off, so that each request is
// its own write and wakes every process on its way on its own.
var gocqlModes = []gocqlMode{
	{name: "saturated"},
	{name: "30000/s", rate: 30000},
	{name: "10000/s, no coalescing", rate: 10000, noCoalesce: true},
}

// The paths of the gocql rows besides direct and the relays.
const (
	haproxyPath  = "HAProxy"
	cqlguardPath = "cqlguard"
	// routedPath is cqlguard in front of a fake cluster of three nodes
	// (clusterNodes), each holding a third of the keys: the session's
	// connection to one and its own connections to the others, opened as
	// requests for their keys come, each request sent to the node that
	// holds its key.
	routedPath = "cqlguard, routed"
)

// clusterNodes is how many fake nodes the routed row's cluster has, and
// clusterListen where the first listens (the others at the next IPs).
const (
	clusterNodes  = 3
	clusterListen = "127.0.0.11:0"
)

// gocqlPathNames are the names -gocql-paths takes, by path.
var gocqlPathNames = map[string]string{
	"relay": relayPath, "eventloop": loopRelayPath, "haproxy": haproxyPath, "cqlguard": cqlguardPath,
	"routed": routedPath,
}

// parseGocqlPaths reads -gocql-paths: a comma-separated list of
// gocqlPathNames' names. The Go relay is always among them: every other
// proxy's row is given as ratios to it.
func parseGocqlPaths(list string) (map[string]bool, error) {
	paths := map[string]bool{relayPath: true}
	for name := range strings.SplitSeq(list, ",") {
		p, ok := gocqlPathNames[strings.TrimSpace(name)]
		if !ok {
			return nil, fmt.Errorf("-gocql-paths: %q is none of relay, eventloop, haproxy, cqlguard, routed", name)
		}
		paths[p] = true
	}
	return paths, nil
}

// gocqlRow is one line of the gocql table: a mode through one path, over
// one or more runs.
type gocqlRow struct {
	mode          gocqlMode
	path          string
	runs          []gocqlRun
	direct, relay *gocqlRow // the rows to compare with, in the same mode
	note          string
}

// gocqlRun is one run's figures.
type gocqlRun struct {
	// round is the round the run was made in, to pair it with the other
	// paths' runs of the same round.
	round int
	sum   load.Summary
	// cpu is the proxy's CPU time per request answered.
	cpu time.Duration
}

// median returns the median of f over the row's runs (of the middle two
// for an even count), or 0 without runs.
func (r *gocqlRow) median(f func(gocqlRun) float64) float64 {
	if r == nil || len(r.runs) == 0 {
		return 0
	}
	vs := make([]float64, len(r.runs))
	for i, run := range r.runs {
		vs[i] = f(run)
	}
	slices.Sort(vs)
	return sortedMedian(vs)
}

// sortedMedian returns the median of vs, sorted and not empty.
func sortedMedian(vs []float64) float64 {
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}

// The figures of a run that the table reports, for median.
func runRate(x gocqlRun) float64 { return x.sum.Rate }
func runP50(x gocqlRun) float64  { return float64(x.sum.P50) }
func runP99(x gocqlRun) float64  { return float64(x.sum.P99) }
func runCPU(x gocqlRun) float64  { return float64(x.cpu) }

// pairedRatio returns the median, least and greatest over the rounds in
// which both r and its relay row ran of f of r's run divided by f of the
// relay's run of the same round. Runs of one round are measured within
// seconds of each other, so the machine's slower drift cancels out of each
// ratio, which a ratio of medians taken apart does not do. ok is false
// without such a round.
func (r *gocqlRow) pairedRatio(f func(gocqlRun) float64) (med, lo, hi float64, ok bool) {
	if r.relay == nil {
		return 0, 0, 0, false
	}
	var vs []float64
	for _, a := range r.runs {
		for _, b := range r.relay.runs {
			if a.round == b.round && f(b) > 0 {
				vs = append(vs, f(a)/f(b))
			}
		}
	}
	if len(vs) == 0 {
		return 0, 0, 0, false
	}
	slices.Sort(vs)
	return sortedMedian(vs), vs[0], vs[len(vs)-1], true
}

// addedP50 is how much the row's median p50 exceeds the direct row's.
func (r *gocqlRow) addedP50() (float64, bool) {
	if r.direct == nil || len(r.runs) == 0 || len(r.direct.runs) == 0 {
		return 0, false
	}
	return r.median(runP50) - r.direct.median(runP50), true
}

// gocqlTarget is a path the driver's requests take.
type gocqlTarget struct {
	path string
	addr string
	px   *proxy // nil: direct, or the path could not start
	err  error  // why the path could not start
}

// gocqlRows measures each gocql mode direct, through the Go relay, and
// through those of the event-loop relay, HAProxy and a cqlguard with the
// counted rows' limits and /hot on that -gocql-paths names, in
// s.gocqlRuns rounds. Within a round every path runs a mode before the
// next mode starts, so that a mode's rows are measured close together.
func (s *suite) gocqlRows(ctx context.Context) ([]*gocqlRow, error) {
	var modes []gocqlMode
	for _, m := range gocqlModes {
		if s.only == "" || strings.Contains("gocql "+m.name, s.only) {
			modes = append(modes, m)
		}
	}
	if len(modes) == 0 {
		return nil, nil
	}
	targets := []*gocqlTarget{{path: "direct", addr: s.upstreamAddr}}
	for _, p := range []string{relayPath, loopRelayPath, haproxyPath, cqlguardPath, routedPath} {
		if s.gocqlPaths[p] {
			targets = append(targets, &gocqlTarget{path: p})
		}
	}
	for _, t := range targets[1:] {
		switch t.path {
		case relayPath:
			t.px, t.err = s.startRelay(ctx, "go")
		case loopRelayPath:
			t.px, t.err = s.startRelay(ctx, "eventloop")
		case haproxyPath:
			t.px, t.err = s.startHAProxy(ctx)
		case cqlguardPath:
			t.px, t.err = s.startProxy(ctx, "cqlguard-gocql", countedLimits)
		case routedPath:
			t.px, t.err = s.startRouted(ctx)
		}
		if t.px != nil {
			t.addr = t.px.addr
		}
	}
	var rows []*gocqlRow
	for _, m := range modes {
		var direct, floor *gocqlRow
		for _, t := range targets {
			r := &gocqlRow{mode: m, path: t.path, direct: direct, relay: floor}
			if t.err != nil {
				r.note = "skipped: " + firstLine(t.err.Error())
			}
			switch t.path {
			case "direct":
				direct, r.direct = r, nil
			case relayPath:
				floor, r.relay = r, nil
			}
			rows = append(rows, r)
		}
	}
	for round := range s.gocqlRuns {
		for _, i := range roundOrder(len(rows), len(targets), round) {
			r, t := rows[i], targets[i%len(targets)]
			if t.err != nil || r.note != "" {
				continue
			}
			fmt.Fprintf(s.stderr, "gocql %-22s %-9s run %d of %d...", r.mode.name, r.path, round+1, s.gocqlRuns)
			run, err := s.runGocql(ctx, t, r.mode)
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				fmt.Fprintln(s.stderr, " failed")
				r.note = "TODO: " + firstLine(err.Error())
				continue
			}
			run.round = round
			r.runs = append(r.runs, run)
			fmt.Fprintf(s.stderr, " %.0f req/s, p50 %s", run.sum.Rate, load.FormatLatency(run.sum.P50))
			if t.px != nil {
				fmt.Fprintf(s.stderr, ", %.2f CPU µs/req", float64(run.cpu)/1e3)
			}
			fmt.Fprintln(s.stderr)
		}
	}
	for i, t := range targets {
		if t.path == routedPath && t.px != nil {
			s.checkRouted(ctx, t.px, rows, i, len(targets))
		}
	}
	return rows, nil
}

// checkRouted notes on the routed rows (every paths-th from i) a share of
// requests under 99% run on their replica, which would make them measure
// something else than routing.
func (s *suite) checkRouted(ctx context.Context, px *proxy, rows []*gocqlRow, i, paths int) {
	m, err := scrape(ctx, px.metricsURL)
	if err != nil {
		return
	}
	replica := m.sum("cqlguard_routed_requests_total", `to="replica"`)
	all := m.sum("cqlguard_routed_requests_total")
	fmt.Fprintf(s.stderr, "%s: %.0f of %.0f requests with a partition ran on their replica\n", routedPath, replica, all)
	if all > 0 && replica/all >= 0.99 {
		return
	}
	for ; i < len(rows); i += paths {
		rows[i].note += fmt.Sprintf("only %.0f of %.0f requests on their replica", replica, all)
	}
}

// unpinnedGocqlRows measures the gocql rows again with nothing pinned: a
// new fake node and new proxies, which Go and HAProxy size for every CPU,
// all sharing the CPUs with the driver, as a sidecar shares its node's.
// Pinned, the direct row runs the driver and the node on one CPU, which
// slows its light loads (a write per request, each waking the other
// process on the same CPU) more than any hop through the other CPU adds:
// the relay's added p50 at 10,000/s is then near zero, and a ratio to it
// says little. Unpinned, the direct row is the faster path and each
// proxy's added p50 is the hop's cost.
func (s *suite) unpinnedGocqlRows(ctx context.Context) ([]*gocqlRow, error) {
	s.stopAll()
	s.procs = nil
	u := *s
	u.pin, u.relays = false, nil
	u.dir = filepath.Join(s.dir, "unpinned")
	if err := os.Mkdir(u.dir, 0o755); err != nil {
		return nil, err
	}
	defer u.stopAll()
	if err := u.startUpstream(ctx); err != nil {
		return nil, err
	}
	fmt.Fprintln(s.stderr, "gocql rows again, unpinned:")
	return u.gocqlRows(ctx)
}

// roundOrder returns the order in which round runs n rows, laid out as
// modes of paths targets each, the direct path first in each mode. In
// every other round the proxies of a mode run in reverse, so that no proxy
// is always measured just after another, on a machine the one before may
// have left warm or busy.
func roundOrder(n, paths, round int) []int {
	order := make([]int, 0, n)
	for m := 0; m < n; m += paths {
		order = append(order, m)
		for j := 1; j < paths; j++ {
			if round%2 == 1 {
				order = append(order, m+paths-j)
			} else {
				order = append(order, m+j)
			}
		}
	}
	return order
}

// runGocql runs the gocql load generator once against t in mode m.
func (s *suite) runGocql(ctx context.Context, t *gocqlTarget, m gocqlMode) (gocqlRun, error) {
	args := []string{"gocql", "-summary-json", "-addr", t.addr,
		"-conns", strconv.Itoa(s.conns), "-concurrency", strconv.Itoa(s.gocqlConcurrency),
		"-rate", strconv.FormatFloat(m.rate, 'f', -1, 64),
		"-duration", s.gocqlDuration.String(), "-warmup", s.gocqlWarmup.String(),
	}
	if m.noCoalesce {
		args = append(args, "-no-coalesce")
	}
	// The loader's clock starts once its session is up; sample from then
	// on, well inside the measured time.
	sum, c, err := s.runLoader(ctx, args, t.addr, s.gocqlWarmup+gocqlSessionStart, s.gocqlDuration-gocqlSessionStart, t.px)
	if err != nil {
		return gocqlRun{}, err
	}
	// The driver's answers, counted for every path alike (cqlguard's
	// /metrics would also count the driver's own queries).
	return gocqlRun{sum: sum, cpu: c.perRequest(c.proxyCPU, sum.Rate)}, nil
}

// gocqlSessionStart bounds how long the gocql loader takes from its start
// to the start of its clock: the process, the session's first connection
// and the statement's preparation.
const gocqlSessionStart = 500 * time.Millisecond

// startRouted starts the fake cluster, pinned as the upstream is, and a
// cqlguard in front of its first node, which learns the others from it
// and routes (cluster mode's default), with the cqlguard row's limits.
func (s *suite) startRouted(ctx context.Context) (*proxy, error) {
	cmd := s.command(ctx, 0, s.self, "upstream", "-listen", clusterListen, "-nodes", strconv.Itoa(clusterNodes))
	addr, err := s.startListening(cmd)
	if err != nil {
		return nil, fmt.Errorf("fake cluster did not start: %w", err)
	}
	px, err := s.startProxyTo(ctx, "cqlguard-routed", addr, countedLimits)
	if err != nil {
		return nil, err
	}
	if err := waitRing(ctx, px, clusterNodes); err != nil {
		return nil, err
	}
	return px, nil
}

// waitRing waits until cqlguard's /metrics shows it knows a ring of nodes
// nodes: until then it runs every request on the connection's node.
func waitRing(ctx context.Context, px *proxy, nodes int) error {
	for deadline := time.Now().Add(20 * time.Second); ; {
		m, err := scrape(ctx, px.metricsURL)
		if err != nil {
			return err
		}
		if m["cqlguard_ring_nodes"] >= float64(nodes) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cqlguard knows %v of the cluster's %d nodes after 20s: %s", m["cqlguard_ring_nodes"], nodes, tail(px.logPath))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startHAProxy starts haproxy in TCP mode in front of the upstream, pinned
// as cqlguard is, from a configuration it writes: one frontend on a
// loopback port, the upstream as the one server, no logging, and as many
// threads as cqlguard has Ps (one CPU when pinned, every CPU when not).
func (s *suite) startHAProxy(ctx context.Context) (*proxy, error) {
	bin, err := exec.LookPath(s.haproxy)
	if err != nil {
		return nil, errors.New("haproxy is not installed (test/haproxy/haproxy.sh install)")
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	threads := runtime.NumCPU()
	if s.pin {
		threads = 1
	}
	px := &proxy{
		addr:    net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
		logPath: filepath.Join(s.dir, "haproxy.log"),
	}
	cfgPath := filepath.Join(s.dir, "haproxy.cfg")
	if err := os.WriteFile(cfgPath, []byte(haproxyConfig(px.addr, s.upstreamAddr, threads)), 0o644); err != nil {
		return nil, err
	}
	logFile, err := os.Create(px.logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	// -db: in the foreground, one process, so that its pid is the one to
	// sample.
	px.cmd = s.command(ctx, 1, bin, "-db", "-f", cfgPath)
	px.cmd.Stdout, px.cmd.Stderr = logFile, logFile
	if err := px.cmd.Start(); err != nil {
		return nil, err
	}
	s.procs = append(s.procs, px.cmd)
	exited := make(chan struct{})
	go func() {
		px.cmd.Wait()
		close(exited)
	}()
	for deadline := time.Now().Add(10 * time.Second); ; {
		select {
		case <-exited:
			return nil, fmt.Errorf("haproxy exited: %s", tail(px.logPath))
		default:
		}
		if c, err := net.DialTimeout("tcp", px.addr, time.Second); err == nil {
			c.Close()
			return px, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("haproxy not listening after 10s: %s", tail(px.logPath))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// haproxyConfig is a TCP relay from listen to upstream: no logging (no log
// line at all), no health checks, timeouts far beyond a run.
func haproxyConfig(listen, upstream string, threads int) string {
	return fmt.Sprintf(`global
    nbthread %d
    maxconn 4096

defaults
    mode tcp
    timeout connect 5s
    timeout client 1h
    timeout server 1h

frontend cql
    bind %s
    default_backend node

backend node
    server node %s
`, threads, listen, upstream)
}

// writeGocqlTable writes the gocql rows as a Markdown table, with the
// ratios of each proxy's row to the Go relay's in the same mode;
// gocqlLegend says what its columns are.
func (s *suite) writeGocqlTable(w io.Writer, rows []*gocqlRow) {
	// One round's ratios are a sample, not a figure: say so where the
	// table is read, since the default run has one. How far rounds move is
	// the machine's, so docs/benchmarks.md says it, not the table.
	runs := "one run each, so each ratio is one round's; -gocql-runs 10 gives figures"
	if s.gocqlRuns > 1 {
		runs = fmt.Sprintf("medians of %d runs", s.gocqlRuns)
	}
	fmt.Fprintf(w, "gocql: prepared point reads of bench.kv, protocol v4, %d requests in flight over %d connections; "+
		"%s warmup then %s measured, %s.\n\n", s.gocqlConcurrency, s.conns, s.gocqlWarmup, s.gocqlDuration, runs)
	fmt.Fprintln(w, "| gocql load | path | req/s | p50 | p99 | added p50 | CPU µs/req | vs relay: req/s | vs relay: CPU/req | vs relay: added p50 |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rows {
		fmt.Fprintln(w, r.markdown())
	}
}

// gocqlLegend says what the columns of the gocql tables are.
const gocqlLegend = `req/s: answered requests per second. p50, p99: latency measured by the driver's goroutines,
from the send (at a fixed rate, from when it was due for a request that waited for a free
goroutine). added p50: the p50 less the direct row's. CPU µs/req: the proxy's user and system
time (/proc/<pid>/stat) over the window, per request the driver got answered in it. vs relay: req/s
and CPU µs/req, each run divided by the Go relay's run of the same round and mode, the median of
those ratios and, over several rounds, their range; added p50 divided by the Go relay's ("-" where
the relay's figure is not above zero).
`

func (r *gocqlRow) markdown() string {
	const columns = 10
	cells := make([]string, columns)
	cells[0], cells[1] = "gocql "+r.mode.name, r.path
	if len(r.runs) == 0 {
		cells[2] = r.note
		return "| " + strings.Join(cells, " | ") + " |"
	}
	cells[2] = fmt.Sprintf("%.0f", r.median(runRate))
	cells[3], cells[4] = load.FormatLatency(time.Duration(r.median(runP50))), load.FormatLatency(time.Duration(r.median(runP99)))
	added, hasAdded := r.addedP50()
	if hasAdded {
		cells[5] = fmt.Sprintf("%+.0fµs", added/1e3)
	}
	if r.path != "direct" {
		cells[6] = fmt.Sprintf("%.2f", r.median(runCPU)/1e3)
	}
	if f := r.relay; f != nil && len(f.runs) > 0 {
		cells[7] = r.pairedCell(runRate)
		cells[8] = r.pairedCell(runCPU)
		if floorAdded, ok := f.addedP50(); ok && hasAdded {
			cells[9] = ratio(added, floorAdded)
		}
	}
	if r.note != "" {
		cells[9] += " " + r.note
	}
	return "| " + strings.Join(cells, " | ") + " |"
}

// pairedCell writes the median of f's paired ratios to the relay
// (pairedRatio), with their range when there are several.
func (r *gocqlRow) pairedCell(f func(gocqlRun) float64) string {
	med, lo, hi, ok := r.pairedRatio(f)
	switch {
	case !ok:
		return "-"
	case lo == hi:
		return fmt.Sprintf("%.2f×", med)
	}
	return fmt.Sprintf("%.2f× (%.2f-%.2f)", med, lo, hi)
}

// ratio writes a/b, or "-" when b is not above zero.
func ratio(a, b float64) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", a/b)
}
