package main

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/cqlguard/cqlguard/test/fakenode"
	"github.com/cqlguard/cqlguard/test/load"
)

// This process's /proc files parse (load.StatCPU has its own tests).
func TestSampleProc(t *testing.T) {
	if _, err := sampleProc(os.Getpid()); err != nil {
		t.Error(err)
	}
}

func TestStatusKB(t *testing.T) {
	status := "Name:\tx\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\n"
	if got := statusKB(status, "VmRSS:"); got != 10240 {
		t.Errorf("VmRSS %d", got)
	}
	if got := statusKB(status, "VmSwap:"); got != 0 {
		t.Errorf("VmSwap %d", got)
	}
}

func TestParseMetrics(t *testing.T) {
	text := `# HELP go_memstats_mallocs_total Total number of heap objects allocated.
# TYPE go_memstats_mallocs_total counter
go_memstats_mallocs_total 1.234e+06
cqlguard_frames_total{direction="request",opcode="EXECUTE"} 100
cqlguard_frames_total{direction="request",opcode="QUERY"} 20
cqlguard_frames_total{direction="response",opcode="RESULT"} 120
`
	m, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if m["go_memstats_mallocs_total"] != 1234000 {
		t.Errorf("mallocs %v", m["go_memstats_mallocs_total"])
	}
	if got := m.sum("cqlguard_frames_total", `direction="request"`); got != 120 {
		t.Errorf("requests %v", got)
	}
	if got := m.sum("cqlguard_frames_total", `direction="request"`, `opcode="QUERY"`); got != 20 {
		t.Errorf("queries %v", got)
	}
	if _, err := parseMetrics(strings.NewReader(text + "malformed line\n")); err == nil {
		t.Error("a malformed line read without an error")
	}
}

