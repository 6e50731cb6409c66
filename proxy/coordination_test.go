package proxy

import (
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
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
			return r.addr, "", "", func() { r.setDelay(500 * time.Millisecond) }, func() { r.setDelay(0) }
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
			waitUp := func(want float64) {
				t.Helper()
				deadline := time.Now().Add(5 * time.Second)
				for up() != want {
					if time.Now().After(deadline) {
						t.Fatalf("cqlguard_coordination_up is %v after 5 s, want %v; log:\n%s", up(), want, log.String())
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
