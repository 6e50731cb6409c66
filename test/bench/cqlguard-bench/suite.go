package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
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

	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/test/load"
)

// suite runs the benchmark behind make bench: the fake upstream and
// cqlguard as separate processes, the load generator as a third, each
// workload direct to the upstream and through cqlguard, the uncompressed
// ones also through a plain relay, and a load through gocql direct and
// through each proxy (gocql.go); one table for each load.
type suite struct {
	self, cqlguard string
	dir            string
	stderr         io.Writer
	verbose        bool

	satDuration, satWarmup time.Duration
	latDuration, latWarmup time.Duration
	latRate                float64
	conns, concurrency     int
	pin                    bool
	only                   string
	rejectLimits           string
	redisScript            string
	haproxy                string

	gocqlDuration, gocqlWarmup time.Duration
	gocqlConcurrency           int
	gocqlRuns                  int
	// gocqlUnpinned, with pinning, has the gocql rows measured a second
	// time with nothing pinned.
	gocqlUnpinned bool
	// gocqlPaths are the proxies the gocql rows run through, by path.
	gocqlPaths map[string]bool

	upstreamAddr string
	upstreamPid  int
	procs        []*exec.Cmd
	// relays are the relays started, by -mode of the relay command.
	relays map[string]startedRelay
}

// startedRelay is a relay once started, or why it did not start.
type startedRelay struct {
	px  *proxy
	err error
}

// defaultRejectLimits limits bench.kv to one read a second per partition:
// with every request on one partition, nearly all are rejected.
const defaultRejectLimits = `limits:
  keyspaces:
    bench:
      tables:
        kv:
          max_reads_per_second: 1
`

func runSuite(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("suite", flag.ContinueOnError)
	fs.SetOutput(stderr)
	s := &suite{stderr: stderr}
	fs.StringVar(&s.cqlguard, "cqlguard", "bin/cqlguard", "the cqlguard binary")
	fs.DurationVar(&s.satDuration, "duration", 6*time.Second, "measured length of each saturating run")
	fs.DurationVar(&s.satWarmup, "warmup", 2*time.Second, "warmup before each saturating run")
	fs.DurationVar(&s.latDuration, "latency-duration", 4*time.Second, "measured length of each fixed-rate run")
	fs.Float64Var(&s.latRate, "latency-rate", 5000, "requests per second of the fixed-rate (latency) runs")
	fs.IntVar(&s.conns, "conns", 4, "connections of each run")
	fs.IntVar(&s.concurrency, "concurrency", 64, "requests in flight per connection in saturating runs")
	pin := fs.String("pin", "split", "split: the load generator and the upstream on CPU 0, cqlguard on CPU 1; none: no pinning")
	fs.StringVar(&s.only, "only", "", "run only the workloads whose name contains this (say \"EXECUTE v4\")")
	fs.StringVar(&s.redisScript, "redis-script", "test/redis/redis.sh", "script that installs and starts Redis, for the coordinated row")
	fs.StringVar(&s.haproxy, "haproxy", "haproxy", "the haproxy binary, for the HAProxy rows (skipped when it is missing: test/haproxy/haproxy.sh install)")
	fs.DurationVar(&s.gocqlDuration, "gocql-duration", 5*time.Second, "measured length of each gocql run")
	fs.DurationVar(&s.gocqlWarmup, "gocql-warmup", time.Second, "warmup before each gocql run, after the session is up")
	fs.IntVar(&s.gocqlConcurrency, "gocql-concurrency", 64, "requests in flight over all connections in the gocql runs")
	fs.IntVar(&s.gocqlRuns, "gocql-runs", 1, "runs of each gocql row, reported as medians")
	fs.BoolVar(&s.gocqlUnpinned, "gocql-unpinned", true, "with -pin split, also run the gocql rows with nothing pinned, in a second table")
	paths := fs.String("gocql-paths", "relay,eventloop,haproxy,cqlguard,routed", "the proxies of the gocql rows, of relay, eventloop, haproxy, cqlguard and routed (cqlguard in front of a fake cluster of three nodes; the Go relay always runs)")
	fs.StringVar(&s.rejectLimits, "reject-limits", "", "YAML file with the limits section that makes cqlguard reject every request of the rejected row (default: bench.kv at 1 read/s)")
	out := fs.String("out", "", "also write the table to this file")
	fs.BoolVar(&s.verbose, "v", false, "print each run's summary")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if s.gocqlRuns < 1 {
		return fmt.Errorf("-gocql-runs %d: want at least 1", s.gocqlRuns)
	}
	gocqlPaths, err := parseGocqlPaths(*paths)
	if err != nil {
		return err
	}
	s.gocqlPaths = gocqlPaths
	s.latWarmup = time.Second
	switch *pin {
	case "split":
		_, err := exec.LookPath("taskset")
		s.pin = runtime.NumCPU() >= 2 && err == nil
		if !s.pin {
			fmt.Fprintln(stderr, "pin split needs taskset and 2 CPUs; running unpinned")
		}
	case "none":
	default:
		return fmt.Errorf("-pin %q: want split or none", *pin)
	}
	if s.self, err = os.Executable(); err != nil {
		return err
	}
	if s.cqlguard, err = filepath.Abs(s.cqlguard); err != nil {
		return err
	}
	if _, err := os.Stat(s.cqlguard); err != nil {
		return fmt.Errorf("cqlguard binary: %w (run make build)", err)
	}
	if s.dir, err = os.MkdirTemp("", "cqlguard-bench-"); err != nil {
		return err
	}
	defer os.RemoveAll(s.dir)
	defer s.stopAll()

	started := time.Now()
	rows, err := s.runAll(ctx)
	if err != nil {
		return err
	}
	driven, err := s.gocqlRows(ctx)
	if err != nil {
		return err
	}
	var unpinned []*gocqlRow
	if s.pin && s.gocqlUnpinned && len(driven) > 0 {
		if unpinned, err = s.unpinnedGocqlRows(ctx); err != nil {
			return err
		}
	}
	var table bytes.Buffer
	s.writeReport(&table, rows, driven, unpinned, time.Since(started))
	stdout.Write(table.Bytes())
	if *out != "" {
		return os.WriteFile(*out, table.Bytes(), 0o644)
	}
	return nil
}

