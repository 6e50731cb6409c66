package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/test/load"
)

// The goodput experiment's figures are means per phase over the seconds
// after each change settled, its configurations load, and its plot is a
// PNG.
func TestGoodputSummary(t *testing.T) {
	g := &goodput{limit: 100, hotOp: "read", nodeRun: nodeRun{warmup: 2 * time.Second, phase: 5 * time.Second, upstream: "127.0.0.2:9042", user: "cassandra", out: filepath.Join(t.TempDir(), "goodput.png")}}
	var seconds []load.Second
	for i := 1; i <= 22; i++ {
		t := time.Duration(i) * time.Second
		phase, uniform, hotOK, hotRej := phaseBaseline, uint64(1000), uint64(0), uint64(0)
		switch {
		case t > 17*time.Second:
			phase, uniform, hotOK = phaseServed, 980, 5000
		case t > 12*time.Second:
			phase, uniform, hotOK, hotRej = phaseLimited, 950, 100, 900
		case t > 7*time.Second:
			phase, uniform, hotOK = phaseHot, 400, 1000
		}
		seconds = append(seconds, load.Second{T: t, Length: time.Second, Phase: phase, Loaders: []load.Interval{
			{Loader: "uniform", Succeeded: uniform, P99: time.Millisecond},
			{Loader: "hot", Succeeded: hotOK, Rejected: hotRej},
		}})
	}
	res := g.summarize(seconds)
	want := []phaseFigures{
		{name: phaseBaseline, seconds: 5, goodput: 1000, p99: 1000},
		{name: phaseHot, seconds: 2, goodput: 400, p99: 1000, hotAccepted: 1000},
		{name: phaseLimited, seconds: 2, goodput: 950, p99: 1000, hotAccepted: 100, hotRejected: 900},
		{name: phaseServed, seconds: 2, goodput: 980, p99: 1000, hotAccepted: 5000},
	}
	if len(res.phases) != len(want) {
		t.Fatalf("%d phases, want %d", len(res.phases), len(want))
	}
	from := upstreamCounts{at: time.Unix(100, 0), forwarded: 1000, hotForwarded: 10, hotServed: 100, nodeReads: 2000, ok: true}
	to := upstreamCounts{at: time.Unix(110, 0), forwarded: 11000, hotForwarded: 110, hotServed: 50100, nodeReads: 12000, ok: true}
	res.upstream = to.minus(from)
	for i, w := range want {
		if res.phases[i] != w {
			t.Errorf("phase %d: %+v, want %+v", i, res.phases[i], w)
		}
	}
	var b bytes.Buffer
	res.write(&b, g)
	if !strings.Contains(b.String(), "goodput is 95% of its level alone") || !strings.Contains(b.String(), "100/s against a limit of 100/s") ||
		!strings.Contains(b.String(), "5000 answers/s and 0 refusals/s") || !strings.Contains(b.String(), "goodput is 98% of its level alone") ||
		!strings.Contains(b.String(), "counted by cqlguard: 10.0 (served by cqlguard: 5000)") || !strings.Contains(b.String(), "1000 (+0.00% of cqlguard's count)") {
		t.Errorf("report:\n%s", b.String())
	}

	if err := g.plot(seconds); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(g.out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("plot: %v", err)
	}

	g.cacheTTL = 100 * time.Millisecond
	for _, c := range []struct{ limited, served bool }{{false, false}, {true, false}, {true, true}} {
		path := filepath.Join(t.TempDir(), "cqlguard.yaml")
		os.WriteFile(path, []byte(g.config(c.limited, c.served)), 0o600)
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatalf("config %+v: %v", c, err)
		}
		if got := cfg.Limits.Keyspaces["bench"].Tables["kv"].MaxReadsPerSecond; c.limited != (got != nil && *got == 100) {
			t.Errorf("config %+v: bench.kv reads limit %v", c, got)
		}
		if got, ok := cfg.HotReads.Keyspaces["bench"].Tables["kv"]; c.served != (ok && got.Coalesce && got.CacheTTL == config.Duration(g.cacheTTL)) {
			t.Errorf("config %+v: bench.kv hot reads %+v", c, got)
		}
	}
}
