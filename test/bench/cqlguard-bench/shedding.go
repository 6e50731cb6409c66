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
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/test/load"
)

// sheddingExp runs the shedding experiment against a real node: an
// interactive class of single-row reads at a fixed rate, tier 0, runs
// alone through cqlguard; then a batch class of whole-partition reads,
// tier 5, joins it at a light rate the node answers easily, where
// nothing should be shed; then the batch class offers more than the node
// answers and saturates it. The three phases run twice, each time with a
// cqlguard of its own, as the shedding section takes effect on restart
// only: without shedding, then with it. It reports, per half and phase,
// the interactive class's goodput and latencies, what the batch class
// had answered and shed, and cqlguard's shedding signals, and plots them
// per second.
type sheddingExp struct {
	nodeRun
	wide                                       wideTable
	interactiveRate, lightBatchRate, batchRate float64
	interactiveConcurrency                     int
	batchConcurrency                           int
	shortWindow, longWindow                    time.Duration
	ratioBelow, ratioRecover                   float64
	latencyFloor                               time.Duration
	// lightPhase is the light-batch phase's length; lightOnly runs the
	// half with shedding alone, through the first two phases only.
	lightPhase time.Duration
	lightOnly  bool
	// tracePath receives cqlguard's /shed/trace at the end of the half
	// with shedding.
	tracePath string
}

func runShedding(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	e := &sheddingExp{nodeRun: nodeRun{stdout: stdout, stderr: stderr}}
	fs := flag.NewFlagSet("shedding", flag.ContinueOnError)
	fs.SetOutput(stderr)
	e.flags(fs, "the interactive class", "shedding.png", 10*time.Second)
	e.wide.flags(fs, "the batch class")
	fs.Float64Var(&e.interactiveRate, "interactive-rate", 5000, "reads a second the interactive class offers, well under what the node answers alone")
	fs.IntVar(&e.interactiveConcurrency, "interactive-concurrency", 64, "requests in flight per connection of the interactive class, at most")
	// The node answered about 2,100 whole-partition reads a second at
	// 128 in flight: 100 is about 5% of that, which it answers without
	// slowing; 4,000 keeps it saturated without shedding, and with
	// shedding keeps the refused requests to what a batch job would send
	// rather than a loop as fast as cqlguard refuses.
	// At 100 a second (5% of what the node answers) the interactive
	// class's p99 tripled without shedding, and at 20 it doubled: not a
	// healthy load for it. At 5 it stays within its run-to-run noise.
	fs.Float64Var(&e.lightBatchRate, "light-batch-rate", 5, "reads a second the batch class offers in the light-batch phase: about 0.25% of the 2,100 whole-partition reads a second the node answered at 128 in flight, a load the interactive class hardly notices")
	fs.Float64Var(&e.batchRate, "batch-rate", 4000, "reads a second the batch class offers in the heavy-batch phase, kept when refused (0: as fast as its requests in flight allow)")
	fs.IntVar(&e.batchConcurrency, "batch-concurrency", 64, "requests in flight per connection of the batch class, at most")
	fs.DurationVar(&e.shortWindow, "short-window", 0, "shedding.short_window (0: the default)")
	fs.DurationVar(&e.longWindow, "long-window", 0, "shedding.long_window (0: the default); the phase alone should fill it")
	fs.Float64Var(&e.ratioBelow, "ratio-below", 0, "shedding.ratio_below (0: the default)")
	fs.Float64Var(&e.ratioRecover, "ratio-recover", 0, "shedding.ratio_recover (0: the default)")
	fs.DurationVar(&e.latencyFloor, "latency-floor", 0, "shedding.latency_floor (0: the default)")
	fs.DurationVar(&e.lightPhase, "light-phase", 0, "length of the light-batch phase (0: -phase)")
	fs.BoolVar(&e.lightOnly, "light-only", false, "run only the half with shedding, through the phases alone and with the light batch: how long a healthy node goes without a false start")
	fs.StringVar(&e.tracePath, "trace", "", "write cqlguard's shedding updates (/shed/trace, the last 2 minutes) at the end of the half with shedding to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if e.interactiveRate <= 0 || e.lightBatchRate <= 0 || e.phase < 2*settle || e.light() < 2*settle {
		return errors.New("shedding: -interactive-rate and -light-batch-rate must be positive and -phase and -light-phase at least 6s")
	}
	return e.inTempDir("shedding", func() error { return e.run(ctx) })
}