// workload is one line pair of the table.
type workload struct {
	mode    load.Mode
	version uint8
	comp    frame.Compression
}

func (w workload) String() string {
	return fmt.Sprintf("%s v%d %s", strings.ToUpper(string(w.mode)), w.version, compressionName(w.comp))
}

func compressionName(c frame.Compression) string {
	return [...]string{"none", "lz4", "snappy"}[c]
}

func workloads() []workload {
	var ws []workload
	for _, m := range []load.Mode{load.Execute, load.Query} {
		for _, v := range []uint8{4, 5} {
			for _, c := range []frame.Compression{frame.CompressionNone, frame.CompressionLZ4, frame.CompressionSnappy} {
				if v == 5 && c == frame.CompressionSnappy {
					continue
				}
				ws = append(ws, workload{m, v, c})
			}
		}
	}
	return ws
}

// row is one line of the table.
type row struct {
	name, path string
	sat, lat   load.Summary  // saturating and fixed-rate runs
	sideCPU    time.Duration // load generator and upstream CPU per request, saturated
	cost       *proxyCost    // through a proxy
	direct     *row          // the direct row to compare with
	relay      *row          // the Go relay's row of the same load, if it ran
	note       string
}

// proxyCost is what a proxy spent, per request it received. The
// allocations are cqlguard's only (fromMetrics): the relay and HAProxy
// have no /metrics.
type proxyCost struct {
	fromMetrics          bool
	cpuSat, cpuLat       time.Duration // CPU per request, saturated and at the fixed rate
	allocsSat, allocsLat float64
	// The allocations per request that the scrapes' own variation could
	// account for: figures below them are noise.
	allocsSatNoise, allocsLatNoise float64
	rss                            int64
}

