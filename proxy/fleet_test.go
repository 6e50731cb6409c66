package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/test/fakenode"
	"github.com/cqlguard/cqlguard/test/redistest"
)

// TestCoordinationFaults: a Redis that stops, answers slowly or refuses the
// password neither fails nor delays a request. The proxy says so once in
// the log and in cqlguard_coordination_up, limits alone meanwhile, and
// picks up again once Redis answers; a password is never logged.
func TestCoordinationFaults(t *testing.T) {
	t.Parallel()
	type fault struct {
		name string
		// outage is how long requests run while Redis fails.
		outage time.Duration
		// start returns the Redis address and password env value the proxy
		// is given, a function that breaks Redis, and one that mends it
		// (nil where it stays broken).
		start func(t *testing.T) (addr, user, password string, breakIt, mend func())
	}
	faults := []fault{
		{"stopped", 10 * time.Second, func(t *testing.T) (string, string, string, func(), func()) {
			addr := redistest.Start(t)
			return addr, "", "", func() { redistest.Stop(t, addr) }, func() { redistest.Restart(t, addr) }
		}},
		{"slow", 2 * time.Second, func(t *testing.T) (string, string, string, func(), func()) {
			r := newSlowRelay(t, redistest.Start(t))
			// Past a report's timeout (fleet.ReportTimeout: 1.5 s).
			return r.addr, "", "", func() { r.setDelay(2 * time.Second) }, func() { r.setDelay(0) }
		}},
		{"wrong password", time.Second, func(t *testing.T) (string, string, string, func(), func()) {
			addr, _ := redistest.StartACL(t)
			return addr, "cqlguard", "not-the-password", func() {}, nil
		}},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			redisAddr, user, password, breakIt, mend := f.start(t)
			node := fakeNode(t, "127.0.0.1:0", fakenode.Options{})
			var log logLines
			reg := prometheus.NewRegistry()
			cfg := config.Default()
			cfg.Admin.Listen, cfg.Listen, cfg.Upstreams = "", "127.0.0.1:0", []string{node.Addr()}
			limit := config.OpsPerSecond(1000000)
			cfg.Limits.Keyspaces = map[string]config.KeyspaceLimits{"ks": {Tables: map[string]config.RateLimits{"kv": {MaxReadsPerSecond: &limit}}}}
			cfg.Coordination.Addresses = []string{redisAddr}
			cfg.Coordination.SyncInterval = config.Duration(50 * time.Millisecond)
			cfg.Coordination.Username = user
			if password != "" {
				env := "CQLGUARD_TEST_REDIS_" + strings.ToUpper(strings.ReplaceAll(t.Name(), "/", "_"))
				env = strings.Map(func(r rune) rune {
					if r == ' ' {
						return '_'
					}
					return r
				}, env)
				os.Setenv(env, password)
				cfg.Coordination.PasswordEnv = env
			}
			p, err := New(cfg, zerolog.New(&log), reg, WithSchema(staticSchema{testSnapshot(t)}))
			if err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("tcp", cfg.Listen)
			if err != nil {
				t.Fatal(err)
			}
			go p.Serve(ln)
			t.Cleanup(func() { p.Shutdown(t.Context()) })
			c := dialRaw(t, ln.Addr().String(), 4)
			c.startup(nil)

			// Requests one after another, timed, for d.
			stream := int16(0)
			run := func(d time.Duration) []time.Duration {
				var took []time.Duration
				for end := time.Now().Add(d); time.Now().Before(end); {
					stream = (stream + 1) & 0x7fff
					start := time.Now()
					c.c.SetDeadline(start.Add(5 * time.Second)) // each request its own
					c.send(stream, &message.Query{Query: "SELECT * FROM ks.kv WHERE k = 1", Options: &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne}})
					if fr := c.recv(); fr.Header.OpCode != primitive.OpCodeResult {
						t.Fatalf("request answered with %v", fr.Body.Message)
					}
					took = append(took, time.Since(start))
				}
				return took
			}
			up := func() float64 { return gaugeValue(t, reg, "cqlguard_coordination_up") }
			// Coordination is lost once Redis has been silent for the
			// hold time (3 s), and back at the first report it answers.
			waitUp := func(want float64) {
				t.Helper()
				deadline := time.Now().Add(10 * time.Second)
				for up() != want {
					if time.Now().After(deadline) {
						t.Fatalf("cqlguard_coordination_up is %v after 10 s, want %v; log:\n%s", up(), want, log.String())
					}
					run(20 * time.Millisecond)
				}
			}
			if mend != nil {
				waitUp(1)
			}
			before := p99(run(min(f.outage, 2*time.Second)))
			breakIt()
			waitUp(0)
			during := p99(run(f.outage))
			t.Logf("request p99 %v with Redis answering, %v without", before, during)
			if during > 2*before+5*time.Millisecond {
				t.Errorf("request p99 %v while Redis fails, %v before", during, before)
			}
			if mend != nil {
				mend()
				start := time.Now()
				waitUp(1)
				t.Logf("coordination back %v after Redis", time.Since(start))
			}
			out := log.String()
			if n := strings.Count(out, "coordination lost"); n != 1 {
				t.Errorf("%d lines saying coordination was lost, want 1:\n%s", n, out)
			}
			if password != "" && strings.Contains(out, password) {
				t.Errorf("the password is in the log:\n%s", out)
			}
		})
	}
}

