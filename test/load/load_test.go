package load

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

func TestLatencies(t *testing.T) {
	l := NewLatencies()
	if l.Percentile(50) != 0 || l.Max() != 0 || l.Mean() != 0 {
		t.Fatal("an empty histogram reports latencies")
	}
	for i := 1; i <= 10000; i++ {
		l.Record(time.Duration(i) * time.Microsecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{
		{50, 5000 * time.Microsecond},
		{99, 9900 * time.Microsecond},
		{99.9, 9990 * time.Microsecond},
		{100, 10000 * time.Microsecond},
	} {
		got := l.Percentile(tc.p)
		if math.Abs(float64(got-tc.want)) > 0.001*float64(tc.want) {
			t.Errorf("p%v = %v, want %v within 0.1%%", tc.p, got, tc.want)
		}
	}
	if math.Abs(float64(l.Mean()-5000500*time.Nanosecond)) > 0.001*5e6 {
		t.Errorf("mean %v, want about 5ms", l.Mean())
	}

	// Merging doubles the counts and keeps the percentiles.
	m := NewLatencies()
	m.Merge(l)
	m.Merge(l)
	if m.Count() != 20000 || m.Percentile(50) != l.Percentile(50) {
		t.Errorf("merged: count %d p50 %v", m.Count(), m.Percentile(50))
	}

	// Out of range values are clamped, not dropped.
	l.Reset()
	l.Record(0)
	l.Record(time.Hour)
	if l.Count() != 2 || l.Percentile(0) > 2*time.Microsecond || l.Max() < 59*time.Second {
		t.Errorf("clamped: count %d min %v max %v", l.Count(), l.Percentile(0), l.Max())
	}

	if n := testing.AllocsPerRun(1000, func() { l.Record(123 * time.Microsecond) }); n != 0 {
		t.Errorf("Record allocates %v times", n)
	}
}

func TestParseSpec(t *testing.T) {
	for _, tc := range []struct {
		text string
		want func(Spec) bool
		err  string
	}{
		{text: "", want: func(s Spec) bool { return s == DefaultSpec() }},
		{text: "name=hot, conns=8,concurrency=512,dist=hot,hot-keys=1,hot-fraction=1,op=write,value-bytes=4096",
			want: func(s Spec) bool {
				return s.Name == "hot" && s.Conns == 8 && s.Concurrency == 512 && s.Dist == Hot && s.HotFraction == 1 && s.Op == Write && s.ValueBytes == 4096
			}},
		{text: "version=5,compression=lz4,mode=query,rate=1000,start=10s,stop=20s,consistency=LOCAL_ONE",
			want: func(s Spec) bool {
				return s.Version == 5 && s.Compression == frame.CompressionLZ4 && s.Mode == Query && s.Rate == 1000 &&
					s.Start == 10*time.Second && s.Stop == 20*time.Second && s.Consistency == 10
			}},
		{text: "app=reports", want: func(s Spec) bool { return s.App == "reports" }},
		{text: "compression=none", want: func(s Spec) bool { return s.Compression == frame.CompressionNone }},
		{text: "version=5,compression=snappy", err: "LZ4 only"},
		{text: "version=2", err: "not 3, 4 or 5"},
		{text: "concurrency=40000", err: "stream ids"},
		{text: "mode=batch", err: "neither execute nor query"},
		{text: "dist=zipf,zipf-s=1", err: "over 1"},
		{text: "dist=hot,hot-keys=0", err: "hot-keys"},
		{text: "start=5s,stop=2s", err: "not after start"},
		{text: "conns", err: "want key=value"},
		{text: "colour=red", err: `unknown key "colour"`},
		{text: "conns=many", err: "conns=many"},
		{text: "addr=localhost", err: "addr=localhost"},
		{text: "consistency=most", err: "not a consistency level"},
	} {
		s, err := ParseSpec(tc.text, DefaultSpec())
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want one containing %q", tc.text, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.text, err)
		case tc.err == "" && !tc.want(s):
			t.Errorf("%q: got %+v", tc.text, s)
		}
	}
}

func startUpstream(t *testing.T, opts fakenode.Options) *fakenode.Node {
	t.Helper()
	s, err := fakenode.Start("127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Every version, compression and mode gets answers, none failed, and every
// attempted request is answered once the loader has drained.
func TestRunAgainstFakeUpstream(t *testing.T) {
	up := startUpstream(t, fakenode.Options{})
	for _, v := range []uint8{3, 4, 5} {
		for _, comp := range []frame.Compression{frame.CompressionNone, frame.CompressionLZ4, frame.CompressionSnappy} {
			if v == 5 && comp == frame.CompressionSnappy {
				continue
			}
			for _, mode := range []Mode{Execute, Query} {
				for _, op := range []Op{Read, Write} {
					name := fmt.Sprintf("v%d-%d-%s-%s", v, comp, mode, op)
					t.Run(name, func(t *testing.T) {
						s := DefaultSpec()
						s.Name, s.Addr, s.Version, s.Compression, s.Mode, s.Op = name, up.Addr(), v, comp, mode, op
						s.Conns, s.Concurrency, s.Rate = 2, 16, 4000
						sums, err := Run(context.Background(), []Spec{s}, Options{Duration: 300 * time.Millisecond})
						if err != nil {
							t.Fatal(err)
						}
						got := sums[0]
						if got.Succeeded == 0 || got.Failed != 0 || got.Rejected != 0 || len(got.Errors) != 0 {
							t.Fatalf("%+v", got)
						}
						if got.Answered() != got.Attempted {
							t.Errorf("attempted %d, answered %d", got.Attempted, got.Answered())
						}
						if got.P50 <= 0 || got.P999 < got.P50 {
							t.Errorf("latencies p50 %v p99.9 %v", got.P50, got.P999)
						}
					})
				}
			}
		}
	}
}

// Rejections are told from failures: ScyllaDB's error for a loader that
// opted in, Config_error for one that did not.
func TestRejections(t *testing.T) {
	up := startUpstream(t, fakenode.Options{RejectEvery: 4, RateLimitError: true})
	for _, optIn := range []bool{true, false} {
		s := DefaultSpec()
		s.Addr, s.OptIn, s.Conns, s.Concurrency, s.Rate = up.Addr(), optIn, 1, 8, 2000
		var last Interval
		sums, err := Run(context.Background(), []Spec{s}, Options{Duration: 300 * time.Millisecond,
			Report: func(sec Second) { last = sec.Loaders[0] }})
		if err != nil {
			t.Fatal(err)
		}
		got := sums[0]
		if got.Failed != 0 || got.Rejected == 0 || got.Rejected*4 > got.Answered()+3 || got.Rejected*4 < got.Answered()-3 {
			t.Errorf("opt-in %v: %d rejected and %d failed of %d, want a quarter rejected", optIn, got.Rejected, got.Failed, got.Answered())
		}
		if last.OKP50 <= 0 || last.OKP99 < last.OKP50 {
			t.Errorf("opt-in %v: succeeded requests' p50 %v, p99 %v", optIn, last.OKP50, last.OKP99)
		}
	}
}

// A loader with an application name sends it in its STARTUP, for client
// classes to match; one without sends none.
func TestApplicationName(t *testing.T) {
	up := startUpstream(t, fakenode.Options{})
	named, plain := DefaultSpec(), DefaultSpec()
	named.Name, named.App, plain.Name = "named", "reports", "plain"
	for _, s := range []*Spec{&named, &plain} {
		s.Addr, s.Conns, s.Concurrency, s.Rate = up.Addr(), 1, 1, 100
	}
	if _, err := Run(context.Background(), []Spec{named, plain}, Options{Duration: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	apps := map[string]int{}
	for _, st := range up.Startups() {
		apps[st.Options["APPLICATION_NAME"]]++
	}
	if apps["reports"] != 1 || apps[""] != 1 || len(apps) != 2 {
		t.Errorf("STARTUPs by APPLICATION_NAME: %v, want one reports and one without", apps)
	}
}

// A fixed rate is kept, reported each second, and the summary leaves out
// the warmup.
func TestRateAndReports(t *testing.T) {
	up := startUpstream(t, fakenode.Options{})
	s := DefaultSpec()
	s.Addr, s.Rate, s.Conns = up.Addr(), 1000, 2
	var seconds []Second
	sums, err := Run(context.Background(), []Spec{s}, Options{
		Duration: 2 * time.Second, Warmup: time.Second,
		Report: func(sec Second) { seconds = append(seconds, sec) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seconds) != 2 {
		t.Fatalf("%d reports, want 2", len(seconds))
	}
	for _, sec := range seconds {
		if a := sec.Loaders[0].Attempted; a < 900 || a > 1100 {
			t.Errorf("second %v: %d attempted at 1000/s", sec.T, a)
		}
	}
	if got := sums[0]; got.Seconds != 1 || got.Rate < 900 || got.Rate > 1100 {
		t.Errorf("summary: %v s at %.0f/s, want 1 s at about 1000/s", got.Seconds, got.Rate)
	}
}

// Loaders start and stop at their offsets, phases are named in the
// reports, and phase actions run and are reported as events.
func TestPhases(t *testing.T) {
	up := startUpstream(t, fakenode.Options{})
	base := DefaultSpec()
	base.Addr, base.Conns, base.Rate = up.Addr(), 1, 500
	uniform := base
	uniform.Name = "uniform"
	hot := base
	hot.Name, hot.Dist, hot.HotFraction, hot.Start = "hot", Hot, 1, 1500*time.Millisecond
	var mu sync.Mutex
	acted := false
	var seconds []Second
	_, err := Run(context.Background(), []Spec{uniform, hot}, Options{
		Duration: 2 * time.Second,
		Phases: []Phase{
			{Name: "baseline"},
			{Name: "hot", At: time.Second, Action: func(context.Context) error {
				mu.Lock()
				acted = true
				mu.Unlock()
				return nil
			}},
		},
		Report: func(sec Second) { seconds = append(seconds, sec) },
	})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !acted {
		t.Error("the phase action did not run")
	}
	if len(seconds) != 2 || seconds[0].Phase != "baseline" || seconds[1].Phase != "hot" {
		t.Fatalf("phases %+v", seconds)
	}
	if seconds[0].Loaders[1].Attempted != 0 || seconds[1].Loaders[1].Attempted == 0 {
		t.Errorf("hot loader attempted %d then %d, want 0 then some", seconds[0].Loaders[1].Attempted, seconds[1].Loaders[1].Attempted)
	}
	// The action runs at the boundary, so its event may be in either report.
	if events := strings.Join(append(seconds[0].Events, seconds[1].Events...), ";"); !strings.Contains(events, "phase hot began") {
		t.Errorf("events %q", events)
	}
}

// A server that is not there is an error in the summary, not a hang.
func TestUnreachable(t *testing.T) {
	up := startUpstream(t, fakenode.Options{})
	addr := up.Addr()
	up.Close()
	s := DefaultSpec()
	s.Addr = addr
	sums, err := Run(context.Background(), []Spec{s}, Options{Duration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(sums[0].Errors) == 0 || sums[0].Attempted != 0 {
		t.Errorf("%+v", sums[0])
	}
}

func TestKeyDistributions(t *testing.T) {
	for _, tc := range []struct {
		dist     Dist
		hotShare float64 // share of key 0, expected
	}{
		{Uniform, 0},
		{Hot, 0.5},
	} {
		s := DefaultSpec()
		s.Dist, s.HotFraction, s.HotKeys, s.Keys = tc.dist, 0.5, 1, 1000
		g := newKeyGen(&s, 1)
		zero := 0
		for range 100000 {
			k := g.next()
			if k < 0 || k >= 1000 {
				t.Fatalf("%s: key %d out of range", tc.dist, k)
			}
			if k == 0 {
				zero++
			}
		}
		if share := float64(zero) / 100000; math.Abs(share-tc.hotShare) > 0.01 {
			t.Errorf("%s: key 0 drawn %.3f of the time, want %.3f", tc.dist, share, tc.hotShare)
		}
	}
	s := DefaultSpec()
	s.Dist, s.Keys = Zipf, 1000
	g := newKeyGen(&s, 1)
	zero := 0
	for range 10000 {
		if g.next() == 0 {
			zero++
		}
	}
	if zero < 1000 {
		t.Errorf("zipf: key 0 drawn %d of 10000 times, want the most", zero)
	}
}

func TestCreateSchema(t *testing.T) {
	up := startUpstream(t, fakenode.Options{Username: "u", Password: "p"})
	s := DefaultSpec()
	s.Addr, s.Username, s.Password, s.Version = up.Addr(), "u", "p", 5
	if err := CreateSchema(s, 1); err != nil {
		t.Fatal(err)
	}
	s.Password = "wrong"
	if err := CreateSchema(s, 1); err == nil || !strings.Contains(err.Error(), "authentication") {
		t.Errorf("wrong password: %v", err)
	}
}

// Building a request allocates nothing once the buffers have grown, so a
// loader spends its CPU on the network.
func TestRequestBuildingAllocatesNothing(t *testing.T) {
	up := startUpstream(t, fakenode.Options{})
	for _, tc := range []struct {
		v    uint8
		comp frame.Compression
		mode Mode
	}{
		{4, frame.CompressionNone, Execute}, {4, frame.CompressionLZ4, Execute}, {4, frame.CompressionSnappy, Query},
		{5, frame.CompressionLZ4, Execute}, {5, frame.CompressionNone, Query},
	} {
		s := DefaultSpec()
		s.Addr, s.Version, s.Compression, s.Mode, s.Op = up.Addr(), tc.v, tc.comp, tc.mode, Write
		c, err := dial(&s, newConnStats(), 1)
		if err != nil {
			t.Fatal(err)
		}
		build := func() {
			c.out = c.out[:0]
			for i := range 16 {
				c.appendRequest(int16(i), c.keys.next())
			}
			if c.segs != nil {
				c.seg = c.segs.AppendFrames(c.seg[:0], c.out)
			}
			c.stats.record(succeeded, time.Millisecond)
		}
		build()
		if raceEnabled && tc.comp == frame.CompressionLZ4 {
			c.nc.Close()
			continue
		}
		if n := testing.AllocsPerRun(100, build); n != 0 {
			t.Errorf("v%d %d %s: %v allocations", tc.v, tc.comp, tc.mode, n)
		}
		c.nc.Close()
	}
}
