package main

import (
	"bytes"
	"encoding/json"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/test/bench/load"
)

// The shedding experiment puts each second together from the loaders and
// the metrics sampled around it, averages each phase of each half over
// the seconds after its change settled, checks the targets,
// writes its configurations so that they load, and plots a PNG.
func TestSheddingSummary(t *testing.T) {
	t.Parallel()
	e := &sheddingExp{widePartitions: 4, wideRows: 256, rowBytes: 1024, interactiveRate: 1000, interactiveConcurrency: 8, batchConcurrency: 4, nodeRun: nodeRun{phase: 10 * time.Second, keys: 100, conns: 2, out: filepath.Join(t.TempDir(), "plots", "shedding.png")}}
	// Per half and phase: the interactive class's answered requests a
	// second and p99, the batch class's answered and shed a second, and
	// the latency ratio (NaN without shedding).
	type want struct {
		inOK       float64
		inP99      time.Duration
		bOK, bShed float64
		ratio      float64
	}
	byPhase := map[string]want{
		halfOff + phaseAlone:     {1000, 2 * time.Millisecond, 0, 0, math.NaN()},
		halfOff + phaseBatchJoin: {600, 40 * time.Millisecond, 300, 0, math.NaN()},
		halfOn + phaseAlone:      {1000, 2 * time.Millisecond, 0, 0, 1},
		halfOn + phaseBatchJoin:  {950, 2500 * time.Microsecond, 20, 200, 0.4},
	}
	var seconds []shedSecond
	for _, half := range shedHalves {
		start := time.Unix(1000, 0)
		prev := shedSample{at: start, ok: true, ratio: math.NaN(), pressure: math.NaN()}
		for i := 1; i <= 20; i++ {
			at := time.Duration(i) * time.Second
			phase := shedPhases[(i-1)/10]
			w := byPhase[half+phase]
			loaders := []load.Interval{{Loader: "interactive", Succeeded: uint64(w.inOK), OKP50: time.Millisecond, OKP99: w.inP99}}
			if phase == phaseBatchJoin {
				loaders = append(loaders, load.Interval{Loader: "batch", Succeeded: uint64(w.bOK), Rejected: uint64(w.bShed), OKP99: time.Second})
			}
			next := prev
			next.at = start.Add(at)
			next.shed[batch] += w.bShed
			next.ratio, next.pressure = w.ratio, math.NaN()
			if !math.IsNaN(w.ratio) {
				next.pressure = 1 - w.ratio
			}
			seconds = append(seconds, newShedSecond(half, load.Second{T: at, Length: time.Second, Phase: phase, Loaders: loaders}, prev, next))
			prev = next
		}
	}
	if s := seconds[35]; s.Half != halfOn || s.Class[batch].Shed != 200 || s.Class[batch].Refused != 200 ||
		s.Class[interactive].P99 != 2500*time.Microsecond || s.Ratio != 0.4 {
		t.Fatalf("second 36: %+v", s)
	}
	b, err := json.Marshal(seconds[0])
	if err != nil || !strings.Contains(string(b), `"ratio":null`) {
		t.Errorf("JSON of a second without shedding: %s, %v", b, err)
	}

	res := summarizeShedding(seconds)
	if len(res.phases) != 4 {
		t.Fatalf("phases %+v", res.phases)
	}
	for _, p := range res.phases {
		w := byPhase[p.half+p.name]
		in, bt := p.class[interactive], p.class[batch]
		if p.seconds != 7 || !p.metrics || in.answered != w.inOK || in.p99 != w.inP99 || bt.answered != w.bOK || bt.shed != w.bShed {
			t.Errorf("%s, %s: %+v", p.half, p.name, p)
		}
		if math.IsNaN(w.ratio) != math.IsNaN(p.ratio) || !math.IsNaN(w.ratio) && (math.Abs(p.ratio-w.ratio) > 1e-9 || p.minRatio != w.ratio) {
			t.Errorf("%s, %s: ratio %v (least %v), want %v", p.half, p.name, p.ratio, p.minRatio, w.ratio)
		}
	}
	if got := res.phase(halfOn, phaseBatchJoin).shedAll; got != 2000 {
		t.Errorf("shed over the whole phase: %v, want 2000", got)
	}
	off, on := res.checks(halfOff), res.checks(halfOn)
	if off.p99Ratio != 20 || off.goodput != 0.6 || on.p99Ratio != 1.25 || on.goodput != 0.95 || on.shedAlone != 0 {
		t.Errorf("checks: without %+v, with %+v", off, on)
	}

	var out bytes.Buffer
	res.write(&out, e)
	for _, s := range []string{
		"| without shedding | batch joins | 600 | 1.00ms | 40.0ms (40.0ms) | 0 | 300 | 0 | 0 | 0 | 0 | - | - |",
		"| with shedding | batch joins | 950 | 1.00ms | 2.50ms (2.50ms) | 0 | 20 | 200 | 0 | 0 | 200 | 0.40 (0.40) | 0.60 |",
		"| with shedding | interactive alone | 1000 | 1.00ms | 2.00ms (2.00ms) | 0 | 0 | 0 | 0 | 0 | 0 | 1.00 (1.00) | 0.00 |",
		"| without shedding | 20.00 | 60.0% | 0 | - |",
		"| with shedding | 1.25 | 95.0% | 0 | 0.00 |",
		"With shedding: p99 1.25× (met), goodput 95.0% (met), shed while alone met.",
	} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, out.String())
		}
	}
	if strings.Contains(out.String(), "NaN") {
		t.Errorf("report has NaN:\n%s", out.String())
	}

	if err := e.plot(seconds); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(e.out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("plot: %v", err)
	}
}