// runAll measures the pipelining load generator's rows.
func (s *suite) runAll(ctx context.Context) ([]*row, error) {
	if err := s.startUpstream(ctx); err != nil {
		return nil, err
	}
	var px *proxy
	var rows []*row
	relays := map[string]*row{}
	for _, w := range workloads() {
		if s.only != "" && !strings.Contains(w.String(), s.only) {
			continue
		}
		if px == nil {
			var err error
			if px, err = s.startProxy(ctx, "cqlguard", ""); err != nil {
				return nil, fmt.Errorf("starting cqlguard: %w", err)
			}
		}
		spec := load.DefaultSpec()
		spec.Version, spec.Compression, spec.Mode, spec.Conns = w.version, w.comp, w.mode, s.conns
		direct := &row{name: w.String(), path: "direct"}
		spec.Addr = s.upstreamAddr
		if err := s.measure(ctx, spec, direct, nil); err != nil {
			return nil, err
		}
		rows = append(rows, direct)
		// The relay reads no byte: its cost depends on the workload only
		// through the bytes, and the uncompressed workloads show it.
		var floor *row
		if w.comp == frame.CompressionNone {
			floor = &row{name: w.String(), path: relayPath, direct: direct, cost: &proxyCost{}}
			if rl, err := s.startRelay(ctx, "go"); err != nil {
				floor.note = "TODO: " + firstLine(err.Error())
			} else {
				spec.Addr = rl.addr
				if err := s.measure(ctx, spec, floor, rl); err != nil {
					return nil, err
				}
			}
			rows = append(rows, floor)
			relays[w.String()] = floor
		}
		via := &row{name: w.String(), path: "cqlguard", direct: direct, relay: floor, cost: &proxyCost{}}
		spec.Addr = px.addr
		if err := s.measure(ctx, spec, via, px); err != nil {
			return nil, err
		}
		rows = append(rows, via)
	}
	if s.only == "" || strings.Contains("rejected", s.only) {
		rows = append(rows, s.rejectedRow(ctx))
	}
	if s.only == "" || strings.Contains("counted, coordinated", s.only) {
		rows = append(rows, s.coordinatedRows(ctx, relays["EXECUTE v4 none"])...)
	}
	if s.only == "" || strings.Contains("hot key", s.only) {
		rows = append(rows, s.hotRows(ctx, relays["EXECUTE v4 none"])...)
	}
	if s.only == "" || strings.Contains("classes and RU", s.only) {
		rows = append(rows, s.classRows(ctx, relays["EXECUTE v4 none"])...)
	}
	return rows, nil
}

// measure runs spec saturated and at the fixed rate, filling r; px, when
// set, is the proxy in between, whose costs are sampled.
func (s *suite) measure(ctx context.Context, spec load.Spec, r *row, px *proxy) error {
	spec.Concurrency = s.concurrency
	fmt.Fprintf(s.stderr, "%-22s %-9s saturated...", r.name, r.path)
	sum, c, err := s.runLoad(ctx, spec, s.satWarmup, s.satDuration, px)
	if err != nil {
		return err
	}
	r.sat, r.sideCPU = sum, c.perRequest(c.side, sum.Rate)
	if px != nil {
		r.cost.fromMetrics = px.metricsURL != ""
		r.cost.cpuSat, r.cost.allocsSat, r.cost.allocsSatNoise, r.cost.rss = c.cpu, c.allocs, c.allocsNoise, c.rss
	}
	fmt.Fprintf(s.stderr, " %.0f req/s; at %.0f req/s...", r.sat.Rate, s.latRate)
	spec.Rate = s.latRate
	if r.lat, c, err = s.runLoad(ctx, spec, s.latWarmup, s.latDuration, px); err != nil {
		return err
	}
	if px != nil {
		r.cost.cpuLat, r.cost.allocsLat, r.cost.allocsLatNoise = c.cpu, c.allocs, c.allocsNoise
	}
	fmt.Fprintf(s.stderr, " p50 %s\n", load.FormatLatency(r.lat.P50))
	return nil
}

// sampledCost is what the processes spent over a sampled window.
type sampledCost struct {
	window time.Duration
	// side is the CPU time of the load generator and the fake upstream.
	side time.Duration
	// proxyCPU is the proxy's CPU time, when there is one.
	proxyCPU time.Duration
	// The proxy's, per request it received: counted by cqlguard's
	// /metrics, or for a proxy without them, taken as what the load
	// generator answered at its rate over the window.
	cpu                 time.Duration
	allocs, allocsNoise float64
	rss                 int64
}

// perRequest spreads CPU time spent over the window across the requests
// answered in it at rate.
func (c sampledCost) perRequest(cpu time.Duration, rate float64) time.Duration {
	if rate <= 0 || c.window <= 0 {
		return 0
	}
	return time.Duration(float64(cpu) / (rate * c.window.Seconds()))
}