// The classes, by index in the figures.
const (
	interactive = iota
	batch
	nShedClasses
)

var shedClassNames = [nShedClasses]string{"interactive", "batch"}

// shedClassTiers are the classes' tiers: the interactive class is never
// shed, the batch class first.
var shedClassTiers = [nShedClasses]int{0, 5}

// The halves and phases, in order. The node is healthy through the
// first two phases: nothing should be shed there.
const (
	halfOff         = "without shedding"
	halfOn          = "with shedding"
	phaseAlone      = "interactive alone"
	phaseLightBatch = "light batch"
	phaseHeavyBatch = "heavy batch"
)

var (
	shedHalves = []string{halfOff, halfOn}
	shedPhases = []string{phaseAlone, phaseLightBatch, phaseHeavyBatch}
)

// The batch class's loaders, one a phase: the same application name, so
// the same class and tier, at two rates.
const (
	lightBatchLoader = "batch-light"
	heavyBatchLoader = "batch-heavy"
)

func (e *sheddingExp) proxyAddr() string { return "127.0.0.1:9048" }

// config is cqlguard's configuration: the two classes matched by
// application name with their tiers and no budgets, shedding on or off.
// A shed request is answered with Config_error, which the loaders count
// as refused, where Overloaded would be counted as failed.
func (e *sheddingExp) config(shedding bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: %s\nupstreams: [%s]\nadmin:\n  listen: %s\nlog:\n  level: info\nclients:\n  classes:\n",
		e.proxyAddr(), e.upstream, adminAddr(e.proxyAddr()))
	for i, name := range shedClassNames {
		fmt.Fprintf(&b, "    - name: %s\n      tier: %d\n      match: {application_names: [%s]}\n", name, shedClassTiers[i], name)
	}
	fmt.Fprintf(&b, "shedding:\n  enabled: %t\n  error: config_error\n", shedding)
	if e.shortWindow > 0 {
		fmt.Fprintf(&b, "  short_window: %v\n", e.shortWindow)
	}
	if e.longWindow > 0 {
		fmt.Fprintf(&b, "  long_window: %v\n", e.longWindow)
	}
	if e.ratioBelow > 0 {
		fmt.Fprintf(&b, "  ratio_below: %v\n", e.ratioBelow)
	}
	if e.ratioRecover > 0 {
		fmt.Fprintf(&b, "  ratio_recover: %v\n", e.ratioRecover)
	}
	if e.latencyFloor > 0 {
		fmt.Fprintf(&b, "  latency_floor: %v\n", e.latencyFloor)
	}
	return b.String()
}

// light is the light-batch phase's length.
func (e *sheddingExp) light() time.Duration {
	if e.lightPhase > 0 {
		return e.lightPhase
	}
	return e.phase
}

// halves are the halves run, in order.
func (e *sheddingExp) halves() []string {
	if e.lightOnly {
		return []string{halfOn}
	}
	return shedHalves
}

// phases are the phases run and when each starts within a half, and the
// half's length.
func (e *sheddingExp) phases() (names []string, starts []time.Duration, length time.Duration) {
	names, starts = shedPhases, []time.Duration{0, e.phase, e.phase + e.light()}
	if e.lightOnly {
		return names[:2], starts[:2], e.phase + e.light()
	}
	return names, starts, 2*e.phase + e.light()
}

// spec is a loader of class i through cqlguard, running for the whole
// run: the interactive class at its rate, the batch class at the heavy
// rate.
func (e *sheddingExp) spec(i int) load.Spec {
	s := load.DefaultSpec()
	s.Name, s.App, s.Addr, s.Username, s.Password = shedClassNames[i], shedClassNames[i], e.proxyAddr(), e.user, e.password
	s.Conns = e.conns
	if i == interactive {
		s.Table, s.Keys, s.Rate, s.Concurrency = "kv", e.keys, e.interactiveRate, e.interactiveConcurrency
	} else {
		s.Table, s.Keys, s.Rate, s.Concurrency = "wide", uint64(e.wide.partitions), e.batchRate, e.batchConcurrency
	}
	return s
}