// Each configuration loads, with the two classes matched by application
// name at their tiers, and shedding on or off answering Config_error;
// the batch class starts with the second phase.
func TestSheddingConfig(t *testing.T) {
	t.Parallel()
	e := &sheddingExp{widePartitions: 4, interactiveRate: 500, batchRate: 800, interactiveConcurrency: 8, batchConcurrency: 4, shortWindow: time.Second, longWindow: 20 * time.Second, nodeRun: nodeRun{upstream: "127.0.0.2:9042", keys: 100, conns: 2, phase: 10 * time.Second}}
	for _, on := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "cqlguard.yaml")
		if err := os.WriteFile(path, []byte(e.config(on)), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatalf("shedding %v: %v\n%s", on, err, e.config(on))
		}
		if cfg.Shedding.Enabled != on || cfg.Shedding.Error != "config_error" ||
			time.Duration(cfg.Shedding.ShortWindow) != time.Second || time.Duration(cfg.Shedding.LongWindow) != 20*time.Second {
			t.Errorf("shedding %v: %+v", on, cfg.Shedding)
		}
		if len(cfg.Clients.Classes) != 2 {
			t.Fatalf("shedding %v: classes %+v", on, cfg.Clients.Classes)
		}
		for i, cl := range cfg.Clients.Classes {
			if cl.Name != shedClassNames[i] || cl.TierOrDefault() != shedClassTiers[i] || len(cl.Match.ApplicationNames) != 1 ||
				cl.Match.ApplicationNames[0] != shedClassNames[i] || cl.MaxUnitsPerSecond != 0 {
				t.Errorf("shedding %v: class %d %+v", on, i, cl)
			}
		}
	}
	for i := range nShedClasses {
		s := e.spec(i)
		if s.App != shedClassNames[i] || s.Addr != e.proxyAddr() || s.Validate() != nil {
			t.Errorf("class %d: spec %+v", i, s)
		}
	}
	if in, b := e.spec(interactive), e.spec(batch); in.Rate != 500 || in.Start != 0 || in.Table != "kv" ||
		b.Rate != 800 || b.Start != e.phase || b.Table != "wide" || b.Keys != 4 {
		t.Errorf("interactive %+v, batch %+v", in, b)
	}
}