// p99 is the 99th percentile of ds.
func p99(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	if len(ds) == 0 {
		return 0
	}
	return ds[len(ds)*99/100]
}

// gaugeValue reads a gauge (or counter) without labels from reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		m := mf.GetMetric()[0]
		if g := m.GetGauge(); g != nil {
			return g.GetValue()
		}
		return m.GetCounter().GetValue()
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// slowRelay forwards TCP to a Redis, holding what Redis answers for a delay
// that the test sets.
type slowRelay struct {
	addr  string
	mu    sync.Mutex
	delay time.Duration
}

func newSlowRelay(t *testing.T, to string) *slowRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	r := &slowRelay{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			go func() { io.Copy(u, c); u.Close() }()
			go func() {
				buf := make([]byte, 32<<10)
				for {
					n, err := u.Read(buf)
					if n > 0 {
						r.mu.Lock()
						d := r.delay
						r.mu.Unlock()
						time.Sleep(d)
						if _, err := c.Write(buf[:n]); err != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				c.Close()
			}()
		}
	}()
	return r
}

func (r *slowRelay) setDelay(d time.Duration) {
	r.mu.Lock()
	r.delay = d
	r.mu.Unlock()
}

// TestCoordinationSecured: the reporter reaches a Redis that asks for an
// ACL user and password, and one that speaks only TLS, verified against
// its CA.
func TestCoordinationSecured(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(t *testing.T, c *config.CoordinationConfig)
	}{
		{"acl", func(t *testing.T, c *config.CoordinationConfig) {
			addr, cred := redistest.StartACL(t)
			c.Addresses, c.Username, c.PasswordFile = []string{addr}, cred.User, cred.PasswordFile
		}},
		{"tls", func(t *testing.T, c *config.CoordinationConfig) {
			addr, ca := redistest.StartTLS(t)
			c.Addresses, c.TLS = []string{addr}, config.CoordinationTLSConfig{Enabled: true, CAFile: ca}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewRegistry()
			cfg := config.Default()
			cfg.Admin.Listen, cfg.Upstreams = "", []string{"127.0.0.1:1"}
			cfg.Coordination.SyncInterval = config.Duration(50 * time.Millisecond)
			tc.edit(t, &cfg.Coordination)
			var log logLines
			p, err := New(cfg, zerolog.New(&log), reg, WithSchema(staticSchema{testSnapshot(t)}))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Shutdown(t.Context()) })
			for deadline := time.Now().Add(5 * time.Second); gaugeValue(t, reg, "cqlguard_coordination_up") != 1; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("coordination not up after 5 s; log:\n%s", log.String())
				}
			}
		})
	}
}

