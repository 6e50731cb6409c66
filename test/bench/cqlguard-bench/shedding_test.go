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
	"github.com/cqlguard/cqlguard/test/load"
)

// The shedding experiment puts each second together from the loaders and
// the metrics sampled around it, averages each phase of each half over
// the seconds after its change settled, checks the experiment's targets,
// writes its configurations so that they load, and plots a PNG.
func TestSheddingSummary(t *testing.T) {
	t.Parallel()
	e := &sheddingExp{wide: wideTable{partitions: 4, rows: 256, rowBytes: 1024}, interactiveRate: 1000, lightBatchRate: 50, batchRate: 800, interactiveConcurrency: 8, batchConcurrency: 4, nodeRun: nodeRun{phase: 10 * time.Second, keys: 100, conns: 2, out: filepath.Join(t.TempDir(), "plots", "shedding.png")}}
	// Per half and phase: the interactive class's answered requests a
	// second and p99, the batch class's answered and shed a second, and
	// the latency ratio and pressure (NaN without shedding).
	type want struct {
		inOK            float64
		inP99           time.Duration
		bOK, bShed      float64
		ratio, pressure float64
	}
	nan := math.NaN()
	byPhase := map[string]want{
		halfOff + phaseAlone:      {1000, 2 * time.Millisecond, 0, 0, nan, nan},
		halfOff + phaseLightBatch: {1000, 2200 * time.Microsecond, 50, 0, nan, nan},
		halfOff + phaseHeavyBatch: {600, 40 * time.Millisecond, 300, 0, nan, nan},
		halfOn + phaseAlone:       {1000, 2 * time.Millisecond, 0, 0, 1, 0},
		halfOn + phaseLightBatch:  {1000, 2200 * time.Microsecond, 50, 0, 0.9, 0},
		halfOn + phaseHeavyBatch:  {950, 2500 * time.Microsecond, 20, 200, 0.4, 0.6},
	}
	const perPhase = 10
	var seconds []shedSecond
	for _, half := range shedHalves {
		start := time.Unix(1000, 0)
		prev := shedSample{at: start, ok: true, ratio: nan, pressure: nan}
		for i := 1; i <= perPhase*len(shedPhases); i++ {
			at := time.Duration(i) * time.Second
			phase := shedPhases[(i-1)/perPhase]
			w := byPhase[half+phase]
			in := load.Interval{Loader: "interactive", Succeeded: uint64(w.inOK), OKP50: time.Millisecond, OKP99: w.inP99}
			light, heavy := load.Interval{Loader: lightBatchLoader}, load.Interval{Loader: heavyBatchLoader}
			switch phase {
			case phaseLightBatch:
				light.Succeeded, light.OKP99 = uint64(w.bOK), 20*time.Millisecond
			case phaseHeavyBatch:
				heavy.Succeeded, heavy.Rejected, heavy.OKP99 = uint64(w.bOK), uint64(w.bShed), time.Second
				if i == 2*perPhase+1 {
					// The light loader's last answers, as it drains,
					// come in the heavy phase's first second.
					light.Succeeded, light.OKP99 = 5, 30*time.Millisecond
					heavy.Succeeded -= 5
				}
			}
			next := prev
			next.at = start.Add(at)
			next.shed[batch] += w.bShed
			next.ratio, next.pressure = w.ratio, w.pressure
			seconds = append(seconds, newShedSecond(half, load.Second{T: at, Length: time.Second, Phase: phase, Loaders: []load.Interval{in, light, heavy}}, prev, next))
			prev = next
		}
	}
	if s := seconds[3*perPhase+2*perPhase+5]; s.Half != halfOn || s.Phase != phaseHeavyBatch || s.Class[batch].Shed != 200 || s.Class[batch].Refused != 200 ||
		s.Class[interactive].P99 != 2500*time.Microsecond || s.Ratio != 0.4 {
		t.Fatalf("second 26 with shedding: %+v", s)
	}
	if s := seconds[perPhase+3]; s.Phase != phaseLightBatch || s.Class[batch].Answered != 50 || s.Class[batch].P99 != 20*time.Millisecond {
		t.Errorf("second 14 without shedding: %+v", s)
	}
	if s := seconds[2*perPhase]; s.Class[batch].Answered != 300 || s.Class[batch].P99 != time.Second {
		t.Errorf("second 21 without shedding, both batch loaders answered: %+v", s)
	}
	b, err := json.Marshal(seconds[0])
	if err != nil || !strings.Contains(string(b), `"ratio":null`) {
		t.Errorf("JSON of a second without shedding: %s, %v", b, err)
	}

	res := summarizeShedding(seconds)
	if len(res.phases) != 6 {
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
		if math.IsNaN(w.pressure) != math.IsNaN(p.maxPressureAll) || !math.IsNaN(w.pressure) && p.maxPressureAll != w.pressure {
			t.Errorf("%s, %s: most pressure %v, want %v", p.half, p.name, p.maxPressureAll, w.pressure)
		}
	}
	if got := res.phase(halfOn, phaseHeavyBatch).shedAll; got != 2000 {
		t.Errorf("shed over the whole phase: %v, want 2000", got)
	}
	off, on := res.checks(halfOff), res.checks(halfOn)
	if off.p99Ratio != 20 || off.goodput != 0.6 || off.lightP99Ratio != 1.1 || off.lightGoodput != 1 || !math.IsNaN(off.pressureHealthy) ||
		on.p99Ratio != 1.25 || on.goodput != 0.95 || on.shedHealthy != 0 || on.pressureHealthy != 0 || !on.metrics {
		t.Errorf("checks: without %+v, with %+v", off, on)
	}

	var out bytes.Buffer
	res.write(&out, e)
	for _, s := range []string{
		"offered at 50/s in the light-batch phase and at 800/s in the heavy-batch phase",
		"| without shedding | light batch | 1000 | 1.00ms | 2.20ms (2.20ms) | 0 | 50 | 0 | 0 | 0 | 0 | - | - |",
		"| without shedding | heavy batch | 600 | 1.00ms | 40.0ms (40.0ms) | 0 | 300 | 0 | 0 | 0 | 0 | - | - |",
		"| with shedding | heavy batch | 950 | 1.00ms | 2.50ms (2.50ms) | 0 | 20 | 200 | 0 | 0 | 200 | 0.40 (0.40) | 0.60 |",
		"| with shedding | light batch | 1000 | 1.00ms | 2.20ms (2.20ms) | 0 | 50 | 0 | 0 | 0 | 0 | 0.90 (0.90) | 0.00 |",
		"| with shedding | interactive alone | 1000 | 1.00ms | 2.00ms (2.00ms) | 0 | 0 | 0 | 0 | 0 | 0 | 1.00 (1.00) | 0.00 |",
		"| without shedding | 1.10 | 20.00 | 100.0% | 60.0% | 0 | - |",
		"| with shedding | 1.10 | 1.25 | 100.0% | 95.0% | 0 | 0.00 |",
		"With shedding: heavy batch p99 1.25× alone (met), goodput 95.0% (met), tier 5 shed entirely - after the heavy batch began; healthy phases 0 shed (met), at most 0.00 tiers.",
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

// Requests shed while the node is healthy count against it even in the
// seconds left out while a phase settles, and in the light-batch phase
// as in the phase alone.
func TestSheddingHealthyCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		phase      string
		at         int // the phase's second, from 1
		shed       float64
		pressure   float64
		wantShed   float64
		wantMost   float64
		wantHealth string
	}{
		{"nothing shed", phaseLightBatch, 5, 0, 0.2, 0, 0.2, "healthy phases 0 shed (met), at most 0.20 tiers"},
		{"shed while the light batch settles", phaseLightBatch, 1, 30, 0.3, 30, 0.3, "healthy phases 30 shed (missed), at most 0.30 tiers"},
		{"shed alone", phaseAlone, 8, 7, 0.1, 7, 0.1, "healthy phases 7 shed (missed), at most 0.10 tiers"},
		{"shed with the heavy batch only", phaseHeavyBatch, 5, 500, 1, 0, 0, "healthy phases 0 shed (met), at most 0.00 tiers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var seconds []shedSecond
			for j, phase := range shedPhases {
				for k := 1; k <= 10; k++ {
					s := shedSecond{Half: halfOn, T: time.Duration(10*j+k) * time.Second, Length: time.Second, Phase: phase, Ratio: 1, MetricsOK: true}
					s.Class[interactive].Answered, s.Class[interactive].P99 = 1000, time.Millisecond
					if phase == tt.phase && k == tt.at {
						s.Class[batch].Shed, s.Pressure = tt.shed, tt.pressure
					}
					seconds = append(seconds, s)
				}
			}
			res := summarizeShedding(seconds)
			c := res.checks(halfOn)
			if c.shedHealthy != tt.wantShed || c.pressureHealthy != tt.wantMost || !c.metrics {
				t.Errorf("checks %+v, want %v shed and at most %v tiers", c, tt.wantShed, tt.wantMost)
			}
			var out bytes.Buffer
			res.write(&out, &sheddingExp{nodeRun: nodeRun{phase: 10 * time.Second}})
			if !strings.Contains(out.String(), tt.wantHealth) {
				t.Errorf("report lacks %q:\n%s", tt.wantHealth, out.String())
			}
		})
	}
}

