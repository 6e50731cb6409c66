package main

import (
	"bytes"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/test/load"
)

// The client classes experiment puts each second together from the
// loaders and the counts taken around it, averages each phase over the
// seconds after its change settled, attributes the node's CPU by what a
// request of each class cost alone, writes its configurations so that
// they load, and plots a PNG.
func TestClassesSummary(t *testing.T) {
	t.Parallel()
	c := &classesExp{requestBudget: 200, unitBudget: 2000, wide: wideTable{partitions: 4, rows: 256, rowBytes: 1024}, units: priceFlags{fixed: 1, perRow: 0.1, perKiB: 0.25}, nodeRun: nodeRun{phase: 10 * time.Second, keys: 100, upstream: "127.0.0.2:9042", out: filepath.Join(t.TempDir(), "plots", "classes.png")}}
	const idle = 20.0
	// Per phase: each class's answered requests a second, its request
	// units a second, and the node's CPU in ms a second. A light read
	// costs the node 0.3 ms, a heavy one 8 ms.
	type want struct{ lightOK, heavyOK, lightRU, heavyRU, cpu float64 }
	byPhase := map[string]want{
		phaseLightAlone: {1000, 0, 0, 0, idle + 300},
		phaseHeavyAlone: {0, 40, 0, 0, idle + 320},
		phaseRequests:   {200, 200, 200, 200, idle + 60 + 1600},
		phaseUnits:      {1000, 40, 2000, 2000, idle + 300 + 320},
	}
	start := time.Unix(1000, 0)
	var seconds []classSecond
	prev := classSample{at: start, metricsOK: true, nodeOK: true, cpuOK: true}
	for i := 1; i <= 40; i++ {
		at := time.Duration(i) * time.Second
		phase := classPhases[(i-1)/10]
		w := byPhase[phase]
		lightName, heavyName := "light alone", "heavy alone"
		if i > 20 {
			lightName, heavyName = "light", "heavy"
		}
		s := load.Second{T: at, Length: time.Second, Phase: phase, Loaders: []load.Interval{
			{Loader: lightName, Succeeded: uint64(w.lightOK), Rejected: 500, OKP50: time.Millisecond, OKP99: 3 * time.Millisecond},
			{Loader: heavyName, Succeeded: uint64(w.heavyOK), OKP50: 10 * time.Millisecond, OKP99: 40 * time.Millisecond},
		}}
		next := prev
		next.at = start.Add(at)
		next.units[light] += w.lightRU
		next.units[heavy] += w.heavyRU
		next.nodeReads[light] += w.lightOK
		next.nodeReads[heavy] += w.heavyOK
		next.cpu += time.Duration(w.cpu * float64(time.Millisecond))
		seconds = append(seconds, newClassSecond(s, prev, next))
		prev = next
	}
	if s := seconds[35]; s.Class[heavy].Units != 2000 || s.Class[light].NodeReads != 1000 || s.NodeCPU != idle+620 ||
		s.Class[light].Refused != 500 || s.Class[heavy].P99 != 40*time.Millisecond {
		t.Fatalf("second 36: %+v", s)
	}

	res := c.summarize(seconds, idle)
	if math.Abs(res.cost[light]-0.3) > 1e-9 || math.Abs(res.cost[heavy]-8) > 1e-9 {
		t.Errorf("costs %v, want 0.3 and 8 ms", res.cost)
	}
	for i, p := range res.phases {
		w := byPhase[p.name]
		if p.name != classPhases[i] || p.seconds != 7 || !p.metrics || !p.node || math.Abs(p.nodeCPU-w.cpu) > 1e-6 {
			t.Errorf("phase %d: %+v", i, p)
		}
		if p.class[light].answered != w.lightOK || p.class[heavy].units != w.heavyRU || p.class[heavy].nodeReads != w.heavyOK {
			t.Errorf("%s: %+v", p.name, p.class)
		}
	}
	if got := res.phases[2].share(heavy); math.Abs(got-1600.0/1660) > 1e-9 {
		t.Errorf("heavy's share with equal request budgets: %v", got)
	}

	var b bytes.Buffer
	res.write(&b, c)
	for _, s := range []string{
		"| equal request budgets | heavy | 200 | 200 | 0 | 200 | +0.0% | 1.00 | 10.0ms | 40.0ms | 200 | 1600 | 96% |",
		"| equal RU budgets | light | 2000 | 1000 | 500 | 2000 | +0.0% | 2.00 | 1.00ms | 3.00ms | 1000 | 300 | 48% |",
		"| light alone | light | - | 1000 | 500 | - | - | - | 1.00ms | 3.00ms | 1000 | 300 | - |",
		"| heavy alone | heavy | - | 40 | 0 | - | - | - | 10.0ms | 40.0ms | 40 | 320 | - |",
		"| equal RU budgets | 640 | 300 | 320 | 20 |",
		"a light read cost it 300.0 µs of CPU and a heavy read 8000 µs (26.7 times as much)",
		"priced at 2.00 and 50.00 RU (25.0 times as much): 6.7 and 6.",
		"light had 200 reads/s answered and heavy 200; heavy took 96% of the node's work",
		"light was charged 2000 RU/s (+0.0%) and heavy 2000 (+0.0%)",
		"they took 300 and 320 ms/s (-3.2% and +3.2% of an equal share)",
	} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, b.String())
		}
	}
	if strings.Contains(b.String(), "| light alone | heavy |") {
		t.Errorf("report has a row for a class that did not run:\n%s", b.String())
	}

	if err := c.plot(seconds, res); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(c.out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("plot: %v", err)
	}
}