// loaders are a half's loaders: the interactive class through the three
// phases, and the batch class at the light rate through the second and
// at the heavy rate through the third.
func (e *sheddingExp) loaders() []load.Spec {
	light, heavy := e.spec(batch), e.spec(batch)
	light.Name, light.Rate, light.Start, light.Stop = lightBatchLoader, e.lightBatchRate, e.phase, e.phase+e.light()
	heavy.Name, heavy.Start = heavyBatchLoader, e.phase+e.light()
	if e.lightOnly {
		return []load.Spec{e.spec(interactive), light}
	}
	return []load.Spec{e.spec(interactive), light, heavy}
}

func (e *sheddingExp) run(ctx context.Context) error {
	if e.upstreamPID != 0 {
		restore, err := pinNode(e.upstreamPID, e.stderr)
		if err != nil {
			return err
		}
		defer restore()
	}
	// The tables are those of the client classes experiment.
	node, err := e.connect()
	if err != nil {
		return err
	}
	err = e.createTables(ctx, node, e.wide)
	node.Close()
	if err != nil {
		return err
	}
	var jsonOut io.Writer
	if e.jsonPath != "" {
		f, err := os.Create(e.jsonPath)
		if err != nil {
			return err
		}
		defer f.Close()
		jsonOut = f
	}
	var seconds []shedSecond
	for _, half := range e.halves() {
		s, err := e.runHalf(ctx, half, jsonOut)
		if err != nil {
			return fmt.Errorf("%s: %w", half, err)
		}
		seconds = append(seconds, s...)
	}
	res := summarizeShedding(seconds)
	if e.lightOnly {
		e.out = "" // the plot's layout is the two halves' three phases
	} else if err := e.plot(seconds); err != nil {
		return err
	}
	res.write(e.stdout, e)
	return nil
}

// runHalf starts a cqlguard with shedding on or off, warms it and the
// node with the interactive class, runs the three phases and stops it.
func (e *sheddingExp) runHalf(ctx context.Context, half string, jsonOut io.Writer) ([]shedSecond, error) {
	px, _, err := startCqlguard(ctx, e.cqlguard, e.dir, e.config(half == halfOn), e.proxyAddr())
	if err != nil {
		return nil, err
	}
	defer func() {
		px.Process.Signal(syscall.SIGTERM)
		px.Wait()
	}()
	fmt.Fprintf(e.stderr, "%s: warming up for %v\n", half, e.warmup)
	if e.warmup > 0 {
		if _, err := load.Run(ctx, []load.Spec{e.spec(interactive)}, load.Options{Duration: e.warmup}); err != nil {
			return nil, fmt.Errorf("warming up: %w", err)
		}
	}
	metricsURL := "http://" + adminAddr(e.proxyAddr()) + "/metrics"
	var seconds []shedSecond
	prev := sampleShedding(ctx, metricsURL)
	var phases []load.Phase
	names, starts, run := e.phases()
	for j, name := range names {
		phases = append(phases, load.Phase{Name: name, At: starts[j]})
	}
	fmt.Fprintf(e.stderr, "%s: running %v: %s\n", half, run, strings.Join(names, ", "))
	_, err = load.Run(ctx, e.loaders(), load.Options{
		Duration: run,
		Phases:   phases,
		Report: func(s load.Second) {
			now := sampleShedding(ctx, metricsURL)
			ss := newShedSecond(half, s, prev, now)
			prev = now
			seconds = append(seconds, ss)
			ss.write(e.stderr)
			if jsonOut != nil {
				b, _ := json.Marshal(ss)
				fmt.Fprintf(jsonOut, "%s\n", b)
			}
		},
	})
	if err == nil && half == halfOn && e.tracePath != "" {
		err = saveTrace(ctx, "http://"+adminAddr(e.proxyAddr())+"/shed/trace", e.tracePath)
	}
	return seconds, err
}

