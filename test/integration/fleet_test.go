package integration

import (
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/cqlguard/cqlguard/ratelimit"
	"github.com/cqlguard/cqlguard/test/redistest"
)

// fleetLimit is the hot table's write limit per partition in the fleet
// tests: 5 times it is a load the test Cassandra takes easily.
const fleetLimit = 100

// TestFleetLimit runs three cqlguard processes in front of the real
// Cassandra, each with gocql clients of its own, reporting to a real Redis. One partition
// is offered 5 times its write limit, split evenly over the three and then
// 80/10/10. Coordinated, the fleet admits the limit, with both algorithms
// (ScyllaDB's limiter admits the limit at that load): every second past the
// first two of a split within 5%. Without coordination the even split is
// admitted about three times over, which shows the test can fail.
func TestFleetLimit(t *testing.T) {
	skipUnlessEnabled(t)
	redisAddr := redistest.Start(t)
	bin := buildCqlguard(t)
	s := sessionThrough(t, "127.0.0.2:9042", func(*gocql.ClusterConfig) {},
		"CREATE KEYSPACE IF NOT EXISTS cqlguard_fleet WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
		"CREATE TABLE IF NOT EXISTS cqlguard_fleet.hot (k int, c int, PRIMARY KEY (k, c))",
	)
	s.Close()
	for _, tc := range []struct {
		algorithm   string
		coordinated bool
	}{
		{ratelimit.AlgorithmTokenBucket, true},
		{ratelimit.AlgorithmScylla, true},
		{ratelimit.AlgorithmTokenBucket, false},
	} {
		name := tc.algorithm
		if !tc.coordinated {
			name += "/alone"
		}
		t.Run(name, func(t *testing.T) {
			// One key prefix for the three: a fleet of their own.
			prefix := fmt.Sprintf("%s:%d:", t.Name(), time.Now().UnixNano())
			var addrs []string
			for range 3 {
				addrs = append(addrs, startFleetProxy(t, bin, tc.algorithm, tc.coordinated, redisAddr, prefix))
			}
			splits := [][]float64{{1.0 / 3, 1.0 / 3, 1.0 / 3}, {0.8, 0.1, 0.1}}
			if !tc.coordinated {
				splits = splits[:1]
			}
			for _, split := range splits {
				const seconds = 7
				got := offer(t, addrs, split, 5*fleetLimit, seconds)
				t.Logf("split %.2f: admitted per second %v", split, got)
				steady := got[2:]
				mean := 0.0
				for _, n := range steady {
					mean += float64(n) / float64(len(steady))
				}
				switch {
				case !tc.coordinated:
					if mean < 2.5*fleetLimit {
						t.Errorf("split %.2f without coordination: %.0f admitted a second, want about %d", split, mean, 3*fleetLimit)
					}
				default:
					for i, n := range steady {
						if math.Abs(float64(n)-fleetLimit) > 0.05*fleetLimit {
							t.Errorf("split %.2f, second %d: %d admitted, want %d ±5%%", split, i+2, n, fleetLimit)
						}
					}
				}
			}
		})
	}
}

// buildCqlguard builds the cqlguard binary into a temporary directory.
func buildCqlguard(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "cqlguard")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/cqlguard")
	cmd.Dir = repoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building cqlguard: %v\n%s", err, out)
	}
	return bin
}

// fleetConfig is a fleet proxy's configuration file.
const fleetConfig = `listen: %s
upstreams: [127.0.0.2:9042]
admin: {listen: "%s"}
log: {level: warn}
schema: {username: %s, password_env: CQLGUARD_TEST_PASSWORD}
limits:
  algorithm: %s
  keyspaces:
    cqlguard_fleet:
      tables:
        hot: {max_writes_per_second: %d}
`

// cqlguardProcess is a cqlguard process a test started.
type cqlguardProcess struct {
	addr, admin string
	log         string // the file it logs to
	stop        func() // ends it, once; the test's cleanup does too
}