// hostileRedis answers HELLO as a Redis 5 would (RESP2 only), and every
// other command with the declaration of a 1 GiB bulk string, none of which
// it sends.
func hostileRedis(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				rd := bufio.NewReader(c)
				for {
					name, err := readCommand(rd)
					if err != nil {
						return
					}
					answer := "$1073741824\r\n"
					if strings.EqualFold(name, "hello") {
						answer = "-ERR unknown command 'HELLO'\r\n"
					}
					if _, err := io.WriteString(c, answer); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// readCommand reads a command a Redis client sends, an array of bulk
// strings, and returns its name.
func readCommand(rd *bufio.Reader) (string, error) {
	var args []string
	line, err := rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if err != nil || n < 1 {
		return "", fmt.Errorf("not a command: %q", line)
	}
	for range n {
		if line, err = rd.ReadString('\n'); err != nil {
			return "", err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil || size < 0 {
			return "", fmt.Errorf("not a bulk string: %q", line)
		}
		arg := make([]byte, size+2)
		if _, err := io.ReadFull(rd, arg); err != nil {
			return "", err
		}
		args = append(args, string(arg[:size]))
	}
	return args[0], nil
}

// TestCoordinationHostileRedis: a Redis that declares a 1 GiB reply to
// every command costs the proxy no memory, report after report: the reply
// is refused before the client allocates it, the report fails as if Redis
// were down (one log line naming the refusal), and requests are admitted
// per the fallback. It measures the process's allocations, so it does not
// run in parallel with other tests.
func TestCoordinationHostileRedis(t *testing.T) {
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{})
	var log logLines
	reg := prometheus.NewRegistry()
	cfg := config.Default()
	cfg.Admin.Listen, cfg.Listen, cfg.Upstreams = "", "127.0.0.1:0", []string{node.Addr()}
	limit := config.OpsPerSecond(1000000)
	cfg.Limits.Keyspaces = map[string]config.KeyspaceLimits{"ks": {Tables: map[string]config.RateLimits{"kv": {MaxReadsPerSecond: &limit}}}}
	cfg.Coordination.Addresses = []string{hostileRedis(t)}
	cfg.Coordination.SyncInterval = config.Duration(50 * time.Millisecond)
	p, err := New(cfg, zerolog.New(&log), reg, WithSchema(staticSchema{testSnapshot(t)}))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ln)
	t.Cleanup(func() { p.Shutdown(t.Context()) })
	c := dialRaw(t, ln.Addr().String(), 4)
	c.startup(nil)
	stream := int16(0)
	failures := func() float64 { return gaugeValue(t, reg, "cqlguard_coordination_report_failures_total") }
	// requests sends requests one after another until n more reports have
	// failed; each must be answered with a result.
	requests := func(n float64) int {
		t.Helper()
		sent := 0
		deadline := time.Now().Add(30 * time.Second)
		for want := failures() + n; failures() < want; sent++ {
			if time.Now().After(deadline) {
				t.Fatalf("%v reports failed in 30 s, want %v more; log:\n%s", failures(), n, log.String())
			}
			stream = (stream + 1) & 0x7fff
			c.c.SetDeadline(time.Now().Add(5 * time.Second))
			c.send(stream, &message.Query{Query: "SELECT * FROM ks.kv WHERE k = 1", Options: &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne}})
			if fr := c.recv(); fr.Header.OpCode != primitive.OpCodeResult {
				t.Fatalf("request answered with %v", fr.Body.Message)
			}
		}
		return sent
	}
	requests(2)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const syncs = 5
	sent := requests(syncs)
	runtime.ReadMemStats(&after)
	grown := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d reports: %.1f MiB allocated in all, %d requests admitted", syncs, float64(grown)/(1<<20), sent)
	if grown > 64<<20 {
		t.Errorf("%d reports to a Redis declaring 1 GiB replies allocated %d MiB", syncs, grown>>20)
	}
	if up := gaugeValue(t, reg, "cqlguard_coordination_up"); up != 0 {
		t.Errorf("cqlguard_coordination_up %v, want 0", up)
	}
	out := log.String()
	if n := strings.Count(out, "coordination lost"); n != 1 || !strings.Contains(out, "redis reply refused") {
		t.Errorf("want one line saying coordination was lost, naming the refused reply:\n%s", out)
	}
}