// saveTrace writes what url answers to path.
func saveTrace(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("shedding trace: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("shedding trace: %s", resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("shedding trace: %w", err)
	}
	return os.WriteFile(path, b, 0o644)
}

// shedSample is a moment's shedding figures from cqlguard's metrics: the
// requests shed so far by class tier, and the gauges of the one node.
type shedSample struct {
	at              time.Time
	shed            [nShedClasses]float64
	ratio, pressure float64
	ok              bool
}

func sampleShedding(ctx context.Context, url string) shedSample {
	s := shedSample{at: time.Now(), ratio: math.NaN(), pressure: math.NaN()}
	m, err := scrape(ctx, url)
	if err != nil {
		return s
	}
	s.ok = true
	for i, tier := range shedClassTiers {
		s.shed[i] = m.sum("cqlguard_shed_requests_total", fmt.Sprintf("tier=%q", fmt.Sprint(tier)), `outcome="shed"`)
	}
	// Without shedding the gauges are not registered: they stay unknown.
	if hasSeries(m, "cqlguard_shed_latency_ratio") {
		s.ratio, s.pressure = m.sum("cqlguard_shed_latency_ratio"), m.sum("cqlguard_shed_pressure_tiers")
	}
	return s
}

// hasSeries reports whether m holds a series of the metric name.
func hasSeries(m metrics, name string) bool {
	for series := range m {
		if n, _, _ := strings.Cut(series, "{"); n == name {
			return true
		}
	}
	return false
}

// shedSecond is one second of a half.
type shedSecond struct {
	Half   string                           `json:"half"`
	T      time.Duration                    `json:"t_ns"`
	Length time.Duration                    `json:"length_ns"`
	Phase  string                           `json:"phase"`
	Class  [nShedClasses]shedClassPerSecond `json:"classes"`
	// Ratio and Pressure are cqlguard_shed_latency_ratio and
	// cqlguard_shed_pressure_tiers at the second's end, NaN without
	// shedding.
	Ratio    float64 `json:"ratio"`
	Pressure float64 `json:"pressure_tiers"`
	// MetricsOK says whether cqlguard's metrics were read at both ends.
	MetricsOK bool `json:"metrics_ok"`
}

// shedClassPerSecond is one class's second.
type shedClassPerSecond struct {
	Answered, Refused, Failed float64       // the loader's requests a second
	P50, P99                  time.Duration // of the answered requests
	Shed                      float64       // cqlguard_shed_requests_total of the class's tier, a second
}

// newShedSecond puts together the loaders' second s and the samples taken
// at its start (from) and end (to). A class's counts are the sum of its
// loaders'; its latencies are those of the loader that had the most
// answered, as the other one is starting or draining.
func newShedSecond(half string, s load.Second, from, to shedSample) shedSecond {
	ss := shedSecond{Half: half, T: s.T, Length: s.Length, Phase: s.Phase, Ratio: to.ratio, Pressure: to.pressure}
	secs := s.Length.Seconds()
	var most [nShedClasses]uint64
	for _, iv := range s.Loaders {
		i := interactive
		switch iv.Loader {
		case lightBatchLoader, heavyBatchLoader:
			i = batch
		}
		k := &ss.Class[i]
		k.Answered += float64(iv.Succeeded) / secs
		k.Refused += float64(iv.Rejected) / secs
		k.Failed += float64(iv.Failed) / secs
		if iv.Succeeded > most[i] {
			k.P50, k.P99, most[i] = iv.OKP50, iv.OKP99, iv.Succeeded
		}
	}
	span := to.at.Sub(from.at).Seconds()
	if ss.MetricsOK = from.ok && to.ok && span > 0; ss.MetricsOK {
		for i := range ss.Class {
			ss.Class[i].Shed = (to.shed[i] - from.shed[i]) / span
		}
	}
	return ss
}

