package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/cqlguard/cqlguard/test/load"
)

// goodput runs the goodput experiment against a real node: a uniform read
// workload through cqlguard, then a second loader hammering one partition
// of the same table, then the limit for that table switched on by a
// reload, then (for a hot loader that reads) the table's hot reads served
// by coalescing and a short cache, by another reload. It reports the
// uniform workload's goodput and the hot loader's answers per second
// through the phases, and plots them; for the last phase also how many of
// the hot partition's reads reached the node, counted by cqlguard and by
// the node itself.
type goodput struct {
	nodeRun
	concurrency         int
	hotFactor, hotBytes int
	hotRate             float64
	hotOp               string
	limit               int
	cacheTTL            time.Duration
}

func runGoodput(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	g := &goodput{nodeRun: nodeRun{stdout: stdout, stderr: stderr}}
	fs := flag.NewFlagSet("goodput", flag.ContinueOnError)
	fs.SetOutput(stderr)
	g.flags(fs, "the uniform workload", "docs/goodput.png", 15*time.Second)
	fs.IntVar(&g.concurrency, "concurrency", 8, "requests in flight per connection of the uniform loader")
	fs.IntVar(&g.hotFactor, "hot-factor", 8, "the hot loader's concurrency, as a multiple of the uniform loader's")
	fs.IntVar(&g.hotBytes, "hot-bytes", 16384, "size of the hot partition's row")
	fs.StringVar(&g.hotOp, "hot-op", "read", "what the hot loader does to its partition: read (its row is written first) or write")
	fs.Float64Var(&g.hotRate, "hot-rate", 15000, "the hot loader's offered rate in requests per second, kept when it is refused (0: as fast as its concurrency allows, which turns refusals into a busy loop on the load generator's machine)")
	fs.IntVar(&g.limit, "limit", 200, "the per-partition limit of bench.kv for the hot loader's operation from the third phase on")
	fs.DurationVar(&g.cacheTTL, "cache-ttl", 100*time.Millisecond, "hot_reads' cache_ttl for bench.kv in the last phase (0: coalescing alone)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if g.hotOp != string(load.Read) && g.hotOp != string(load.Write) {
		return fmt.Errorf("goodput: -hot-op %q: want read or write", g.hotOp)
	}
	return g.inTempDir("goodput", func() error { return g.run(ctx) })
}

// settle is how long a phase's change takes hold: the first seconds of
// each phase are left out of its figures.
const settle = 3 * time.Second

// phase names, in order.
const (
	phaseBaseline = "uniform alone"
	phaseHot      = "hot loader"
	phaseLimited  = "limit on"
	phaseServed   = "hot reads served"
)

// phases are the experiment's phases: the last only for a hot loader that
// reads.
func (g *goodput) phases() []string {
	if g.hotOp == string(load.Read) {
		return []string{phaseBaseline, phaseHot, phaseLimited, phaseServed}
	}
	return []string{phaseBaseline, phaseHot, phaseLimited}
}