// runLoad runs the load generator as a process pinned beside the
// upstream, and samples the processes' costs over the measured window.
func (s *suite) runLoad(ctx context.Context, spec load.Spec, warmup, measured time.Duration, px *proxy) (load.Summary, sampledCost, error) {
	args := []string{"load", "-summary-json", "-quiet",
		"-duration", (warmup + measured).String(), "-warmup", warmup.String(),
		"-addr", spec.Addr, "-version", strconv.Itoa(int(spec.Version)),
		"-compression", compressionName(spec.Compression), "-mode", string(spec.Mode), "-op", string(spec.Op),
		"-conns", strconv.Itoa(spec.Conns), "-concurrency", strconv.Itoa(spec.Concurrency),
		"-rate", strconv.FormatFloat(spec.Rate, 'f', -1, 64),
		"-dist", string(spec.Dist), "-hot-keys", strconv.FormatUint(spec.HotKeys, 10),
		"-hot-fraction", strconv.FormatFloat(spec.HotFraction, 'f', -1, 64), "-opt-in", strconv.FormatBool(spec.OptIn),
	}
	return s.runLoader(ctx, args, spec.Addr, warmup, measured, px)
}

// runLoader runs a load command of this binary (args, which must print a
// JSON list of one summary) as a process pinned beside the upstream, and
// samples the processes' costs over the measured window.
func (s *suite) runLoader(ctx context.Context, args []string, addr string, warmup, measured time.Duration, px *proxy) (load.Summary, sampledCost, error) {
	cmd := s.command(ctx, 0, s.self, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		return load.Summary{}, sampledCost{}, err
	}
	type sampled struct {
		c   sampledCost
		err error
	}
	done := make(chan sampled, 1)
	go func() {
		// Sample inside the measured window, clear of its edges.
		margin := min(500*time.Millisecond, measured/10)
		c, err := s.sample(ctx, time.Now().Add(warmup+margin), measured-2*margin, cmd.Process.Pid, px)
		done <- sampled{c, err}
	}()
	err := cmd.Wait()
	smp := <-done
	if smp.err != nil && err == nil {
		err = fmt.Errorf("sampling: %w", smp.err)
	}
	if err != nil {
		return load.Summary{}, smp.c, fmt.Errorf("load %v: %w\n%s", args, err, errOut.String())
	}
	var sums []load.Summary
	if err := json.Unmarshal(out.Bytes(), &sums); err != nil || len(sums) != 1 {
		return load.Summary{}, smp.c, fmt.Errorf("load output %q: %v", out.String(), err)
	}
	if s.verbose {
		load.WriteSummaries(s.stderr, sums)
	}
	if px != nil && px.metricsURL == "" {
		smp.c.cpu = smp.c.perRequest(smp.c.proxyCPU, sums[0].Rate)
	}
	if len(sums[0].Errors) > 0 {
		load.WriteSummaries(s.stderr, sums)
		return sums[0], smp.c, fmt.Errorf("load against %s: errors", addr)
	}
	return sums[0], smp.c, nil
}

// command returns a command pinned to cpu when the suite pins (cpu < 0:
// never).
func (s *suite) command(ctx context.Context, cpu int, name string, args ...string) *exec.Cmd {
	if s.pin && cpu >= 0 {
		return exec.CommandContext(ctx, "taskset", append([]string{"-c", strconv.Itoa(cpu), name}, args...)...)
	}
	return exec.CommandContext(ctx, name, args...)
}

func (s *suite) startUpstream(ctx context.Context) error {
	cmd := s.command(ctx, 0, s.self, "upstream", "-listen", "127.0.0.1:0")
	addr, err := s.startListening(cmd)
	if err != nil {
		return fmt.Errorf("fake upstream did not start: %w", err)
	}
	s.upstreamAddr, s.upstreamPid = addr, cmd.Process.Pid
	return nil
}

// The paths of the relays' rows: the Go relay (-mode go), which the other
// rows are compared with, and the event-loop relay (-mode eventloop).
const (
	relayPath     = "Go relay"
	loopRelayPath = "event-loop relay"
)

// startRelay starts the relay of the given -mode in front of the
// upstream, pinned as cqlguard is, once; later calls return the same
// relay, or the same error.
func (s *suite) startRelay(ctx context.Context, mode string) (*proxy, error) {
	if r, ok := s.relays[mode]; ok {
		return r.px, r.err
	}
	if s.relays == nil {
		s.relays = map[string]startedRelay{}
	}
	cmd := s.command(ctx, 1, s.self, "relay", "-mode", mode, "-listen", "127.0.0.1:0", "-upstream", s.upstreamAddr)
	var r startedRelay
	if addr, err := s.startListening(cmd); err != nil {
		r.err = fmt.Errorf("the %s relay did not start: %w", mode, err)
	} else {
		r.px = &proxy{cmd: cmd, addr: addr}
	}
	s.relays[mode] = r
	return r.px, r.err
}