// MarshalJSON writes the unknown gauges as null: JSON has no NaN.
func (ss shedSecond) MarshalJSON() ([]byte, error) {
	type plain shedSecond
	v := struct {
		plain
		Ratio    *float64 `json:"ratio"`
		Pressure *float64 `json:"pressure_tiers"`
	}{plain: plain(ss)}
	if !math.IsNaN(ss.Ratio) {
		v.Ratio, v.Pressure = &ss.Ratio, &ss.Pressure
	}
	return json.Marshal(v)
}

func (ss shedSecond) write(w io.Writer) {
	for i, k := range ss.Class {
		fmt.Fprintf(w, "%7.1fs  %-16s %-17s %-11s answered %6.0f/s  refused %6.0f/s  failed %5.0f/s  shed %6.0f/s  p50 %8s  p99 %8s",
			ss.T.Seconds(), ss.Half, ss.Phase, shedClassNames[i], k.Answered, k.Refused, k.Failed, k.Shed,
			load.FormatLatency(k.P50), load.FormatLatency(k.P99))
		if i == batch && !math.IsNaN(ss.Ratio) {
			fmt.Fprintf(w, "  ratio %.2f  pressure %.2f tiers", ss.Ratio, ss.Pressure)
		}
		fmt.Fprintln(w)
	}
}

// shedFigures are one class's means per second over a phase, from the
// seconds after the phase's change settled.
type shedFigures struct {
	answered, refused, failed, shed float64
	p50, p99                        time.Duration // means of the seconds' percentiles
	// p99Median is the median of the seconds' p99s: a few seconds' bursts
	// move the mean but not it.
	p99Median time.Duration
}

// shedPhaseResult is one phase of one half.
type shedPhaseResult struct {
	half, name string
	seconds    int
	class      [nShedClasses]shedFigures
	// shedAll is the requests shed over the whole phase, settling
	// included, of every class, and maxPressureAll the most tiers shed at
	// the end of any of its seconds: what a healthy phase must keep at 0.
	shedAll, maxPressureAll float64
	// ratio is the mean and minRatio the least latency ratio, maxPressure
	// the most tiers shed, over the settled seconds; NaN without shedding.
	ratio, minRatio, maxPressure float64
	metrics                      bool
	// fullAfter is the time from the phase's start to the end of its first
	// second at whose end a whole tier was shed (pressure 1 or more); 0
	// if none was.
	fullAfter time.Duration
}

type sheddingResult struct{ phases []shedPhaseResult }

// phase is the result of a half's phase.
func (r sheddingResult) phase(half, name string) shedPhaseResult {
	for _, p := range r.phases {
		if p.half == half && p.name == name {
			return p
		}
	}
	return shedPhaseResult{half: half, name: name}
}

// summarizeShedding averages each phase of each half, leaving out the
// first seconds of each phase while its change takes hold.
func summarizeShedding(seconds []shedSecond) sheddingResult {
	var res sheddingResult
	for _, half := range shedHalves {
		var start time.Duration // the phase's start, from its first second
		for _, name := range shedPhases {
			p := shedPhaseResult{half: half, name: name, metrics: true, ratio: math.NaN(), minRatio: math.NaN(), maxPressure: math.NaN(), maxPressureAll: math.NaN()}
			first := true
			var p50, p99 [nShedClasses]float64
			var p99s [nShedClasses][]time.Duration
			var ratio float64
			for _, s := range seconds {
				if s.Half != half || s.Phase != name {
					continue
				}
				if first {
					start, first = s.T-s.Length, false
				}
				p.metrics = p.metrics && s.MetricsOK
				for _, k := range s.Class {
					p.shedAll += k.Shed * s.Length.Seconds()
				}
				if !math.IsNaN(s.Pressure) {
					p.maxPressureAll = nanMax(p.maxPressureAll, s.Pressure)
					if s.Pressure >= 1 && p.fullAfter == 0 {
						p.fullAfter = s.T - start
					}
				}
				if s.T-s.Length < start+settle {
					continue
				}
				p.seconds++
				for i, k := range s.Class {
					f := &p.class[i]
					f.answered += k.Answered
					f.refused += k.Refused
					f.failed += k.Failed
					f.shed += k.Shed
					p50[i] += float64(k.P50)
					p99[i] += float64(k.P99)
					p99s[i] = append(p99s[i], k.P99)
				}
				if !math.IsNaN(s.Ratio) {
					ratio += s.Ratio
					p.minRatio = nanMin(p.minRatio, s.Ratio)
					p.maxPressure = nanMax(p.maxPressure, s.Pressure)
				}
			}
			if n := float64(p.seconds); n > 0 {
				for i := range p.class {
					f := &p.class[i]
					f.answered /= n
					f.refused /= n
					f.failed /= n
					f.shed /= n
					f.p50, f.p99 = time.Duration(p50[i]/n), time.Duration(p99[i]/n)
					slices.Sort(p99s[i])
					f.p99Median = p99s[i][len(p99s[i])/2]
				}
				if !math.IsNaN(p.minRatio) {
					p.ratio = ratio / n
				}
			} else {
				p.metrics = false
			}
			res.phases = append(res.phases, p)
		}
	}
	return res
}