// Without the node's CPU the figures that need it are dashes.
func TestClassesWithoutCPU(t *testing.T) {
	t.Parallel()
	c := &classesExp{requestBudget: 100, unitBudget: 1000, nodeRun: nodeRun{phase: 5 * time.Second}}
	var seconds []classSecond
	for i := 1; i <= 20; i++ {
		seconds = append(seconds, classSecond{T: time.Duration(i) * time.Second, Length: time.Second,
			Phase: classPhases[(i-1)/5], MetricsOK: true, Class: [nClasses]classPerSecond{{Answered: 100, Units: 1000}, {Answered: 10, Units: 1000}}})
	}
	res := c.summarize(seconds, math.NaN())
	var b bytes.Buffer
	res.write(&b, c)
	if strings.Contains(b.String(), "NaN") || strings.Contains(b.String(), "node's CPU, ms a second") ||
		!strings.Contains(b.String(), "| equal RU budgets | heavy | 1000 | 10 | 0 | 1000 | +0.0% | 100.00 | - | - | - | - | - |") {
		t.Errorf("report:\n%s", b.String())
	}
}

// Each configuration loads, with the two classes matched by application
// name and their budgets, and the prices of its phase.
func TestClassesConfig(t *testing.T) {
	t.Parallel()
	c := &classesExp{requestBudget: 150, unitBudget: 2500, wide: wideTable{partitions: 4}, lightConcurrency: 8, heavyConcurrency: 4, units: priceFlags{fixed: 1, perRow: 0.05, perKiB: 0.5, perMs: 0}, nodeRun: nodeRun{upstream: "127.0.0.2:9042", keys: 100, conns: 2}}
	for _, requests := range []bool{true, false} {
		path := filepath.Join(t.TempDir(), "cqlguard.yaml")
		if err := os.WriteFile(path, []byte(c.config(requests)), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatalf("requests %v: %v\n%s", requests, err, c.config(requests))
		}
		budget, units := 2500.0, config.RequestUnitsConfig{Fixed: 1, PerRow: 0.05, PerKiB: 0.5}
		if requests {
			budget, units = 150, config.RequestUnitsConfig{Fixed: 1}
		}
		if cfg.RequestUnits != units {
			t.Errorf("requests %v: request units %+v, want %+v", requests, cfg.RequestUnits, units)
		}
		if len(cfg.Clients.Classes) != 2 {
			t.Fatalf("requests %v: classes %+v", requests, cfg.Clients.Classes)
		}
		for i, cl := range cfg.Clients.Classes {
			if cl.Name != classNames[i] || len(cl.Match.ApplicationNames) != 1 || cl.Match.ApplicationNames[0] != classNames[i] || cl.MaxUnitsPerSecond != budget {
				t.Errorf("requests %v: class %d %+v", requests, i, cl)
			}
		}
		if cfg.Clients.Default.MaxUnitsPerSecond != 0 {
			t.Errorf("requests %v: the default class has a budget", requests)
		}
	}
	c.phase, c.aloneConcurrency = 10*time.Second, 64
	for i := range nClasses {
		s, alone := c.spec(i), c.aloneSpec(i)
		if s.App != classNames[i] || s.Table != classTables[i] || s.Addr != c.proxyAddr() || s.Validate() != nil {
			t.Errorf("class %d: spec %+v", i, s)
		}
		// Alone, a class goes straight to the node, as fast as it answers,
		// in its phase.
		if alone.Table != classTables[i] || alone.Addr != c.upstream || alone.Rate != 0 || alone.Concurrency != 64 ||
			alone.Start != time.Duration(i)*c.phase || alone.Stop != alone.Start+c.phase || alone.Validate() != nil {
			t.Errorf("class %d: alone %+v", i, alone)
		}
	}
}
