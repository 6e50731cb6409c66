package shed

import (
	"bytes"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

// blipPath is the light-batch false start of a shedding experiment,
// rebuilt from that run's per-second log (no per-tick recording of it
// exists; the file's header says how).
const blipPath = "testdata/blip.trace"

func loadTrace(t *testing.T, path string) []Tick {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ticks, err := ReadTrace(f)
	if err != nil {
		t.Fatal(err)
	}
	return ticks
}

// replay updates c with ticks' signals and returns the pressure after each.
func replay(c *Controller, ticks []Tick) []float64 {
	out := make([]float64, len(ticks))
	for i, tk := range ticks {
		c.Update(tk.At, tk.Latency, tk.QueueOver)
		out[i] = c.Pressure()
	}
	return out
}

// TestControllerBlip replays a healthy node's blip beside a light batch:
// the interactive tier's p99 at 4.24 ms for a second, its usual 1-3 ms,
// the ratio at 0.37 and then 0.40. With the floor, nothing is shed. With
// the ratio alone it is a false start, shed only while the ratio is under
// ratio_recover; and with every start taken for an overload, as the run's
// controller took it, the trace gives back the pressures the run logged
// up to second 35, and the tier stays shed for most of a Fall after.
func TestControllerBlip(t *testing.T) {
	t.Parallel()
	ticks := loadTrace(t, blipPath)
	start := ticks[0].At - int64(100*time.Millisecond)
	healthy := int64(35100 * time.Millisecond) // the ratio back over ratio_recover
	for _, tc := range []struct {
		name string
		cfg  ControllerConfig
		// maxPressure is the most the pressure may reach; shedAfter, how
		// long it may stay above 0 once the signals are healthy again.
		maxPressure float64
		shedAfter   time.Duration
		logged      bool // the run's logged pressures come back
	}{
		{"defaults", ControllerConfig{}, 0, 0, false},
		{"ratio alone", ControllerConfig{Floor: time.Nanosecond}, 1.2, 0, false},
		{"ratio alone, every start an overload", ControllerConfig{Floor: time.Nanosecond, Confirm: time.Millisecond}, 1.2, 5 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.cfg.Tiers = []int{0, 5}
			c := newController(t, tc.cfg)
			pressures := replay(c, ticks)
			var peak float64
			var lastShed int64
			for i, p := range pressures {
				peak = max(peak, p)
				if p > 0 {
					lastShed = ticks[i].At - start
				}
				if want := ticks[i].Pressure; tc.logged && !math.IsNaN(want) && math.Abs(p-want) > 0.1 {
					t.Errorf("at %v: pressure %.2f, the run logged %.2f", time.Duration(ticks[i].At-start), p, want)
				}
			}
			t.Logf("peak pressure %.2f, last shed at %v", peak, time.Duration(lastShed))
			if peak > tc.maxPressure {
				t.Errorf("pressure reached %.2f, want at most %.2f", peak, tc.maxPressure)
			}
			if tc.maxPressure > 0 && peak == 0 {
				t.Errorf("nothing shed: the replay no longer has its false start")
			}
			if lastShed > 0 && time.Duration(lastShed-healthy) > tc.shedAfter {
				t.Errorf("shed until %v, %v after the signals were healthy; want at most %v",
					time.Duration(lastShed), time.Duration(lastShed-healthy), tc.shedAfter)
			}
			if tc.shedAfter > 0 && time.Duration(lastShed-healthy) < tc.shedAfter/2 {
				t.Errorf("shed until %v: want the slow fall of an overload", time.Duration(lastShed))
			}
		})
	}
}