func (g *goodput) run(ctx context.Context) error {
	if g.upstreamPID != 0 {
		restore, err := pinNode(g.upstreamPID, g.stderr)
		if err != nil {
			return err
		}
		defer restore()
	}
	px, cfgPath, err := g.startProxy(ctx)
	if err != nil {
		return err
	}
	defer func() {
		px.Process.Signal(syscall.SIGTERM)
		px.Wait()
	}()
	addr := g.proxyAddr()

	uniform := load.DefaultSpec()
	uniform.Name, uniform.Addr, uniform.Username, uniform.Password = "uniform", addr, g.user, g.password
	uniform.Keys, uniform.Conns, uniform.Concurrency = g.keys, g.conns, g.concurrency
	if err := load.CreateSchema(uniform, 1); err != nil {
		return fmt.Errorf("creating bench.kv: %w", err)
	}
	// The uniform workload reads rows that exist, so that its goodput is
	// real reads.
	fmt.Fprintf(g.stderr, "writing bench.kv's rows for %v...\n", g.preload)
	pre := uniform
	pre.Name, pre.Op, pre.Concurrency = "preload", load.Write, 64
	if _, err := load.Run(ctx, []load.Spec{pre}, load.Options{Duration: g.preload}); err != nil {
		return fmt.Errorf("writing rows: %w", err)
	}

	hot := uniform
	hot.Name, hot.Op, hot.Dist, hot.HotKeys, hot.HotFraction = "hot", load.Op(g.hotOp), load.Hot, 1, 1
	hot.Concurrency, hot.ValueBytes, hot.Rate = g.concurrency*g.hotFactor, g.hotBytes, g.hotRate
	if hot.Op == load.Read {
		// The hot partition holds the larger row that every read returns.
		w := hot
		w.Name, w.Op, w.Conns, w.Concurrency, w.Rate = "hot row", load.Write, 1, 1, 10
		if _, err := load.Run(ctx, []load.Spec{w}, load.Options{Duration: time.Second}); err != nil {
			return fmt.Errorf("writing the hot row: %w", err)
		}
	}
	hot.Start = g.warmup + g.phase
	total := g.warmup + time.Duration(len(g.phases()))*g.phase
	reload := func(limited, served bool) func(context.Context) error {
		return func(context.Context) error {
			if err := os.WriteFile(cfgPath, []byte(g.config(limited, served)), 0o600); err != nil {
				return err
			}
			return px.Process.Signal(syscall.SIGHUP)
		}
	}
	// The hot partition's reads that reach the node in the last phase, as
	// cqlguard and the node count them, from when the change settled to
	// the end.
	var servedFrom, servedTo upstreamCounts
	settled := make(chan struct{})
	phases := []load.Phase{
		{Name: phaseBaseline, At: 0},
		{Name: phaseHot, At: g.warmup + g.phase},
		{Name: phaseLimited, At: g.warmup + 2*g.phase, Action: reload(true, false)},
	}
	if len(g.phases()) == 4 {
		phases = append(phases, load.Phase{Name: phaseServed, At: g.warmup + 3*g.phase, Action: func(ctx context.Context) error {
			if err := reload(true, true)(ctx); err != nil {
				close(settled)
				return err
			}
			go func() {
				defer close(settled)
				select {
				case <-time.After(settle):
					servedFrom = g.upstreamCounts(ctx)
				case <-ctx.Done():
				}
			}()
			return nil
		}})
	}
	var jsonOut io.Writer
	if g.jsonPath != "" {
		f, err := os.Create(g.jsonPath)
		if err != nil {
			return err
		}
		defer f.Close()
		jsonOut = f
	}
	var seconds []load.Second
	fmt.Fprintf(g.stderr, "running %v: %s, %s at %v, %s at %v\n", total, phaseBaseline, phaseHot, phases[1].At, phaseLimited, phases[2].At)
	_, err = load.Run(ctx, []load.Spec{uniform, hot}, load.Options{
		Duration: total, Warmup: g.warmup, Phases: phases,
		Report: func(s load.Second) {
			seconds = append(seconds, s)
			load.WriteSecond(g.stderr, s)
			if jsonOut != nil {
				b, _ := json.Marshal(s)
				fmt.Fprintf(jsonOut, "%s\n", b)
			}
		},
	})
	if err != nil {
		return err
	}
	if len(g.phases()) == 4 {
		<-settled
		servedTo = g.upstreamCounts(ctx)
	}
	res := g.summarize(seconds)
	res.upstream = servedTo.minus(servedFrom)
	if err := g.plot(seconds); err != nil {
		return err
	}
	res.write(g.stdout, g)
	return nil
}

// config is cqlguard's configuration, with the limit on bench.kv or not,
// and its hot reads served or not.
func (g *goodput) config(limited, served bool) string {
	port := strings.TrimPrefix(g.proxyAddr(), "127.0.0.1:")
	admin, _ := strconv.Atoi(port)
	cfg := fmt.Sprintf("listen: %s\nupstreams: [%s]\nadmin:\n  listen: 127.0.0.1:%d\nlog:\n  level: info\n"+
		"schema:\n  username: %s\n  password_env: CQLGUARD_GOODPUT_PASSWORD\n",
		g.proxyAddr(), g.upstream, admin+1, g.user)
	if limited {
		cfg += fmt.Sprintf("limits:\n  keyspaces:\n    bench:\n      tables:\n        kv: {max_%ss_per_second: %d}\n", g.hotOp, g.limit)
	}
	if served {
		cfg += fmt.Sprintf("hot_reads:\n  keyspaces:\n    bench:\n      tables:\n        kv: {coalesce: true, cache_ttl: %s}\n", g.cacheTTL)
	}
	return cfg
}