// startListening starts cmd, a command of this binary that prints
// "listening on ADDR" once it listens, and returns ADDR.
func (s *suite) startListening(cmd *exec.Cmd) (string, error) {
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		return "", err
	}
	s.procs = append(s.procs, cmd)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		return "", fmt.Errorf("%q %v", line, err)
	}
	return addr, nil
}

// proxy is a running proxy: cqlguard, or a relay or HAProxy, which have
// no metricsURL.
type proxy struct {
	cmd        *exec.Cmd
	addr       string
	metricsURL string
	logPath    string
	// scrapeAllocs is what one scrape of /metrics allocates in the proxy,
	// taken off the allocations counted over a window; scrapeNoise is how
	// much that varies from one scrape to the next.
	scrapeAllocs, scrapeNoise float64
}

// startProxy starts cqlguard in front of the upstream, its configuration
// extended with extra.
func (s *suite) startProxy(ctx context.Context, name, extra string) (*proxy, error) {
	return s.startProxyTo(ctx, name, s.upstreamAddr, extra)
}

// startProxyTo starts cqlguard in front of the node at upstream, its
// configuration extended with extra.
func (s *suite) startProxyTo(ctx context.Context, name, upstream, extra string) (*proxy, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	px := &proxy{
		addr:       net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
		metricsURL: "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])) + "/metrics",
		logPath:    filepath.Join(s.dir, name+".log"),
	}
	// /hot on, at its default size, said here so that every row keeps it.
	cfg := fmt.Sprintf("listen: %s\nupstreams: [%s]\nadmin:\n  listen: 127.0.0.1:%d\n  hot_partitions: 100\nlog:\n  level: warn\n%s",
		px.addr, upstream, ports[1], extra)
	cfgPath := filepath.Join(s.dir, name+".yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	logFile, err := os.Create(px.logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	px.cmd = s.command(ctx, 1, s.cqlguard, "-config", cfgPath)
	px.cmd.Stdout, px.cmd.Stderr = logFile, logFile
	if err := px.cmd.Start(); err != nil {
		return nil, err
	}
	s.procs = append(s.procs, px.cmd)
	exited := make(chan struct{})
	go func() {
		px.cmd.Wait()
		close(exited)
	}()
	ready := strings.TrimSuffix(px.metricsURL, "/metrics") + "/readyz"
	for deadline := time.Now().Add(20 * time.Second); ; {
		select {
		case <-exited:
			return nil, fmt.Errorf("cqlguard exited: %s", tail(px.logPath))
		default:
		}
		if resp, err := http.Get(ready); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("cqlguard not ready after 20s: %s", tail(px.logPath))
		}
		time.Sleep(50 * time.Millisecond)
	}
	// What a scrape allocates: the mean over a few scrapes back to back,
	// and the spread, which bounds what a window's count can resolve.
	const n = 6
	var deltas []float64
	var prev float64
	for i := range n + 1 {
		m, err := scrape(ctx, px.metricsURL)
		if err != nil {
			return nil, err
		}
		v, ok := m["go_memstats_mallocs_total"]
		if !ok {
			return nil, errors.New("cqlguard's /metrics has no go_memstats_mallocs_total")
		}
		if i > 0 {
			deltas = append(deltas, v-prev)
		}
		prev = v
	}
	lo, hi, sum := deltas[0], deltas[0], 0.0
	for _, d := range deltas {
		lo, hi, sum = min(lo, d), max(hi, d), sum+d
	}
	px.scrapeAllocs, px.scrapeNoise = sum/n, hi-lo
	return px, nil
}