// A reload that changes coordination.tracked_partitions while requests
// count into the fleet's table, reports read it and /hot is read: no race,
// no panic, and each new size applies. 16 hot partitions fit in a table of
// 1,024 and are reported; a table of 4 holds 4 of them, which are all a
// report carries.
func TestReloadTrackedPartitionsWhileReporting(t *testing.T) {
	t.Parallel()
	redisAddr := redistest.Start(t)
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{Keyspace: "ks", Table: "kv"})
	file := func(tracked int) string {
		return "listen: 127.0.0.1:0\nupstreams: [" + node.Addr() + "]\nadmin: {listen: \"\"}\n" +
			"limits: {keyspaces: {ks: {tables: {kv: {max_reads_per_second: 20}}}}}\n" +
			"coordination: {addresses: [" + redisAddr + "], sync_interval: 100ms, tracked_partitions: " + strconv.Itoa(tracked) + "}\n"
	}
	reg := prometheus.NewRegistry()
	p, addr := serveProxy(t, parseConfig(t, file(1024)), testLogger(), reg, WithSchema(staticSchema{testSnapshot(t)}))
	hot := adminHandler(t, p, reg)
	reported := func() float64 { return gaugeValue(t, reg, "cqlguard_coordination_reported_partitions") }

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sent atomic.Int64
	for range 4 {
		c := dialRaw(t, addr, 4)
		c.startup(nil)
		wg.Go(func() {
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				c.c.SetDeadline(time.Now().Add(5 * time.Second))
				c.send(1, &message.Query{Query: fmt.Sprintf("SELECT * FROM ks.kv WHERE k = %d", k%16), Options: readOne})
				c.recv() // answered, or refused by the limit
				sent.Add(1)
			}
		})
	}
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			rec := httptest.NewRecorder()
			hot.ServeHTTP(rec, httptest.NewRequest("GET", "/hot", nil))
			if rec.Code != http.StatusOK {
				t.Errorf("GET /hot while reloading: %d %s", rec.Code, rec.Body)
				return
			}
		}
	})
	defer func() {
		close(stop)
		wg.Wait()
	}()

	// sizeApplies reloads tracked_partitions to tracked, and waits until
	// reports carry what a table of that size holds: three in a row, or,
	// with only set (what no other size could carry), any three, as a
	// loaded machine may send too few requests for some reports to show
	// it.
	sizeApplies := func(tracked int, holds func(float64) bool, only bool) {
		t.Helper()
		old := p.settings.Load().fleet
		if err := reload(p, file(tracked)); err != nil {
			t.Fatal(err)
		}
		if p.settings.Load().fleet == old {
			t.Fatalf("tracked_partitions %d: the fleet's table was not replaced", tracked)
		}
		// A report that began before the reload may still be counted.
		deadline := time.Now().Add(30 * time.Second)
		for n := 0; n < 3; {
			got := reported()
			switch {
			case got == 0 && !time.Now().After(deadline):
				// A report of an interval with no request says nothing.
			case holds(got):
				n++
			case time.Now().After(deadline):
				t.Fatalf("tracked_partitions %d: reports carry %v partitions (%d requests so far)", tracked, got, sent.Load())
			case !only:
				n = 0
			}
			time.Sleep(110 * time.Millisecond)
		}
	}
	for range 3 {
		sizeApplies(4, func(n float64) bool { return n > 0 && n <= 4 }, false)
		sizeApplies(1024, func(n float64) bool { return n > 4 }, true)
	}
	// Reloads in quick succession, each report reading whichever table is
	// current.
	for i := range 20 {
		if err := reload(p, file(4+i*100)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(i%4) * 10 * time.Millisecond)
	}
	sizeApplies(4, func(n float64) bool { return n > 0 && n <= 4 }, false)
}