// proxyAddr is where cqlguard listens; its admin listener is on the next
// port.
func (g *goodput) proxyAddr() string { return "127.0.0.1:9044" }

// startProxy starts cqlguard without limits and waits until it is ready.
func (g *goodput) startProxy(ctx context.Context) (*exec.Cmd, string, error) {
	return startCqlguard(ctx, g.cqlguard, g.dir, g.config(false, false), g.proxyAddr(), "CQLGUARD_GOODPUT_PASSWORD="+g.password)
}

// startCqlguard starts the cqlguard binary bin with the configuration cfg,
// written to dir, its log beside it and env added to its environment, and
// waits until it is ready: its admin listener is on the port after addr's.
// It returns the process and the configuration file's path, for reloads.
func startCqlguard(ctx context.Context, bin, dir, cfg, addr string, env ...string) (*exec.Cmd, string, error) {
	cfgPath := filepath.Join(dir, "cqlguard.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, "", err
	}
	logPath := filepath.Join(dir, "cqlguard.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, "", err
	}
	defer logFile.Close()
	cmd := exec.CommandContext(ctx, bin, "-config", cfgPath)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	ready := "http://" + adminAddr(addr) + "/readyz"
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(ready); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return cmd, cfgPath, nil
			}
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, "", fmt.Errorf("cqlguard not ready after 30s: %s", tail(logPath))
		}
	}
}

// adminAddr is the address of the admin listener of a cqlguard listening
// on addr: the next port.
func adminAddr(addr string) string {
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	return net.JoinHostPort(host, strconv.Itoa(p+1))
}

// phaseFigures are one phase's means per second.
type phaseFigures struct {
	name                       string
	seconds                    int
	goodput, p99               float64 // the uniform loader's
	hotAccepted, hotRejected   float64
	hotFailed, uniformRejected float64
}

type goodputResult struct {
	phases   []phaseFigures
	upstream upstreamCounts // over the last phase
}

// upstreamCounts are running counts of what reached the node: as cqlguard
// counts them (requests it forwarded and were answered, and of those the
// hot reads of bench.kv, by outcome) and as the node counts them (reads of
// bench.kv it coordinated, from system_views). ok is unset when either
// could not be read.
type upstreamCounts struct {
	at                      time.Time
	forwarded               float64
	hotForwarded, hotServed float64
	nodeReads               float64
	ok                      bool
}

// upstreamCounts takes the counts now.
func (g *goodput) upstreamCounts(ctx context.Context) upstreamCounts {
	c := upstreamCounts{at: time.Now()}
	m, err := scrape(ctx, "http://"+adminAddr(g.proxyAddr())+"/metrics")
	if err != nil {
		fmt.Fprintf(g.stderr, "goodput: reading cqlguard's metrics: %v\n", err)
		return c
	}
	c.forwarded = m["cqlguard_upstream_request_duration_seconds_count"]
	for _, o := range []string{"forwarded", "uncoalesced"} {
		c.hotForwarded += m[`cqlguard_hot_reads_total{keyspace="bench",outcome="`+o+`",table="kv"}`]
	}
	for _, o := range []string{"cached", "coalesced"} {
		c.hotServed += m[`cqlguard_hot_reads_total{keyspace="bench",outcome="`+o+`",table="kv"}`]
	}
	cluster := gocql.NewCluster(g.upstream)
	cluster.Authenticator = gocql.PasswordAuthenticator{Username: g.user, Password: g.password}
	cluster.NumConns, cluster.Timeout = 1, 10*time.Second
	s, err := cluster.CreateSession()
	if err != nil {
		fmt.Fprintf(g.stderr, "goodput: connecting to the node: %v\n", err)
		return c
	}
	defer s.Close()
	var n int64
	it := s.Query("SELECT count FROM system_views.coordinator_read_latency WHERE keyspace_name = 'bench' AND table_name = 'kv'").IterContext(ctx)
	found := it.Scan(&n)
	if err := it.Close(); err != nil || !found {
		fmt.Fprintf(g.stderr, "goodput: reading the node's read count of bench.kv: found %v, %v\n", found, err)
		return c
	}
	c.nodeReads, c.ok = float64(n), true
	return c
}