// Each configuration loads, with the two classes matched by application
// name at their tiers, and shedding on or off answering Config_error;
// the batch class runs at the light rate through the second phase and at
// the heavy rate from the third.
func TestSheddingConfig(t *testing.T) {
	t.Parallel()
	e := &sheddingExp{wide: wideTable{partitions: 4}, interactiveRate: 500, lightBatchRate: 50, batchRate: 800, interactiveConcurrency: 8, batchConcurrency: 4, shortWindow: time.Second, longWindow: 20 * time.Second, nodeRun: nodeRun{upstream: "127.0.0.2:9042", keys: 100, conns: 2, phase: 10 * time.Second}}
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
	loaders := e.loaders()
	if len(loaders) != 3 {
		t.Fatalf("loaders %+v", loaders)
	}
	for i, s := range loaders {
		if s.App != shedClassNames[min(i, batch)] || s.Addr != e.proxyAddr() || s.Validate() != nil {
			t.Errorf("loader %d: spec %+v", i, s)
		}
	}
	if in, light, heavy := loaders[0], loaders[1], loaders[2]; in.Rate != 500 || in.Start != 0 || in.Stop != 0 || in.Table != "kv" ||
		light.Name != lightBatchLoader || light.Rate != 50 || light.Start != e.phase || light.Stop != 2*e.phase || light.Table != "wide" || light.Keys != 4 ||
		heavy.Name != heavyBatchLoader || heavy.Rate != 800 || heavy.Start != 2*e.phase || heavy.Stop != 0 || heavy.Table != "wide" || heavy.Keys != 4 {
		t.Errorf("interactive %+v, light batch %+v, heavy batch %+v", in, light, heavy)
	}
}