// TestTraceReplay records a controller's updates through a slowdown and
// its recovery, writes and reads them back, and replays them into a new
// controller of the same configuration: the same pressure at every tick.
func TestTraceReplay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		s    step
	}{
		{"overload", step{from: 2 * time.Second, to: 9 * time.Second, ratio: 0.2}},
		{"blip", step{from: 2 * time.Second, to: 3 * time.Second, ratio: 0.3}},
		{"queue", step{from: 2 * time.Second, to: 6 * time.Second, ratio: 1, queueOver: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := ControllerConfig{Tiers: []int{0, 3, 5}, Trace: 1000}
			c := newController(t, cfg)
			base := int64(1e12)
			for at := time.Duration(0); at <= 30*time.Second; at += time.Duration(tick) {
				r, over := slowReading(1), false
				if at >= tc.s.from && at < tc.s.to {
					r, over = slowReading(tc.s.ratio), tc.s.queueOver
				}
				c.Update(base+int64(at), r, over)
			}
			var b bytes.Buffer
			if err := WriteTrace(&b, c.Trace()); err != nil {
				t.Fatal(err)
			}
			ticks, err := ReadTrace(&b)
			if err != nil {
				t.Fatal(err)
			}
			if len(ticks) != 301 {
				t.Fatalf("%d ticks read back, want 301", len(ticks))
			}
			cfg.Trace = 0
			got := replay(newController(t, cfg), ticks)
			var peak float64
			for i, p := range got {
				peak = max(peak, ticks[i].Pressure)
				if p != ticks[i].Pressure {
					t.Fatalf("tick %d: replayed pressure %v, recorded %v", i, p, ticks[i].Pressure)
				}
			}
			if peak == 0 {
				t.Error("nothing shed")
			}
		})
	}
}

// TestTraceKeepsTheLast checks the ring: the last Trace updates, oldest
// first.
func TestTraceKeepsTheLast(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ size, updates, want int }{
		{0, 5, 0}, {10, 3, 3}, {10, 10, 10}, {10, 25, 10},
	} {
		c := newController(t, ControllerConfig{Trace: tc.size})
		for i := range tc.updates {
			c.Update(int64(i+1)*tick, slowReading(1), false)
		}
		ticks := c.Trace()
		if len(ticks) != tc.want {
			t.Errorf("trace %d, %d updates: %d ticks, want %d", tc.size, tc.updates, len(ticks), tc.want)
			continue
		}
		for i, tk := range ticks {
			if want := int64(tc.updates-tc.want+i+1) * tick; tk.At != want {
				t.Errorf("trace %d, %d updates: tick %d at %d, want %d", tc.size, tc.updates, i, tk.At, want)
			}
		}
	}
}

// TestReadTraceErrors: a line that is not a tick is an error naming it.
func TestReadTraceErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ text, want string }{
		{"# header\n\n1 1 2 true false 0\n", ""},
		{"1 1 2 true false\n", "line 1: 5 fields"},
		{"#\n1 x 2 true false 0\n", "line 2: field 2"},
		{"1 1 2 yes false 0\n", "line 1: field 4"},
	} {
		_, err := ReadTrace(strings.NewReader(tc.text))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.text, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: error %v, want one with %q", tc.text, err, tc.want)
		}
	}
}

// FuzzReadTrace: whatever ReadTrace accepts, WriteTrace writes back to
// text that reads as the same ticks.
func FuzzReadTrace(f *testing.F) {
	f.Add("1 1 2 true false 0\n")
	f.Add("# x\n10 0.37 4240000 true false NaN\n-5 1e308 -1 false true +Inf\n")
	f.Fuzz(func(t *testing.T, text string) {
		ticks, err := ReadTrace(strings.NewReader(text))
		if err != nil {
			return
		}
		var b bytes.Buffer
		if err := WriteTrace(&b, ticks); err != nil {
			t.Fatal(err)
		}
		again, err := ReadTrace(&b)
		if err != nil {
			t.Fatalf("reading back %q: %v", b.String(), err)
		}
		if len(again) != len(ticks) {
			t.Fatalf("%d ticks, then %d", len(ticks), len(again))
		}
		for i := range ticks {
			a, b := ticks[i], again[i]
			same := func(x, y float64) bool { return x == y || math.IsNaN(x) && math.IsNaN(y) }
			if a.At != b.At || a.Latency.Short != b.Latency.Short || a.Latency.OK != b.Latency.OK || a.QueueOver != b.QueueOver ||
				!same(a.Latency.Ratio, b.Latency.Ratio) || !same(a.Pressure, b.Pressure) {
				t.Fatalf("tick %d: %+v, then %+v", i, a, b)
			}
		}
	})
}