// minus returns the counts from b to c, as rates per second in
// forwarded..nodeReads.
func (c upstreamCounts) minus(b upstreamCounts) upstreamCounts {
	secs := c.at.Sub(b.at).Seconds()
	if !c.ok || !b.ok || secs <= 0 {
		return upstreamCounts{}
	}
	return upstreamCounts{
		forwarded:    (c.forwarded - b.forwarded) / secs,
		hotForwarded: (c.hotForwarded - b.hotForwarded) / secs,
		hotServed:    (c.hotServed - b.hotServed) / secs,
		nodeReads:    (c.nodeReads - b.nodeReads) / secs,
		ok:           true,
	}
}

// summarize averages each phase's seconds, leaving out the first seconds
// of the hot and limited phases, while the change takes hold, and the
// warmup.
func (g *goodput) summarize(seconds []load.Second) goodputResult {
	starts := map[string]time.Duration{phaseBaseline: g.warmup, phaseHot: g.warmup + g.phase + settle,
		phaseLimited: g.warmup + 2*g.phase + settle, phaseServed: g.warmup + 3*g.phase + settle}
	var res goodputResult
	for _, name := range g.phases() {
		f := phaseFigures{name: name}
		for _, s := range seconds {
			if s.Phase != name || s.T-s.Length < starts[name] || len(s.Loaders) < 2 {
				continue
			}
			secs := s.Length.Seconds()
			u, h := s.Loaders[0], s.Loaders[1]
			f.seconds++
			f.goodput += float64(u.Succeeded) / secs
			f.uniformRejected += float64(u.Rejected) / secs
			f.p99 += float64(u.P99) / 1e3
			f.hotAccepted += float64(h.Succeeded) / secs
			f.hotRejected += float64(h.Rejected) / secs
			f.hotFailed += float64(h.Failed) / secs
		}
		if n := float64(f.seconds); n > 0 {
			f.goodput /= n
			f.uniformRejected /= n
			f.p99 /= n
			f.hotAccepted /= n
			f.hotRejected /= n
			f.hotFailed /= n
		}
		res.phases = append(res.phases, f)
	}
	return res
}