// nanMin and nanMax are min and max where NaN is no value.
func nanMin(a, b float64) float64 {
	switch {
	case math.IsNaN(a):
		return b
	case math.IsNaN(b):
		return a
	}
	return min(a, b)
}

func nanMax(a, b float64) float64 {
	switch {
	case math.IsNaN(a):
		return b
	case math.IsNaN(b):
		return a
	}
	return max(a, b)
}

// checks are the experiment's targets for one half: the interactive class's
// p99 and goodput with the heavy batch load beside it against the same
// half's phase alone, and nothing shed while the node was healthy, alone
// or with the light batch load. The light-batch phase's p99 and goodput
// against alone show what the batch class costs a healthy node.
type checks struct {
	p99Ratio, goodput           float64
	lightP99Ratio, lightGoodput float64
	// shedHealthy is the requests shed over the healthy phases, settling
	// included, and pressureHealthy the most tiers shed at the end of
	// any of their seconds (NaN without shedding); metrics says whether
	// cqlguard's metrics were read throughout them.
	shedHealthy, pressureHealthy float64
	metrics                      bool
}

func (r sheddingResult) checks(half string) checks {
	alone, light, heavy := r.phase(half, phaseAlone), r.phase(half, phaseLightBatch), r.phase(half, phaseHeavyBatch)
	a, l, h := alone.class[interactive], light.class[interactive], heavy.class[interactive]
	return checks{
		p99Ratio:        float64(h.p99) / float64(a.p99),
		goodput:         h.answered / a.answered,
		lightP99Ratio:   float64(l.p99) / float64(a.p99),
		lightGoodput:    l.answered / a.answered,
		shedHealthy:     alone.shedAll + light.shedAll,
		pressureHealthy: nanMax(alone.maxPressureAll, light.maxPressureAll),
		metrics:         alone.metrics && light.metrics,
	}
}