// startCqlguard starts bin on free ports with the configuration text
// gives for them, logging to a file it shows when the test fails.
func startCqlguard(t *testing.T, bin string, text func(addr, admin string) string) cqlguardProcess {
	t.Helper()
	ports := make([]string, 2)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = ln.Addr().String()
		ln.Close()
	}
	p := cqlguardProcess{addr: ports[0], admin: ports[1]}
	dir := t.TempDir()
	path := filepath.Join(dir, "cqlguard.yaml")
	if err := os.WriteFile(path, []byte(text(p.addr, p.admin)), 0o600); err != nil {
		t.Fatal(err)
	}
	p.log = filepath.Join(dir, "cqlguard.log")
	logFile, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-config", path, "-watch-config=false")
	cmd.Env = append(os.Environ(), "CQLGUARD_TEST_PASSWORD="+password)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	p.stop = func() {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
			logFile.Close()
			if t.Failed() {
				b, _ := os.ReadFile(logFile.Name())
				t.Logf("cqlguard at %s logged:\n%s", p.addr, b)
			}
		})
	}
	t.Cleanup(p.stop)
	return p
}

// startFleetProxy starts a cqlguard process, bin, limiting
// cqlguard_fleet.hot's writes to fleetLimit per partition, coordinated
// through Redis at redisAddr under the key prefix given or not, and waits
// until it counts writes to the table.
func startFleetProxy(t *testing.T, bin, algorithm string, coordinated bool, redisAddr, prefix string) string {
	t.Helper()
	p := startCqlguard(t, bin, func(addr, admin string) string {
		text := fmt.Sprintf(fleetConfig, addr, admin, user, algorithm, fleetLimit)
		if coordinated {
			text += fmt.Sprintf("coordination: {addresses: [%s], key_prefix: %q}\n", redisAddr, prefix)
		}
		return text
	})
	addr, admin := p.addr, p.admin
	// Ready once it counts a write to the table: it has read the schema.
	var s *gocql.Session
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s the cqlguard at %s still does not count writes to cqlguard_fleet.hot", addr)
		}
		if s == nil {
			c := gocql.NewCluster(addr)
			c.Authenticator = gocql.PasswordAuthenticator{Username: user, Password: password}
			c.NumConns = 1
			var err error
			if s, err = c.CreateSession(); err != nil {
				s = nil
				continue
			}
			defer s.Close()
		}
		s.Query("INSERT INTO cqlguard_fleet.hot (k, c) VALUES (-1, 0)").Exec()
		if decisions(admin) > 0 {
			return addr
		}
	}
}

// decisions is the limiter decisions the cqlguard with this admin address
// has made, from its metrics.
func decisions(admin string) float64 {
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	n := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "cqlguard_rate_limiter_decisions_total{"); ok {
			if _, v, ok := strings.Cut(rest, "} "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				n += f
			}
		}
	}
	return n
}

// offer writes to one partition through the proxies at addrs, rate
// operations a second split between them, for the seconds given, and
// returns how many writes were admitted in each second.
func offer(t *testing.T, addrs []string, split []float64, rate float64, seconds int) []int {
	t.Helper()
	admitted := make([]atomic.Int64, seconds)
	start := time.Now().Truncate(time.Second).Add(time.Second)
	end := start.Add(time.Duration(seconds) * time.Second)
	var wg sync.WaitGroup
	var failed atomic.Value
	for i, addr := range addrs {
		s := sessionThrough(t, addr, func(c *gocql.ClusterConfig) { c.NumConns = 2 })
		defer s.Close()
		tickets := make(chan time.Time, 64)
		every := time.Duration(float64(time.Second) / (rate * split[i]))
		wg.Go(func() {
			defer close(tickets)
			for at := start; at.Before(end); at = at.Add(every) {
				time.Sleep(time.Until(at))
				tickets <- at
			}
		})
		for range 8 {
			wg.Go(func() {
				c := 0
				for at := range tickets {
					c++
					err := s.Query("INSERT INTO cqlguard_fleet.hot (k, c) VALUES (42, ?)", c).Exec()
					switch {
					case err == nil:
						admitted[int(at.Sub(start)/time.Second)].Add(1)
					case strings.Contains(err.Error(), "Per-partition rate limit reached"):
					default:
						failed.Store(err)
					}
				}
			})
		}
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		t.Fatalf("a write failed: %v", err)
	}
	out := make([]int, seconds)
	for i := range out {
		out[i] = int(admitted[i].Load())
	}
	return out
}