func (r goodputResult) write(w io.Writer, g *goodput) {
	fmt.Fprintf(w, "| phase | seconds | uniform goodput req/s | vs alone | uniform p99 (mean of seconds) | hot answered/s (goodput) | hot rejected/s |\n")
	fmt.Fprintf(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	base := r.phases[0].goodput
	for _, f := range r.phases {
		fmt.Fprintf(w, "| %s | %d | %.0f | %.0f%% | %s | %.0f | %.0f |\n", f.name, f.seconds, f.goodput,
			100*f.goodput/max(base, 1), load.FormatLatency(time.Duration(f.p99*1e3)), f.hotAccepted, f.hotRejected)
	}
	lim := r.phases[2]
	fmt.Fprintf(w, "\nWith the limit on, the uniform workload's goodput is %.0f%% of its level alone (target: at least 90%%),\n"+
		"and the hot partition's accepted rate is %.0f/s against a limit of %d/s (%+.1f%%; target: within 10%%).\n",
		100*lim.goodput/max(base, 1), lim.hotAccepted, g.limit, 100*(lim.hotAccepted/float64(g.limit)-1))
	if len(r.phases) == 4 {
		sv, u := r.phases[3], r.upstream
		fmt.Fprintf(w, "\nWith its hot reads served (coalescing, cache_ttl %s), the hot partition gets %.0f answers/s and %.0f refusals/s,\n"+
			"and the uniform workload's goodput is %.0f%% of its level alone (target: at least 95%%).\n", g.cacheTTL, sv.hotAccepted, sv.hotRejected, 100*sv.goodput/max(base, 1))
		if u.ok {
			fmt.Fprintf(w, "Over that phase, per second: the hot partition's reads that reached the node, counted by cqlguard: %.1f (served by cqlguard: %.0f);\n"+
				"every request cqlguard forwarded: %.0f; reads of bench.kv the node coordinated (system_views.coordinator_read_latency): %.0f (%+.2f%% of cqlguard's count).\n",
				u.hotForwarded, u.hotServed, u.forwarded, u.nodeReads, 100*(u.nodeReads/max(u.forwarded, 1)-1))
		}
	}
	fmt.Fprintf(w, "Plot: %s\n", g.out)
}

// plot draws the uniform loader's goodput and the hot loader's accepted
// rate per second, with the phases marked, into g.out as a PNG.
func (g *goodput) plot(seconds []load.Second) error {
	var uniform, hot plotter.XYs
	for _, s := range seconds {
		if len(s.Loaders) < 2 {
			continue
		}
		t, secs := s.T.Seconds(), s.Length.Seconds()
		uniform = append(uniform, plotter.XY{X: t, Y: float64(s.Loaders[0].Succeeded) / secs})
		hot = append(hot, plotter.XY{X: t, Y: float64(s.Loaders[1].Succeeded) / secs})
	}
	if len(uniform) == 0 {
		return errors.New("goodput: no seconds to plot")
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("cqlguard goodput: uniform reads beside a hot partition (limit %d %ss/s)", g.limit, g.hotOp)
	p.X.Label.Text, p.Y.Label.Text = "seconds", "requests/s"
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	top := 0.0
	for _, series := range []struct {
		name  string
		xys   plotter.XYs
		color color.RGBA
	}{
		{"uniform reads: goodput (succeeded/s)", uniform, color.RGBA{0x1f, 0x77, 0xb4, 0xff}},
		{"hot partition " + g.hotOp + "s: answered/s", hot, color.RGBA{0xd6, 0x27, 0x28, 0xff}},
	} {
		line, err := plotter.NewLine(series.xys)
		if err != nil {
			return fmt.Errorf("goodput: %s: %w", series.name, err)
		}
		line.Color, line.Width = series.color, vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(series.name, line)
		for _, xy := range series.xys {
			top = max(top, xy.Y)
		}
	}
	// Room above the lines for the legend, and below it for the phases'
	// labels.
	p.Y.Max = top * 1.4
	for _, m := range []struct {
		at    time.Duration
		label string
	}{{g.warmup + g.phase, "hot loader starts"}, {g.warmup + 2*g.phase, "limit on (reload)"}, {g.warmup + 3*g.phase, "hot reads served (reload)"}}[:len(g.phases())-1] {
		x := m.at.Seconds()
		mark, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: p.Y.Max}})
		if err != nil {
			return err
		}
		mark.Color, mark.Dashes = color.Gray{Y: 0x80}, []vg.Length{vg.Points(4), vg.Points(3)}
		labels, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: x, Y: top * 1.12}}, Labels: []string{" " + m.label}})
		if err != nil {
			return err
		}
		p.Add(mark, labels)
	}
	p.Legend.Top = true
	if err := os.MkdirAll(filepath.Dir(g.out), 0o755); err != nil {
		return err
	}
	if err := p.Save(10*vg.Inch, 5*vg.Inch, g.out); err != nil {
		return fmt.Errorf("writing %s: %w", g.out, err)
	}
	return nil
}

// pinNode gives the node, process pid, the last CPU and this process, with
// cqlguard and the loaders it starts, the others: what the loaders and
// cqlguard spend, on refused requests above all, then does not come out of
// the node's CPU, as when the cluster runs on machines of its own. It
// returns a function that gives the node every CPU again.
func pinNode(pid int, stderr io.Writer) (func(), error) {
	n := runtime.NumCPU()
	if n < 2 {
		return nil, errors.New("pinning the node: it needs two CPUs or more")
	}
	node, rest, all := strconv.Itoa(n-1), fmt.Sprintf("0-%d", n-2), fmt.Sprintf("0-%d", n-1)
	for _, args := range [][]string{
		{"-a", "-p", "-c", node, strconv.Itoa(pid)},
		{"-a", "-p", "-c", rest, strconv.Itoa(os.Getpid())},
	} {
		if out, err := exec.Command("taskset", args...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("pinning the node: taskset %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	fmt.Fprintf(stderr, "pinned: the node (pid %d) on CPU %s, cqlguard and the loaders on CPUs %s\n", pid, node, rest)
	return func() {
		exec.Command("taskset", "-a", "-p", "-c", all, strconv.Itoa(pid)).Run()
	}, nil
}