func (r sheddingResult) write(w io.Writer, e *sheddingExp) {
	fmt.Fprintf(w, "Interactive (tier 0): single-row reads of bench.kv (%d partitions) offered at %.0f/s, %d connections of at most %d in flight.\n",
		e.keys, e.interactiveRate, e.conns, e.interactiveConcurrency)
	fmt.Fprintf(w, "Batch (tier 5): whole-partition reads of bench.wide (%d partitions of %d rows of %d bytes), %d connections of at most %d in flight, offered at %.0f/s in the light-batch phase and at %s in the heavy-batch phase.\n",
		e.wide.partitions, e.wide.rows, e.wide.rowBytes, e.conns, e.batchConcurrency, e.lightBatchRate, orDash(e.batchRate > 0, "%.0f/s", e.batchRate))
	fmt.Fprintf(w, "Phases of %v, the first %v of each left out; p50 and p99 are means of the seconds' percentiles; shed requests are answered with Config_error (refused).\n", e.phase, settle)
	fmt.Fprintf(w, "Tiers shed: those in use, which sent a request in the last 10 s (at start every class's, the default class's %d among them).\n\n", config.DefaultTier)
	fmt.Fprintf(w, "| half | phase | interactive answered/s | interactive p50 | interactive p99 (median second) | interactive refused/s | batch answered/s | batch refused/s | batch failed/s | shed/s tier 0 | shed/s tier 5 | latency ratio mean (min) | pressure tiers max |\n")
	fmt.Fprintf(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, p := range r.phases {
		if p.seconds == 0 {
			continue // not run (-light-only)
		}
		in, b := p.class[interactive], p.class[batch]
		fmt.Fprintf(w, "| %s | %s | %.0f | %s | %s (%s) | %.0f | %.0f | %.0f | %.0f | %s | %s | %s | %s |\n",
			p.half, p.name, in.answered, load.FormatLatency(in.p50), load.FormatLatency(in.p99), load.FormatLatency(in.p99Median), in.refused,
			b.answered, b.refused, b.failed, orDash(p.metrics, "%.0f", in.shed), orDash(p.metrics, "%.0f", b.shed),
			ratioText(p.ratio, p.minRatio), orDash(true, "%.2f", p.maxPressure))
	}
	fmt.Fprintf(w, "\n| half | interactive p99 / alone: light batch | heavy batch (target ≤ 1.5) | interactive goodput / alone: light batch | heavy batch (target ≥ 90%%) | requests shed while healthy, alone and light batch (target 0) | most tiers shed while healthy |\n")
	fmt.Fprintf(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, half := range e.halves() {
		c := r.checks(half)
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", half,
			orDash(true, "%.2f", c.lightP99Ratio), orDash(true, "%.2f", c.p99Ratio),
			orDash(true, "%.1f%%", 100*c.lightGoodput), orDash(true, "%.1f%%", 100*c.goodput),
			orDash(c.metrics, "%.0f", c.shedHealthy), orDash(true, "%.2f", c.pressureHealthy))
	}
	on := r.checks(halfOn)
	healthy := "unknown (metrics missing)"
	if on.metrics {
		healthy = fmt.Sprintf("%.0f shed (%s), at most %s tiers", on.shedHealthy, verdict(on.shedHealthy == 0), orDash(true, "%.2f", on.pressureHealthy))
	}
	if e.lightOnly {
		fmt.Fprintf(w, "\nWith shedding: healthy phases %s.\n", healthy)
		return
	}
	heavy := r.phase(halfOn, phaseHeavyBatch)
	fmt.Fprintf(w, "\nWith shedding: heavy batch p99 %s alone (%s), goodput %s (%s), tier 5 shed entirely %s after the heavy batch began; healthy phases %s.\n",
		orDash(true, "%.2f×", on.p99Ratio), verdict(on.p99Ratio <= 1.5), orDash(true, "%.1f%%", 100*on.goodput), verdict(on.goodput >= 0.9),
		orDash(heavy.fullAfter > 0, "%.0f s", heavy.fullAfter.Seconds()), healthy)
	fmt.Fprintf(w, "Plot: %s\n", e.out)
}

func ratioText(mean, least float64) string {
	if math.IsNaN(mean) {
		return "-"
	}
	return fmt.Sprintf("%.2f (%.2f)", mean, least)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

// logFloor is the bottom of the plot's log scales.
const logFloor = 0.1

// plot draws, per second of each half side by side in time, the
// interactive class's p99, the requests each class had answered and the
// batch class had shed, and the latency ratio and tiers shed, one above
// the other, into e.out as a PNG.
func (e *sheddingExp) plot(seconds []shedSecond) error {
	if len(seconds) == 0 {
		return errors.New("shedding: no seconds to plot")
	}
	// x runs on over both halves: the second half starts where the first
	// ended.
	_, starts, length := e.phases()
	halfLen := length.Seconds()
	x := func(s shedSecond) float64 {
		if s.Half == halfOn {
			return halfLen + s.T.Seconds()
		}
		return s.T.Seconds()
	}
	var p99, inAns, bAns, bShed, ratio, pressure [2]plotter.XYs
	for _, s := range seconds {
		h := 0
		if s.Half == halfOn {
			h = 1
		}
		t := x(s)
		// The log scales start at logFloor: a line drops to it for none.
		if s.Class[interactive].Answered > 0 {
			p99[h] = append(p99[h], plotter.XY{X: t, Y: max(logFloor, float64(s.Class[interactive].P99)/float64(time.Millisecond))})
		}
		inAns[h] = append(inAns[h], plotter.XY{X: t, Y: max(logFloor, s.Class[interactive].Answered)})
		if s.Phase != phaseAlone {
			bAns[h] = append(bAns[h], plotter.XY{X: t, Y: max(logFloor, s.Class[batch].Answered)})
			if h == 1 {
				bShed[h] = append(bShed[h], plotter.XY{X: t, Y: max(logFloor, s.Class[batch].Shed)})
			}
		}
		if !math.IsNaN(s.Ratio) {
			ratio[h] = append(ratio[h], plotter.XY{X: t, Y: s.Ratio})
			pressure[h] = append(pressure[h], plotter.XY{X: t, Y: s.Pressure})
		}
	}
	type series struct {
		name  string
		lines [2]plotter.XYs
		color color.Color
	}
	blue, red, gray := color.RGBA{0x1f, 0x77, 0xb4, 0xff}, color.RGBA{0xd6, 0x27, 0x28, 0xff}, color.Gray{Y: 0x40}
	panel := func(title, ylabel string, log bool, ss []series) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, "seconds", ylabel
		p.Add(plotter.NewGrid())
		top := 1.0
		for _, s := range ss {
			for h, xy := range s.lines {
				if len(xy) == 0 {
					continue
				}
				line, err := plotter.NewLine(xy)
				if err != nil {
					return nil, fmt.Errorf("shedding: %s: %w", s.name, err)
				}
				line.Color, line.Width = s.color, vg.Points(1.5)
				p.Add(line)
				if h == 0 || len(s.lines[0]) == 0 {
					p.Legend.Add(s.name, line)
				}
				for _, v := range xy {
					top = max(top, v.Y)
				}
			}
		}
		p.Y.Min, p.Y.Max = 0, top*1.4
		label := p.Y.Max * 0.93
		if log {
			p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
			p.Y.Min, p.Y.Max = logFloor, top*30
			label = p.Y.Max / 1.6
		}
		for h, half := range shedHalves {
			for j, name := range shedPhases {
				at := float64(h)*halfLen + starts[j].Seconds()
				mark, err := plotter.NewLine(plotter.XYs{{X: at, Y: p.Y.Min}, {X: at, Y: p.Y.Max}})
				if err != nil {
					return nil, err
				}
				mark.Color, mark.Dashes = color.Gray{Y: 0x80}, []vg.Length{vg.Points(2), vg.Points(2)}
				// The half's name heads its first phase's, above it:
				// six phases' names with the half's would overlap.
				text := " " + name
				if j == 0 {
					text = " " + half + ":\n" + text
				}
				labels, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: at, Y: label}}, Labels: []string{text}})
				if err != nil {
					return nil, err
				}
				p.Add(mark, labels)
			}
		}
		p.X.Min, p.X.Max = 0, 2*halfLen
		p.Legend.Top, p.Legend.Left = true, true
		p.Legend.XOffs, p.Legend.YOffs = vg.Points(8), -vg.Points(34)
		return p, nil
	}
	lat, err := panel("The interactive class's p99 of answered reads, each second", "ms", true, []series{{"interactive p99", p99, blue}})
	if err != nil {
		return err
	}
	req, err := panel("Requests a second: the interactive class answered, the batch class answered and shed", "requests/s", true, []series{
		{"interactive answered", inAns, blue}, {"batch answered", bAns, red}, {"batch shed (tier 5)", bShed, gray},
	})
	if err != nil {
		return err
	}
	sig, err := panel("cqlguard's signals with shedding: the node's latency ratio and the tiers shed", "ratio, tiers", false, []series{
		{"cqlguard_shed_latency_ratio", ratio, blue}, {"cqlguard_shed_pressure_tiers", pressure, red},
	})
	if err != nil {
		return err
	}
	panels := [][]*plot.Plot{{lat}, {req}, {sig}}
	return savePanels(e.out, panels)
}