// sample measures, between from and from+window, the CPU time of the
// load generator (pid) and of the upstream, and the proxy's costs when px
// is set: per request if it is cqlguard, whose /metrics count them.
func (s *suite) sample(ctx context.Context, from time.Time, window time.Duration, pid int, px *proxy) (sampledCost, error) {
	c := sampledCost{window: window}
	if !load.SleepUntil(ctx, from) {
		return c, ctx.Err()
	}
	take := func() (side procSample, proxy procSample, m metrics, err error) {
		load, err := sampleProc(pid)
		if err != nil {
			return side, proxy, nil, err
		}
		up, err := sampleProc(s.upstreamPid)
		if err != nil {
			return side, proxy, nil, err
		}
		side.cpu = load.cpu + up.cpu
		if px == nil {
			return side, proxy, nil, nil
		}
		if proxy, err = sampleProc(px.cmd.Process.Pid); err != nil || px.metricsURL == "" {
			return side, proxy, nil, err
		}
		m, err = scrape(ctx, px.metricsURL)
		return side, proxy, m, err
	}
	side0, p0, m0, err := take()
	if err != nil {
		return c, err
	}
	if !load.SleepUntil(ctx, from.Add(window)) {
		return c, ctx.Err()
	}
	side1, p1, m1, err := take()
	if err != nil {
		return c, err
	}
	c.side = side1.cpu - side0.cpu
	if px == nil {
		return c, nil
	}
	c.proxyCPU, c.rss = p1.cpu-p0.cpu, p1.rss
	if px.metricsURL == "" {
		return c, nil
	}
	requests := func(m metrics) float64 {
		var n float64
		for _, op := range []string{"QUERY", "EXECUTE", "BATCH"} {
			n += m.sum("cqlguard_frames_total", `direction="request"`, `opcode="`+op+`"`)
		}
		return n
	}
	n := requests(m1) - requests(m0)
	if n <= 0 {
		return c, errors.New("no request went through cqlguard in the window")
	}
	c.cpu = time.Duration(float64(c.proxyCPU) / n)
	allocs := m1["go_memstats_mallocs_total"] - m0["go_memstats_mallocs_total"] - px.scrapeAllocs
	c.allocs, c.allocsNoise = max(0, allocs)/n, px.scrapeNoise/n
	return c, nil
}

// rejectedRow measures a cqlguard whose limits reject nearly every
// request: the cost of a rejection. A row where limits did not take hold
// says so instead of reporting the cost of forwarding.
func (s *suite) rejectedRow(ctx context.Context) *row {
	r := &row{name: "EXECUTE v4 none, rejected", path: "cqlguard", cost: &proxyCost{}}
	limits := defaultRejectLimits
	if s.rejectLimits != "" {
		b, err := os.ReadFile(s.rejectLimits)
		if err != nil {
			r.note = "TODO: " + err.Error()
			return r
		}
		limits = string(b)
	}
	fmt.Fprintf(s.stderr, "%-22s %-9s saturated...", "rejected", "cqlguard")
	px, err := s.startProxy(ctx, "cqlguard-rejecting", limits)
	if err != nil {
		fmt.Fprintln(s.stderr, " cannot start")
		r.note = "TODO: cqlguard refused the limits: " + firstLine(err.Error())
		return r
	}
	defer px.stop()
	spec := load.DefaultSpec()
	spec.Addr, spec.Conns, spec.Concurrency = px.addr, s.conns, s.concurrency
	spec.Dist, spec.HotKeys, spec.HotFraction = load.Hot, 1, 1
	spec.OptIn = true
	var c sampledCost
	r.sat, c, err = s.runLoad(ctx, spec, s.satWarmup, s.satDuration, px)
	r.sideCPU = c.perRequest(c.side, r.sat.Rate)
	r.cost.fromMetrics = true
	r.cost.cpuSat, r.cost.allocsSat, r.cost.allocsSatNoise, r.cost.rss = c.cpu, c.allocs, c.allocsNoise, c.rss
	if err != nil {
		fmt.Fprintln(s.stderr, " failed")
		r.note = "TODO: " + firstLine(err.Error())
		return r
	}
	fmt.Fprintf(s.stderr, " %.0f req/s, %d of %d rejected\n", r.sat.Rate, r.sat.Rejected, r.sat.Answered())
	if share := float64(r.sat.Rejected) / max(1, float64(r.sat.Answered())); share < 0.9 {
		r.note = fmt.Sprintf("TODO: limits did not take hold (only %.0f%% rejected)", 100*share)
		r.cost = nil
	}
	return r
}

func (px *proxy) stop() {
	px.cmd.Process.Signal(syscall.SIGTERM)
}

// stopAll ends the processes the suite started.
func (s *suite) stopAll() {
	for _, c := range s.procs {
		if c.Process != nil {
			c.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, c := range s.procs {
		done := make(chan struct{})
		go func() {
			c.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			c.Process.Kill()
		}
	}
}

// freePorts returns n loopback ports free now.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// tail returns the last lines of a log file.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], "\n")
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
