package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"strings"
	"syscall"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/cqlguard/cqlguard/test/load"
)

// classesExp runs the client classes experiment against a real node: two
// applications, each a client class of its own by the APPLICATION_NAME its
// connections send, share the node through cqlguard. The light one reads
// single rows of bench.kv, the heavy one whole partitions of bench.wide,
// hundreds of rows each; both offer far more than their budgets admit.
// Each class first runs alone, straight to the node and as fast as it
// answers, which measures what a request of each costs the node: its CPU
// at saturation over the requests answered. Then both run through
// cqlguard with equal budgets of requests (every request 1 RU), and then
// with equal budgets of request units priced by rows and bytes. It
// reports, per phase and class, the requests answered and refused, the
// request units charged, the latencies of answered requests, the reads the
// node counted and the node's work each class took (its requests times
// what one cost alone), and plots them per second.
type classesExp struct {
	nodeRun
	wide                               wideTable
	lightRate, heavyRate               float64
	lightConcurrency, heavyConcurrency int
	aloneConcurrency                   int
	requestBudget, unitBudget          float64
	units                              priceFlags
}

// priceFlags are the request_units of the RU phases.
type priceFlags struct{ fixed, perRow, perKiB, perMs float64 }

func runClasses(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := &classesExp{nodeRun: nodeRun{stdout: stdout, stderr: stderr}}
	fs := flag.NewFlagSet("classes", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.flags(fs, "the light class", "classes.png", 15*time.Second)
	c.wide.flags(fs, "the heavy class")
	fs.Float64Var(&c.lightRate, "light-rate", 20000, "reads a second the light class offers through cqlguard, kept when refused")
	fs.Float64Var(&c.heavyRate, "heavy-rate", 2000, "reads a second the heavy class offers through cqlguard, kept when refused")
	fs.IntVar(&c.lightConcurrency, "light-concurrency", 32, "requests in flight per connection of the light class through cqlguard, at most")
	fs.IntVar(&c.heavyConcurrency, "heavy-concurrency", 32, "requests in flight per connection of the heavy class through cqlguard, at most")
	fs.IntVar(&c.aloneConcurrency, "alone-concurrency", 64, "requests in flight per connection of each class alone, straight to the node")
	fs.Float64Var(&c.requestBudget, "request-budget", 1000, "each class's max_units_per_second in the phase of equal request budgets, where every request costs 1 RU")
	fs.Float64Var(&c.unitBudget, "unit-budget", 12000, "each class's max_units_per_second in the phase of equal RU budgets, with the request units of -fixed, -per-row, -per-kib and -per-ms")
	// A whole-partition read of 256 rows of 1 KiB cost the node 24 to 34
	// times what a single-row read did (29 in the median of six runs),
	// measured alone at saturation: these prices make it 31.8 RU to the
	// single-row read's 1.07, 29.7 times as much, leaning on rows and
	// bytes alike, as one shape of partition cannot tell them apart.
	// Latency is not priced: on a shared node it holds the time a request
	// waited behind the other class's, which would charge each class for
	// the other's work.
	fs.Float64Var(&c.units.fixed, "fixed", 1, "request_units.fixed of the RU phase")
	fs.Float64Var(&c.units.perRow, "per-row", 0.06, "request_units.per_row of the RU phase")
	fs.Float64Var(&c.units.perKiB, "per-kib", 0.06, "request_units.per_kib of the RU phase")
	fs.Float64Var(&c.units.perMs, "per-ms", 0, "request_units.per_ms of the RU phase")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.requestBudget <= 0 || c.unitBudget <= 0 {
		return errors.New("classes: -request-budget and -unit-budget must be positive")
	}
	if err := c.wide.validate(); err != nil {
		return fmt.Errorf("classes: %w", err)
	}
	return c.inTempDir("classes", func() error { return c.run(ctx) })
}

// The classes, by index in the figures.
const (
	light = iota
	heavy
	nClasses
)

var classNames = [nClasses]string{"light", "heavy"}

// classTables are the tables each class reads, in bench.
var classTables = [nClasses]string{"kv", "wide"}

// The phases, in order.
const (
	phaseLightAlone = "light alone"
	phaseHeavyAlone = "heavy alone"
	phaseRequests   = "equal request budgets"
	phaseUnits      = "equal RU budgets"
)

var classPhases = []string{phaseLightAlone, phaseHeavyAlone, phaseRequests, phaseUnits}

// phaseStart is when a phase begins, from the start of the measured run.
func (c *classesExp) phaseStart(name string) time.Duration {
	for i, p := range classPhases {
		if p == name {
			return time.Duration(i) * c.phase
		}
	}
	return 0
}

// budget is each class's budget in a phase; 0 for none, when the class
// runs alone, straight to the node.
func (c *classesExp) budget(phase string) float64 {
	switch phase {
	case phaseRequests:
		return c.requestBudget
	case phaseUnits:
		return c.unitBudget
	}
	return 0
}

func (c *classesExp) proxyAddr() string { return "127.0.0.1:9046" }

// config is cqlguard's configuration: the two classes matched by
// application name with equal budgets, of requests (every request 1 RU) or
// of request units.
func (c *classesExp) config(requests bool) string {
	u, budget := c.units, c.unitBudget
	if requests {
		u, budget = priceFlags{fixed: 1}, c.requestBudget
	}
	var b strings.Builder
	fmt.Fprintf(&b, "listen: %s\nupstreams: [%s]\nadmin:\n  listen: %s\nlog:\n  level: info\nclients:\n  classes:\n",
		c.proxyAddr(), c.upstream, adminAddr(c.proxyAddr()))
	for _, name := range classNames {
		fmt.Fprintf(&b, "    - name: %s\n      match: {application_names: [%s]}\n      max_units_per_second: %g\n", name, name, budget)
	}
	fmt.Fprintf(&b, "request_units: {fixed: %g, per_row: %g, per_kib: %g, per_ms: %g}\n", u.fixed, u.perRow, u.perKiB, u.perMs)
	return b.String()
}

// spec is the loader of class i through cqlguard, which names its
// application for cqlguard to match.
func (c *classesExp) spec(i int) load.Spec {
	s := load.DefaultSpec()
	s.Name, s.App, s.Addr, s.Username, s.Password = classNames[i], classNames[i], c.proxyAddr(), c.user, c.password
	s.Conns, s.Table = c.conns, classTables[i]
	if i == light {
		s.Keys, s.Rate, s.Concurrency = c.keys, c.lightRate, c.lightConcurrency
	} else {
		s.Keys, s.Rate, s.Concurrency = uint64(c.wide.partitions), c.heavyRate, c.heavyConcurrency
	}
	return s
}

// aloneSpec is the loader of class i alone: straight to the node, as fast
// as it answers, from the start of the phase to its end.
func (c *classesExp) aloneSpec(i int) load.Spec {
	s := c.spec(i)
	s.Name += " alone"
	s.Addr, s.Rate, s.Concurrency = c.upstream, 0, c.aloneConcurrency
	s.Start = c.phaseStart(classPhases[i])
	s.Stop = s.Start + c.phase
	return s
}

func (c *classesExp) run(ctx context.Context) error {
	if c.upstreamPID != 0 {
		restore, err := pinNode(c.upstreamPID, c.stderr)
		if err != nil {
			return err
		}
		defer restore()
	}
	node, err := c.connect()
	if err != nil {
		return err
	}
	defer node.Close()
	if err := c.createTables(ctx, node, c.wide); err != nil {
		return err
	}
	px, cfgPath, err := startCqlguard(ctx, c.cqlguard, c.dir, c.config(false), c.proxyAddr())
	if err != nil {
		return err
	}
	defer func() {
		px.Process.Signal(syscall.SIGTERM)
		px.Wait()
	}()

	idle := c.idleCPU(ctx)
	fmt.Fprintf(c.stderr, "warming up for %v\n", c.warmup)
	if c.warmup > 0 {
		if _, err := load.Run(ctx, []load.Spec{c.spec(light), c.spec(heavy)}, load.Options{Duration: c.warmup}); err != nil {
			return fmt.Errorf("warming up: %w", err)
		}
	}

	// Each class has a loader of its own for the phase it runs alone, and
	// one for the phases both run.
	var specs []load.Spec
	for i := range nClasses {
		both := c.spec(i)
		both.Start = c.phaseStart(phaseRequests)
		specs = append(specs, c.aloneSpec(i), both)
	}
	reload := func(requests bool) func(context.Context) error {
		return func(context.Context) error {
			if err := writeFileAtomic(cfgPath, []byte(c.config(requests))); err != nil {
				return err
			}
			return px.Process.Signal(syscall.SIGHUP)
		}
	}
	phases := []load.Phase{
		{Name: phaseLightAlone, At: 0},
		{Name: phaseHeavyAlone, At: c.phaseStart(phaseHeavyAlone)},
		{Name: phaseRequests, At: c.phaseStart(phaseRequests), Action: reload(true)},
		{Name: phaseUnits, At: c.phaseStart(phaseUnits), Action: reload(false)},
	}
	var jsonOut io.Writer
	if c.jsonPath != "" {
		f, err := os.Create(c.jsonPath)
		if err != nil {
			return err
		}
		defer f.Close()
		jsonOut = f
	}
	var seconds []classSecond
	prev := c.sample(ctx, node)
	total := time.Duration(len(classPhases)) * c.phase
	fmt.Fprintf(c.stderr, "running %v: %s\n", total, strings.Join(classPhases, ", "))
	_, err = load.Run(ctx, specs, load.Options{
		Duration: total, Phases: phases,
		Report: func(s load.Second) {
			now := c.sample(ctx, node)
			cs := newClassSecond(s, prev, now)
			prev = now
			seconds = append(seconds, cs)
			for _, e := range s.Events {
				fmt.Fprintf(c.stderr, "%7.1fs  event: %s\n", s.T.Seconds(), e)
			}
			cs.write(c.stderr)
			if jsonOut != nil {
				b, _ := json.Marshal(cs)
				fmt.Fprintf(jsonOut, "%s\n", b)
			}
		},
	})
	if err != nil {
		return err
	}
	res := c.summarize(seconds, idle)
	if err := c.plot(seconds, res); err != nil {
		return err
	}
	res.write(c.stdout, c)
	return nil
}

// writeFileAtomic writes a new file and renames it over path, so that
// cqlguard's watcher never reads it half written.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".new"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// idleCPU is the node's CPU, in milliseconds a second, with no load from
// the experiment: what its own chores (and any other client) take. NaN
// when the node's CPU is not measured.
func (c *classesExp) idleCPU(ctx context.Context) float64 {
	if c.upstreamPID == 0 {
		return math.NaN()
	}
	// Let the writes' aftermath (flushes, compactions) pass first.
	const wait, span = 3 * time.Second, 5 * time.Second
	if !load.SleepUntil(ctx, time.Now().Add(wait)) {
		return math.NaN()
	}
	from, err := sampleProc(c.upstreamPID)
	start := time.Now()
	if err != nil || !load.SleepUntil(ctx, start.Add(span)) {
		return math.NaN()
	}
	to, err := sampleProc(c.upstreamPID)
	if err != nil {
		return math.NaN()
	}
	idle := float64(to.cpu-from.cpu) / float64(time.Millisecond) / time.Since(start).Seconds()
	fmt.Fprintf(c.stderr, "the node idle: %.1f ms of CPU a second\n", idle)
	return idle
}

// classSample is a moment's running counts: cqlguard's request units and
// budget refusals by class, the node's reads of each class's table, and
// the node's CPU time. Each ok says whether its source answered.
type classSample struct {
	at                         time.Time
	units, refusals, nodeReads [nClasses]float64
	cpu                        time.Duration
	metricsOK, nodeOK, cpuOK   bool
}

func (c *classesExp) sample(ctx context.Context, node *gocql.Session) classSample {
	s := classSample{at: time.Now()}
	if m, err := scrape(ctx, "http://"+adminAddr(c.proxyAddr())+"/metrics"); err == nil {
		for i, name := range classNames {
			s.units[i] = m[`cqlguard_request_units_total{class="`+name+`"}`]
			s.refusals[i] = m[`cqlguard_client_budget_refusals_total{class="`+name+`"}`]
		}
		s.metricsOK = true
	}
	// Within the second, or the next seconds' figures come late; a count
	// missed leaves the phase's node reads unknown, nothing else.
	qctx, cancel := context.WithTimeout(ctx, 900*time.Millisecond)
	defer cancel()
	it := node.Query("SELECT table_name, count FROM system_views.coordinator_read_latency WHERE keyspace_name = 'bench'").IterContext(qctx)
	var table string
	var n int64
	for it.Scan(&table, &n) {
		for i, t := range classTables {
			if t == table {
				s.nodeReads[i] = float64(n)
			}
		}
	}
	s.nodeOK = it.Close() == nil
	if c.upstreamPID != 0 {
		if p, err := sampleProc(c.upstreamPID); err == nil {
			s.cpu, s.cpuOK = p.cpu, true
		}
	}
	return s
}

// classSecond is one second of the run: what each class got, and the
// node's CPU.
type classSecond struct {
	T      time.Duration            `json:"t_ns"`
	Length time.Duration            `json:"length_ns"`
	Phase  string                   `json:"phase"`
	Class  [nClasses]classPerSecond `json:"classes"`
	// NodeCPU is the node's CPU time in milliseconds a second.
	NodeCPU                  float64 `json:"node_cpu_ms"`
	MetricsOK, NodeOK, CPUOK bool    `json:"-"`
}

// classPerSecond is one class's second.
type classPerSecond struct {
	Answered, Refused, Failed float64       // the loaders' requests a second
	P50, P99                  time.Duration // of the answered requests
	Units, BudgetRefusals     float64       // cqlguard's: charged and refused a second
	NodeReads                 float64       // reads of the class's table the node coordinated, a second
}

// newClassSecond puts together the loaders' second s and the counts taken
// at its start (from) and end (to).
func newClassSecond(s load.Second, from, to classSample) classSecond {
	cs := classSecond{T: s.T, Length: s.Length, Phase: s.Phase}
	secs := s.Length.Seconds()
	for _, iv := range s.Loaders {
		i := light
		if strings.HasPrefix(iv.Loader, classNames[heavy]) {
			i = heavy
		}
		k := &cs.Class[i]
		k.Answered += float64(iv.Succeeded) / secs
		k.Refused += float64(iv.Rejected) / secs
		k.Failed += float64(iv.Failed) / secs
		// One loader of a class runs at a time, but for the drain of the
		// one that stopped.
		if iv.Succeeded > 0 {
			k.P50, k.P99 = max(k.P50, iv.OKP50), max(k.P99, iv.OKP99)
		}
	}
	span := to.at.Sub(from.at).Seconds()
	if span <= 0 {
		return cs
	}
	if cs.MetricsOK = from.metricsOK && to.metricsOK; cs.MetricsOK {
		for i := range cs.Class {
			cs.Class[i].Units = (to.units[i] - from.units[i]) / span
			cs.Class[i].BudgetRefusals = (to.refusals[i] - from.refusals[i]) / span
		}
	}
	if cs.NodeOK = from.nodeOK && to.nodeOK; cs.NodeOK {
		for i := range cs.Class {
			cs.Class[i].NodeReads = (to.nodeReads[i] - from.nodeReads[i]) / span
		}
	}
	if cs.CPUOK = from.cpuOK && to.cpuOK; cs.CPUOK {
		cs.NodeCPU = float64(to.cpu-from.cpu) / float64(time.Millisecond) / span
	}
	return cs
}

func (cs classSecond) write(w io.Writer) {
	for i, k := range cs.Class {
		fmt.Fprintf(w, "%7.1fs  %-22s %-6s answered %7.0f/s  refused %8.0f/s  RU %8.0f/s  p50 %8s  p99 %8s  node reads %7.0f/s",
			cs.T.Seconds(), cs.Phase, classNames[i], k.Answered, k.Refused, k.Units,
			load.FormatLatency(k.P50), load.FormatLatency(k.P99), k.NodeReads)
		if i == heavy && cs.CPUOK {
			fmt.Fprintf(w, "  node CPU %4.0f ms/s", cs.NodeCPU)
		}
		fmt.Fprintln(w)
	}
}

// classFigures are one class's means per second over a phase.
type classFigures struct {
	answered, refused, failed float64
	units, budgetRefusals     float64
	p50, p99                  time.Duration // means of the seconds' percentiles
	nodeReads                 float64
	// cpu is the node's work the class took, in ms of the node's CPU a
	// second: its answered requests times what one cost the node when the
	// class ran alone.
	cpu float64
}

// phaseResult is one phase's figures.
type phaseResult struct {
	name    string
	seconds int
	budget  float64
	class   [nClasses]classFigures
	// nodeCPU is the node's CPU in ms a second, NaN when not measured.
	nodeCPU float64
	// metrics and node say whether cqlguard's and the node's counts were
	// read in every second of the phase.
	metrics, node bool
}

type classesResult struct {
	phases []phaseResult
	// idle is the node's CPU with no load, ms a second; cost is what one
	// answered request of each class cost the node, in ms of CPU, from the
	// phase it ran alone, saturating the node, where the node spends
	// nothing waiting for work. NaN when the node's CPU is not measured.
	idle float64
	cost [nClasses]float64
}

// summarize averages each phase's seconds, leaving out the first seconds
// of each while its change takes hold, and attributes the node's CPU to
// the classes.
func (c *classesExp) summarize(seconds []classSecond, idle float64) classesResult {
	res := classesResult{idle: idle}
	for _, name := range classPhases {
		p := phaseResult{name: name, budget: c.budget(name), metrics: true, node: true, nodeCPU: math.NaN()}
		from := c.phaseStart(name) + settle
		var cpu float64
		cpuOK := true
		var p50, p99 [nClasses]float64
		for _, s := range seconds {
			if s.Phase != name || s.T-s.Length < from {
				continue
			}
			p.seconds++
			p.metrics = p.metrics && s.MetricsOK
			p.node = p.node && s.NodeOK
			cpuOK = cpuOK && s.CPUOK
			cpu += s.NodeCPU
			for i, k := range s.Class {
				f := &p.class[i]
				f.answered += k.Answered
				f.refused += k.Refused
				f.failed += k.Failed
				f.units += k.Units
				f.budgetRefusals += k.BudgetRefusals
				f.nodeReads += k.NodeReads
				p50[i] += float64(k.P50)
				p99[i] += float64(k.P99)
			}
		}
		if n := float64(p.seconds); n > 0 {
			for i := range p.class {
				f := &p.class[i]
				f.answered /= n
				f.refused /= n
				f.failed /= n
				f.units /= n
				f.budgetRefusals /= n
				f.nodeReads /= n
				f.p50, f.p99 = time.Duration(p50[i]/n), time.Duration(p99[i]/n)
			}
			if cpuOK {
				p.nodeCPU = cpu / n
			}
		} else {
			p.metrics, p.node = false, false
		}
		res.phases = append(res.phases, p)
	}
	for i := range nClasses {
		alone := res.phases[i]
		res.cost[i] = (alone.nodeCPU - idle) / alone.class[i].answered
		if alone.class[i].answered == 0 {
			res.cost[i] = math.NaN()
		}
	}
	for j := range res.phases {
		for i := range nClasses {
			res.phases[j].class[i].cpu = res.cost[i] * res.phases[j].class[i].answered
		}
	}
	return res
}

// share is the class's part of the node's CPU the classes took.
func (p phaseResult) share(i int) float64 {
	return p.class[i].cpu / (p.class[light].cpu + p.class[heavy].cpu)
}

func (r classesResult) write(w io.Writer, c *classesExp) {
	fmt.Fprintf(w, "Light: single-row reads of bench.kv (%d partitions). Heavy: whole-partition reads of bench.wide (%d partitions of %d rows of %d bytes).\n",
		c.keys, c.wide.partitions, c.wide.rows, c.wide.rowBytes)
	fmt.Fprintf(w, "Alone: each class straight to the node, %d connections of %d requests in flight. Through cqlguard: light offers %.0f/s, heavy %.0f/s.\n",
		c.conns, c.aloneConcurrency, c.lightRate, c.heavyRate)
	fmt.Fprintf(w, "Prices: %q every request 1 RU; %q fixed %g, per_row %g, per_kib %g, per_ms %g.\n\n",
		phaseRequests, phaseUnits, c.units.fixed, c.units.perRow, c.units.perKiB, c.units.perMs)
	fmt.Fprintf(w, "| phase | class | budget RU/s | answered/s | refused/s | RU/s charged | RU/s vs budget | RU per request | p50 | p99 | node reads/s | node work ms/s | share of the classes' node work |\n")
	fmt.Fprintf(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, p := range r.phases {
		both := p.class[light].answered > 0 && p.class[heavy].answered > 0
		for i, f := range p.class {
			if f.answered == 0 && f.refused == 0 {
				continue
			}
			budgeted := p.metrics && p.budget > 0
			fmt.Fprintf(w, "| %s | %s | %s | %.0f | %.0f | %s | %s | %s | %s | %s | %s | %s | %s |\n",
				p.name, classNames[i], orDash(p.budget > 0, "%g", p.budget), f.answered, f.refused,
				orDash(budgeted, "%.0f", f.units), orDash(budgeted, "%+.1f%%", 100*(f.units/p.budget-1)),
				orDash(budgeted && f.answered > 0, "%.2f", f.units/f.answered),
				load.FormatLatency(f.p50), load.FormatLatency(f.p99),
				orDash(p.node, "%.0f", f.nodeReads), orDash(true, "%.0f", f.cpu),
				orDash(both, "%.0f%%", 100*p.share(i)))
		}
	}
	req, units := r.phases[2], r.phases[3]
	if !math.IsNaN(r.idle) {
		fmt.Fprintf(w, "\nThe node's CPU, ms a second (one CPU of its own: 1000 is all of it); idle: %.0f.\n", r.idle)
		fmt.Fprintf(w, "| phase | measured | light's work | heavy's work | neither's (idle, and time spent waiting for work) |\n| --- | ---: | ---: | ---: | ---: |\n")
		for _, p := range r.phases {
			fmt.Fprintf(w, "| %s | %.0f | %.0f | %.0f | %.0f |\n", p.name, p.nodeCPU, p.class[light].cpu, p.class[heavy].cpu, p.nodeCPU-p.class[light].cpu-p.class[heavy].cpu)
		}
		fmt.Fprintf(w, "\nAlone, saturating the node (%.0f and %.0f ms/s of CPU), a light read cost it %.1f µs of CPU and a heavy read %.0f µs (%.1f times as much);\n",
			r.phases[0].nodeCPU, r.phases[1].nodeCPU, 1e3*r.cost[light], 1e3*r.cost[heavy], r.cost[heavy]/r.cost[light])
		if l, h := units.class[light], units.class[heavy]; units.metrics && l.answered > 0 && h.answered > 0 {
			rl, rh := l.units/l.answered, h.units/h.answered
			fmt.Fprintf(w, "with equal RU budgets they were priced at %.2f and %.2f RU (%.1f times as much): %.1f and %.1f RU per ms of the node's work.\n",
				rl, rh, rh/rl, rl/r.cost[light], rh/r.cost[heavy])
		}
	}
	fmt.Fprintf(w, "\nWith equal request budgets (%g requests/s each), light had %.0f reads/s answered and heavy %.0f; heavy took %s of the node's work the classes took.\n",
		c.requestBudget, req.class[light].answered, req.class[heavy].answered, orDash(!math.IsNaN(req.share(heavy)), "%.0f%%", 100*req.share(heavy)))
	fmt.Fprintf(w, "With equal RU budgets (%g RU/s each), light was charged %s RU/s (%s) and heavy %s (%s); target: within 10%% of the budget.\n",
		c.unitBudget, orDash(units.metrics, "%.0f", units.class[light].units), orDash(units.metrics, "%+.1f%%", 100*(units.class[light].units/c.unitBudget-1)),
		orDash(units.metrics, "%.0f", units.class[heavy].units), orDash(units.metrics, "%+.1f%%", 100*(units.class[heavy].units/c.unitBudget-1)))
	half := (units.class[light].cpu + units.class[heavy].cpu) / 2
	fmt.Fprintf(w, "Of the node's work they took %s and %s ms/s (%s and %s of an equal share).\n",
		orDash(true, "%.0f", units.class[light].cpu), orDash(true, "%.0f", units.class[heavy].cpu),
		orDash(true, "%+.1f%%", 100*(units.class[light].cpu/half-1)), orDash(true, "%+.1f%%", 100*(units.class[heavy].cpu/half-1)))
	fmt.Fprintf(w, "Plot: %s\n", c.out)
}

// orDash formats v, or writes a dash when it is not known.
func orDash(ok bool, format string, v float64) string {
	if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

// classColors are the classes' lines.
var classColors = [nClasses]color.RGBA{{0x1f, 0x77, 0xb4, 0xff}, {0xd6, 0x27, 0x28, 0xff}}

// runs reports whether class i runs in a phase.
func runs(i int, phase string) bool {
	return phase != classPhases[1-i]
}

// segments are a line broken where it has no points.
type segments []plotter.XYs

// add appends xy to the last segment, or starts one after a break.
func (s *segments) add(xy plotter.XY, broken bool) {
	if broken || len(*s) == 0 {
		*s = append(*s, nil)
	}
	(*s)[len(*s)-1] = append((*s)[len(*s)-1], xy)
}

// plot draws, per second, the request units charged to each class beside
// its budget, the requests each had answered (on a log scale: alone, each
// runs as fast as the node answers), and the node's CPU, measured and
// taken by each class's work, one above the other, into c.out as a PNG.
func (c *classesExp) plot(seconds []classSecond, res classesResult) error {
	if len(seconds) == 0 {
		return errors.New("classes: no seconds to plot")
	}
	var units, answered, work [nClasses]segments
	var budget, nodeCPU segments
	var prev [nClasses]bool
	prevBudget := false
	for _, s := range seconds {
		t := s.T.Seconds()
		b := c.budget(s.Phase)
		for i, k := range s.Class {
			on := runs(i, s.Phase)
			if !on {
				prev[i] = false
				continue
			}
			if s.MetricsOK && b > 0 {
				units[i].add(plotter.XY{X: t, Y: k.Units}, !prev[i] || len(units[i]) == 0)
			}
			if k.Answered > 0 {
				answered[i].add(plotter.XY{X: t, Y: k.Answered}, !prev[i])
			}
			if !math.IsNaN(res.cost[i]) {
				work[i].add(plotter.XY{X: t, Y: res.cost[i] * k.Answered}, !prev[i])
			}
			prev[i] = true
		}
		if b > 0 {
			budget.add(plotter.XY{X: t - s.Length.Seconds(), Y: b}, !prevBudget)
			budget.add(plotter.XY{X: t, Y: b}, false)
		}
		prevBudget = b > 0
		if s.CPUOK {
			nodeCPU.add(plotter.XY{X: t, Y: s.NodeCPU}, false)
		}
	}
	type series struct {
		name   string
		segs   segments
		color  color.Color
		dashed bool
	}
	panel := func(title, ylabel string, log bool, ss []series) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, "seconds", ylabel
		p.Add(plotter.NewGrid())
		top := 1.0
		for _, s := range ss {
			for k, seg := range s.segs {
				line, err := plotter.NewLine(seg)
				if err != nil {
					return nil, fmt.Errorf("classes: %s: %w", s.name, err)
				}
				line.Color, line.Width = s.color, vg.Points(1.5)
				if s.dashed {
					line.Dashes, line.Width = []vg.Length{vg.Points(4), vg.Points(3)}, vg.Points(1)
				}
				p.Add(line)
				if k == 0 {
					p.Legend.Add(s.name, line)
				}
				for _, xy := range seg {
					top = max(top, xy.Y)
				}
			}
		}
		// Room above the lines for the legend and the phases' names.
		p.Y.Min, p.Y.Max = 0, top*1.6
		if log {
			p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
			p.Y.Min, p.Y.Max = 10, top*30
		}
		label := p.Y.Max * 0.93
		if log {
			label = p.Y.Max / 1.6
		}
		for _, name := range classPhases {
			x := c.phaseStart(name).Seconds()
			mark, err := plotter.NewLine(plotter.XYs{{X: x, Y: p.Y.Min}, {X: x, Y: p.Y.Max}})
			if err != nil {
				return nil, err
			}
			mark.Color, mark.Dashes = color.Gray{Y: 0x80}, []vg.Length{vg.Points(2), vg.Points(2)}
			labels, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: x, Y: label}}, Labels: []string{" " + name}})
			if err != nil {
				return nil, err
			}
			p.Add(mark, labels)
		}
		p.X.Min, p.X.Max = 0, seconds[len(seconds)-1].T.Seconds()
		// Top left, below the phases' names: the first phases leave room
		// there.
		p.Legend.Top, p.Legend.Left = true, true
		p.Legend.XOffs, p.Legend.YOffs = vg.Points(8), -vg.Points(22)
		return p, nil
	}
	gray := color.Gray{Y: 0x40}
	ru, err := panel("Request units charged per class through cqlguard (cqlguard_request_units_total)", "RU/s", false, []series{
		{"light", units[light], classColors[light], false}, {"heavy", units[heavy], classColors[heavy], false},
		{"each class's budget", budget, gray, true},
	})
	if err != nil {
		return err
	}
	rq, err := panel("Requests answered per class (alone: straight to the node, as fast as it answers)", "requests/s", true, []series{
		{"light: single-row reads", answered[light], classColors[light], false},
		{"heavy: whole-partition reads", answered[heavy], classColors[heavy], false},
	})
	if err != nil {
		return err
	}
	panels := [][]*plot.Plot{{ru}, {rq}}
	if len(nodeCPU) > 0 {
		cp, err := panel("The node's CPU: measured, and each class's work (requests answered × what one cost alone)", "ms of CPU a second", false, []series{
			{"light's work", work[light], classColors[light], false}, {"heavy's work", work[heavy], classColors[heavy], false},
			{"node, measured", nodeCPU, gray, true},
		})
		if err != nil {
			return err
		}
		panels = append(panels, []*plot.Plot{cp})
	}
	return savePanels(c.out, panels)
}