func TestParsePhase(t *testing.T) {
	p, err := parsePhase("limited@60s=kill -HUP 1", os.Stderr)
	if err != nil || p.Name != "limited" || p.At != time.Minute || p.Action == nil {
		t.Errorf("%+v, %v", p, err)
	}
	p, err = parsePhase("baseline@0s", os.Stderr)
	if err != nil || p.Name != "baseline" || p.Action != nil {
		t.Errorf("%+v, %v", p, err)
	}
	for _, bad := range []string{"baseline", "@1s", "x@soon"} {
		if _, err := parsePhase(bad, os.Stderr); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestRowMarkdown(t *testing.T) {
	direct := &row{name: "EXECUTE v4 none", path: "direct",
		sat: load.Summary{Succeeded: 1000, Rate: 100000},
		lat: load.Summary{Succeeded: 10, P50: 40 * time.Microsecond, P99: 90 * time.Microsecond, P999: 2 * time.Millisecond}}
	floor := &row{name: "EXECUTE v4 none", path: relayPath, direct: direct,
		sat:  load.Summary{Succeeded: 1000, Rate: 100000},
		lat:  load.Summary{Succeeded: 10, P50: 65 * time.Microsecond, P99: 120 * time.Microsecond, P999: 2 * time.Millisecond},
		cost: &proxyCost{cpuSat: 2 * time.Microsecond, cpuLat: 8 * time.Microsecond, rss: 8 << 20}}
	via := &row{name: "EXECUTE v4 none", path: "cqlguard", direct: direct, relay: floor,
		sat:     load.Summary{Succeeded: 1000, Rate: 85000},
		lat:     load.Summary{Succeeded: 10, P50: 75 * time.Microsecond, P99: 150 * time.Microsecond, P999: 3 * time.Millisecond},
		cost:    &proxyCost{fromMetrics: true, cpuSat: 2500 * time.Nanosecond, cpuLat: 9 * time.Microsecond, allocsLatNoise: 0.05, rss: 20 << 20},
		sideCPU: 1500 * time.Nanosecond}
	for _, tc := range []struct {
		r    *row
		want string
	}{
		{floor, "| EXECUTE v4 none | Go relay | 100000 | 100% | 65.0µs (+25µs) | 120µs | 2.00ms | 2.00 / 8.00 |  | 8.0 |  |  |"},
		{via, "| EXECUTE v4 none | cqlguard | 85000 | 85% | 75.0µs (+35µs) | 150µs | 3.00ms | 2.50 / 9.00 | 0.000 / 0.000 ±0.050 | 20.0 | 1.50 | 0.85× / 1.25× / 1.40× |"},
	} {
		if got := tc.r.markdown(); got != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
	}
	// A relay no slower than direct leaves the added p50's ratio undefined.
	floor.lat.P50 = direct.lat.P50
	if got := via.vsRelay(); got != "0.85× / 1.25× / -" {
		t.Errorf("vs relay %q", got)
	}
	todo := &row{name: "EXECUTE v4 none, rejected", path: "cqlguard", note: "TODO: needs enforcement"}
	if got := todo.markdown(); !strings.Contains(got, "| TODO: needs enforcement |") {
		t.Errorf("got %s", got)
	}
}

func TestGocqlRowMarkdown(t *testing.T) {
	mode := gocqlModes[1]
	run := func(round int, rate float64, p50 time.Duration, cpu time.Duration) gocqlRun {
		return gocqlRun{round: round, sum: load.Summary{Succeeded: 1, Rate: rate, P50: p50, P99: 3 * p50}, cpu: cpu}
	}
	direct := &gocqlRow{mode: mode, path: "direct", runs: []gocqlRun{run(0, 30000, 100*time.Microsecond, 0)}}
	// Medians of three: each figure the middle of its own three.
	floor := &gocqlRow{mode: mode, path: relayPath, direct: direct, runs: []gocqlRun{
		run(0, 29990, 250*time.Microsecond, 12*time.Microsecond),
		run(1, 30000, 200*time.Microsecond, 14*time.Microsecond),
		run(2, 29000, 300*time.Microsecond, 10*time.Microsecond),
	}}
	// The ratios to the relay pair runs by round: CPU 18/12, 15/14, 11/10.
	// Round 3 has no relay run to pair with.
	via := &gocqlRow{mode: mode, path: cqlguardPath, direct: direct, relay: floor, runs: []gocqlRun{
		run(0, 29990, 400*time.Microsecond, 18*time.Microsecond),
		run(1, 30000, 350*time.Microsecond, 15*time.Microsecond),
		run(2, 29000, 450*time.Microsecond, 11*time.Microsecond),
		run(3, 1, 450*time.Microsecond, 90*time.Microsecond),
	}}
	once := &gocqlRow{mode: mode, path: cqlguardPath, direct: direct, relay: floor,
		runs: []gocqlRun{run(1, 30000, 400*time.Microsecond, 21*time.Microsecond)}}
	skipped := &gocqlRow{mode: mode, path: haproxyPath, direct: direct, relay: floor, note: "skipped: haproxy is not installed"}
	for _, tc := range []struct {
		r    *gocqlRow
		want string
	}{
		{direct, "| gocql 30000/s | direct | 30000 | 100µs | 300µs |  |  |  |  |  |"},
		{floor, "| gocql 30000/s | Go relay | 29990 | 250µs | 750µs | +150µs | 12.00 |  |  |  |"},
		{via, "| gocql 30000/s | cqlguard | 29495 | 425µs | 1.27ms | +325µs | 16.50 | 1.00× | 1.10× (1.07-1.50) | 2.17× |"},
		{once, "| gocql 30000/s | cqlguard | 30000 | 400µs | 1.20ms | +300µs | 21.00 | 1.00× | 1.50× | 2.00× |"},
		{skipped, "| gocql 30000/s | HAProxy | skipped: haproxy is not installed |  |  |  |  |  |  |  |"},
	} {
		if got := tc.r.markdown(); got != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
	}
	even := &gocqlRow{runs: []gocqlRun{run(0, 1, 0, 0), run(1, 3, 0, 0)}}
	if got := even.median(runRate); got != 2 {
		t.Errorf("median of 1 and 3: %v", got)
	}
}

// TestWriteReportUnpinned checks that the unpinned gocql rows get a table
// of their own after the pinned one, and the columns one legend.
func TestWriteReportUnpinned(t *testing.T) {
	row := func(p50 time.Duration) []*gocqlRow {
		return []*gocqlRow{{mode: gocqlModes[2], path: "direct",
			runs: []gocqlRun{{sum: load.Summary{Succeeded: 1, Rate: 10000, P50: p50, P99: p50}}}}}
	}
	s := &suite{pin: true, gocqlRuns: 1}
	var b bytes.Buffer
	s.writeReport(&b, nil, row(200*time.Microsecond), row(90*time.Microsecond), time.Second)
	out := b.String()
	pinned := strings.Index(out, "| 200µs |")
	again := strings.Index(out, "The gocql rows again, unpinned")
	unpinned := strings.Index(out, "| 90.0µs |")
	if pinned < 0 || again < pinned || unpinned < again {
		t.Errorf("want the pinned table, then the unpinned one:\n%s", out)
	}
	if n := strings.Count(out, "added p50: the p50 less the direct row's"); n != 1 {
		t.Errorf("the legend is written %d times, want once:\n%s", n, out)
	}
	if n := strings.Count(out, "-gocql-runs 10 gives figures"); n != 2 {
		t.Errorf("each single-round table should say its ratios are one round's; %d do:\n%s", n, out)
	}
}

func TestRoundOrder(t *testing.T) {
	for _, tc := range []struct {
		n, paths, round int
		want            []int
	}{
		{6, 3, 0, []int{0, 1, 2, 3, 4, 5}},
		{6, 3, 1, []int{0, 2, 1, 3, 5, 4}},
		{6, 3, 2, []int{0, 1, 2, 3, 4, 5}},
		{10, 5, 1, []int{0, 4, 3, 2, 1, 5, 9, 8, 7, 6}},
	} {
		if got := roundOrder(tc.n, tc.paths, tc.round); !slices.Equal(got, tc.want) {
			t.Errorf("roundOrder(%d, %d, %d) = %v, want %v", tc.n, tc.paths, tc.round, got, tc.want)
		}
	}
}

func TestParseGocqlPaths(t *testing.T) {
	for _, tc := range []struct {
		list string
		want []string
		err  bool
	}{
		{list: "cqlguard", want: []string{relayPath, cqlguardPath}},
		{list: "cqlguard,routed", want: []string{relayPath, cqlguardPath, routedPath}},
		{list: "relay, haproxy,eventloop", want: []string{relayPath, haproxyPath, loopRelayPath}},
		{list: "cqlguard,nginx", err: true},
	} {
		got, err := parseGocqlPaths(tc.list)
		if (err != nil) != tc.err {
			t.Errorf("%q: error %v", tc.list, err)
			continue
		}
		if len(got) != len(tc.want) {
			t.Errorf("%q: got %v, want %v", tc.list, got, tc.want)
		}
		for _, p := range tc.want {
			if !got[p] {
				t.Errorf("%q: %s missing from %v", tc.list, p, got)
			}
		}
	}
}

func TestHAProxyConfig(t *testing.T) {
	cfg := haproxyConfig("127.0.0.1:9043", "127.0.0.1:9042", 1)
	for _, want := range []string{"nbthread 1\n", "mode tcp\n", "bind 127.0.0.1:9043\n", "server node 127.0.0.1:9042\n"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("no %q in\n%s", want, cfg)
		}
	}
	if strings.Contains(cfg, "log") {
		t.Errorf("logging in\n%s", cfg)
	}
}

// The load command drives a fake upstream and prints JSON summaries.
func TestLoadCommand(t *testing.T) {
	up, err := fakenode.Start("127.0.0.1:0", fakenode.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	jsonPath := filepath.Join(t.TempDir(), "seconds.jsonl")
	var stdout, stderr bytes.Buffer
	err = run([]string{"load", "-addr", up.Addr(), "-duration", "1s", "-rate", "1000", "-conns", "1",
		"-summary-json", "-json", jsonPath,
		"-loader", "name=reads", "-loader", "name=writes,op=write,mode=query,version=5,compression=lz4",
		"-phase", "only@0s"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	var sums []load.Summary
	if err := json.Unmarshal(stdout.Bytes(), &sums); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	if len(sums) != 2 || sums[0].Loader != "reads" || sums[1].Loader != "writes" || sums[0].Succeeded == 0 || sums[1].Succeeded == 0 {
		t.Errorf("summaries %+v", sums)
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var sec load.Second
	if err := json.Unmarshal(bytes.SplitN(b, []byte("\n"), 2)[0], &sec); err != nil || sec.Phase != "only" || len(sec.Loaders) != 2 {
		t.Errorf("first second %+v, %v", sec, err)
	}
	if !strings.Contains(stderr.String(), "reads") {
		t.Errorf("no per-second lines: %s", stderr.String())
	}

	if err := run([]string{"load", "-loader", "colour=red"}, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), "colour") {
		t.Errorf("bad loader: %v", err)
	}
	if err := run([]string{"nonsense"}, &stdout, &stderr); err == nil {
		t.Error("unknown command accepted")
	}
}

// The fake cluster's nodes share a port at consecutive IPs, and each
// lists the others as its peers, so that a client reading one learns all.
func TestStartNodes(t *testing.T) {
	nodes, err := startNodes("127.0.0.21:0", 3, fakenode.Options{PeersV2: true})
	for _, n := range nodes {
		defer n.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(nodes[0].Addr())
	for i, want := range []string{"127.0.0.21", "127.0.0.22", "127.0.0.23"} {
		if got := nodes[i].Addr(); got != net.JoinHostPort(want, port) {
			t.Errorf("node %d at %s, want %s:%s", i, got, want, port)
		}
	}
	c := gocql.NewCluster(nodes[1].Addr())
	c.ProtoVersion, c.DisableInitialHostLookup = 4, true
	s, err := c.CreateSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var peers []string
	var peer net.IP
	it := s.Query("SELECT peer FROM system.peers_v2").Iter()
	for it.Scan(&peer) {
		peers = append(peers, peer.String())
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"127.0.0.21", "127.0.0.23"}; !slices.Equal(peers, want) {
		t.Errorf("node 2's peers %v, want %v", peers, want)
	}
	if _, err := startNodes("localhost:0", 2, fakenode.Options{}); err == nil {
		t.Error("startNodes with a host name and 2 nodes: no error")
	}
}
