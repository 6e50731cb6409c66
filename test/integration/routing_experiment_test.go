package integration

// Experiments on the three-node cluster, behind CQLGUARD_ROUTING_EXPERIMENT=1
// (each takes minutes): what routing costs the cluster, and the tail it
// gives with one replica slowed, against gocql's own token-aware routing.
//
//	flock /tmp/cqlguard-integration.lock env CQLGUARD_INTEGRATION=1 CQLGUARD_ROUTING_EXPERIMENT=1 \
//	  go test -count=1 -timeout 60m -run 'TestRoutingCost|TestRoutedTail' -v ./test/integration/

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/cqlguard/cqlguard/test/cluster"
	"github.com/cqlguard/cqlguard/test/load"
)

// skipUnlessExperiment skips a routing experiment unless asked for.
func skipUnlessExperiment(t *testing.T) {
	t.Helper()
	skipUnlessEnabled(t)
	if os.Getenv("CQLGUARD_ROUTING_EXPERIMENT") != "1" {
		t.Skip("set CQLGUARD_ROUTING_EXPERIMENT=1 to run the routing experiments")
	}
}

// nodePid returns the process id of the cluster's node at host, from the
// pid file test/cassandra/cluster.sh keeps.
func nodePid(t *testing.T, host string) int {
	t.Helper()
	cache := os.Getenv("CQLGUARD_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "cqlguard")
	}
	b, err := os.ReadFile(filepath.Join(cache, "cluster", host, "cassandra.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// cpuTime returns the CPU time, user and system, the processes have used.
func cpuTime(t *testing.T, pids []int) time.Duration {
	t.Helper()
	var sum time.Duration
	for _, pid := range pids {
		d, err := load.CPUTime(pid)
		if err != nil {
			t.Fatal(err)
		}
		sum += d
	}
	return sum
}

// runLoad runs reads (and writes, with write set) of random keys below keys
// of table through s from workers goroutines for d, and returns the
// latencies of the requests answered.
func runLoad(t *testing.T, s *gocql.Session, table string, keys, workers int, write bool, d time.Duration) *load.Latencies {
	t.Helper()
	var mu sync.Mutex
	all := load.NewLatencies()
	var failed int
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			lat := load.NewLatencies()
			bad := 0
			for i := 0; time.Now().Before(stop); i++ {
				k := rand.IntN(keys)
				start := time.Now()
				var err error
				if write && i%2 == 0 {
					err = s.Query("INSERT INTO "+table+" (k, v) VALUES (?, ?)", k, i).Exec()
				} else {
					var v int
					err = s.Query("SELECT v FROM "+table+" WHERE k = ?", k).Scan(&v)
					if err == gocql.ErrNotFound {
						err = nil
					}
				}
				if err != nil {
					bad++
					continue
				}
				lat.Record(time.Since(start))
			}
			mu.Lock()
			all.Merge(lat)
			failed += bad
			mu.Unlock()
		})
	}
	wg.Wait()
	if failed > 0 {
		t.Logf("%d requests failed", failed)
	}
	return all
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// experimentKeyspace makes ks at replication factor rf with table kv
// (k int PRIMARY KEY, v int), holding keys 0 to keys−1.
func experimentKeyspace(t *testing.T, hosts []string, ks string, rf, keys int) {
	t.Helper()
	clusterKeyspace(t, hosts, ks, rf)
	c := gocql.NewCluster(hosts...)
	c.Authenticator = gocql.PasswordAuthenticator{Username: user, Password: password}
	c.Timeout = 30 * time.Second
	s, err := c.CreateSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := readWrite(s, ks+".kv", keys); err != nil {
		t.Fatal(err)
	}
}

// routingPath is one way a client reaches the cluster.
type routingPath struct {
	name string
	// session opens a session on the path, and returns it, what closes
	// it, and the cqlguard it goes through (nil for none).
	session func(t *testing.T) (*gocql.Session, func(), *fileProxy)
}

// routingPaths returns gocql straight to the cluster with its token-aware
// policy (replicas shuffled when shuffle is set), and gocql through
// cqlguard with its connections pinned, routed, and routed with reads
// hedged.
func routingPaths(hosts []string, ks string, shuffle bool) []routingPath {
	direct := func(t *testing.T) (*gocql.Session, func(), *fileProxy) {
		c := gocql.NewCluster(hosts...)
		c.Authenticator = gocql.PasswordAuthenticator{Username: user, Password: password}
		c.Timeout = 30 * time.Second
		// ONE, so that a read runs on the replica chosen alone: at gocql's
		// default, QUORUM, it would wait on a second replica either way.
		c.Consistency = gocql.One
		c.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(gocql.RoundRobinHostPolicy())
		if shuffle {
			c.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(gocql.RoundRobinHostPolicy(), gocql.ShuffleReplicas())
		}
		s, err := c.CreateSession()
		if err != nil {
			t.Fatal(err)
		}
		return s, s.Close, nil
	}
	through := func(routed bool, hedgeAfter time.Duration) func(t *testing.T) (*gocql.Session, func(), *fileProxy) {
		return func(t *testing.T) (*gocql.Session, func(), *fileProxy) {
			fp := serveFile(t, fmt.Sprintf(`mode: cluster
upstreams: [%s:9042]
routing:
  replicas: %t
  hedge_after: %s
schema:
  username: %s
  password_env: CQLGUARD_TEST_PASSWORD
`, hosts[0], routed, hedgeAfter, user), ks)
			s := sessionThrough(t, "127.0.0.1:"+fp.port, func(c *gocql.ClusterConfig) {
				c.NumConns = 2
				c.Timeout = 30 * time.Second
				c.Consistency = gocql.One
			})
			if routed {
				waitRouted(t, s, fp, ks+".kv")
			}
			return s, s.Close, fp
		}
	}
	return []routingPath{
		{"gocql token-aware", direct},
		{"cqlguard pinned", through(false, 0)},
		{"cqlguard routed", through(true, 0)},
		{"cqlguard routed, reads hedged after 5 ms", through(true, 5*time.Millisecond)},
	}
}

// TestRoutingCost measures, at replication factor 1, the whole cluster's
// CPU per request and the client's latency: gocql routing itself, and
// through cqlguard pinned and routed. Rounds alternate the paths.
func TestRoutingCost(t *testing.T) {
	skipUnlessExperiment(t)
	hosts := useCluster(t)
	const ks, keys, rounds = "cqlguard_routing_cost", 10000, 3
	experimentKeyspace(t, hosts, ks, 1, keys)
	pids := make([]int, len(hosts))
	for i, h := range hosts {
		pids[i] = nodePid(t, h)
	}
	paths := routingPaths(hosts, ks, false)[:3]
	type result struct{ cpu, p50, p99 []float64 }
	results := make([]result, len(paths))
	for round := range rounds {
		for i, p := range paths {
			t.Run(fmt.Sprintf("%s/%d", p.name, round), func(t *testing.T) {
				s, done, _ := p.session(t)
				defer done()
				runLoad(t, s, ks+".kv", keys, 8, true, 3*time.Second) // warm-up
				cpu0 := cpuTime(t, pids)
				lat := runLoad(t, s, ks+".kv", keys, 8, true, 15*time.Second)
				cpu := cpuTime(t, pids) - cpu0
				perK := float64(cpu.Microseconds()) / float64(lat.Count()) // µs per request
				r := &results[i]
				r.cpu = append(r.cpu, perK)
				r.p50 = append(r.p50, ms(lat.Percentile(50)))
				r.p99 = append(r.p99, ms(lat.Percentile(99)))
				t.Logf("%s: %d requests, cluster CPU %.0f µs per request, p50 %.2f ms, p99 %.2f ms",
					p.name, lat.Count(), perK, r.p50[len(r.p50)-1], r.p99[len(r.p99)-1])
			})
		}
	}
	median := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
	for i, p := range paths {
		r := results[i]
		t.Logf("| %s | %.0f | %.2f | %.2f |", p.name, median(r.cpu), median(r.p50), median(r.p99))
	}
}

// TestRoutedTail measures reads at replication factor 3 with one node
// slowed by stop and continue bursts (SIGSTOP for 50 ms every 250 ms):
// the client's 99th and 99.9th percentiles through cqlguard routed, with
// and without hedged reads, and straight to the cluster with gocql's
// token-aware policy, replicas shuffled. Rounds alternate the paths.
func TestRoutedTail(t *testing.T) {
	skipUnlessExperiment(t)
	hosts := useCluster(t)
	const ks, keys = "cqlguard_routing_tail", 10000
	rounds := 3
	if n, err := strconv.Atoi(os.Getenv("CQLGUARD_ROUTING_ROUNDS")); err == nil {
		rounds = n
	}
	experimentKeyspace(t, hosts, ks, 3, keys)
	slow := nodePid(t, hosts[2])
	all := routingPaths(hosts, ks, true)
	paths := []routingPath{all[0], all[2], all[3]}
	type result struct{ p99, p999 []float64 }
	results := make([]result, len(paths))
	for round := range rounds {
		for i, p := range paths {
			t.Run(fmt.Sprintf("%s/%d", p.name, round), func(t *testing.T) {
				s, done, fp := p.session(t)
				defer done()
				runLoad(t, s, ks+".kv", keys, 8, false, 3*time.Second) // warm-up
				sentBefore := nodeRequests(t, fp, hosts)
				counts, err := cluster.NewReader(gocql.PasswordAuthenticator{Username: user, Password: password}, hosts...)
				if err != nil {
					t.Fatal(err)
				}
				defer counts.Close()
				before, err := counts.Snapshot(context.Background(), ks)
				if err != nil {
					t.Fatal(err)
				}
				ctx, stop := context.WithCancel(context.Background())
				var bursts sync.WaitGroup
				bursts.Go(func() { stopBursts(ctx, slow, 50*time.Millisecond, 250*time.Millisecond) })
				lat := runLoad(t, s, ks+".kv", keys, 8, false, 20*time.Second)
				stop()
				bursts.Wait()
				after, err := counts.Snapshot(context.Background(), ks)
				if err != nil {
					t.Fatal(err)
				}
				d := after.Since(before)
				table := cluster.Table{Keyspace: ks, Name: "kv"}
				sent := nodeRequests(t, fp, hosts)
				for j, h := range hosts {
					c := d[h].Tables[table]
					t.Logf("%s: coordinated %d reads, served %d; cqlguard sent it %.0f", h, c.CoordinatorReads, c.LocalReads, sent[j]-sentBefore[j])
				}
				if fp != nil {
					var hedges []string
					for _, o := range []string{"sent", "won", "refused"} {
						hedges = append(hedges, fmt.Sprintf("%s %.0f", o, counterValue(t, fp, "cqlguard_routed_hedges_total", "outcome", o)))
					}
					t.Logf("hedges: %s", strings.Join(hedges, ", "))
				}
				r := &results[i]
				r.p99 = append(r.p99, ms(lat.Percentile(99)))
				r.p999 = append(r.p999, ms(lat.Percentile(99.9)))
				t.Logf("%s: %d reads, p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms", p.name, lat.Count(),
					ms(lat.Percentile(50)), r.p99[len(r.p99)-1], r.p999[len(r.p999)-1])
			})
		}
	}
	median := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
	for i, p := range paths {
		t.Logf("| %s | %.2f | %.2f |", p.name, median(results[i].p99), median(results[i].p999))
	}
}

// stopBursts stops the process pid for on out of every every, until ctx
// ends, and leaves it running.
func stopBursts(ctx context.Context, pid int, on, every time.Duration) {
	defer syscall.Kill(pid, syscall.SIGCONT)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		syscall.Kill(pid, syscall.SIGSTOP)
		select {
		case <-ctx.Done():
		case <-time.After(on):
		}
		syscall.Kill(pid, syscall.SIGCONT)
	}
}

// TestRoutedNodeLost kills a replica (SIGKILL) under reads and writes at
// replication factor 3 and consistency ONE through cqlguard routed, then
// starts it again: only the requests in flight on it fail, and it
// coordinates its share again within seconds of being back.
func TestRoutedNodeLost(t *testing.T) {
	skipUnlessExperiment(t)
	hosts := useCluster(t)
	const ks, keys, workers = "cqlguard_routing_lost", 10000, 8
	experimentKeyspace(t, hosts, ks, 3, keys)
	s, done, fp := routingPaths(hosts, ks, true)[2].session(t)
	defer done()
	table := ks + ".kv"
	var mu sync.Mutex
	var answered, failed int
	var firstErr error
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := rand.IntN(keys)
				var err error
				if i%2 == 0 {
					err = s.Query("INSERT INTO "+table+" (k, v) VALUES (?, ?)", k, i).Exec()
				} else {
					var v int
					if err = s.Query("SELECT v FROM "+table+" WHERE k = ?", k).Scan(&v); err == gocql.ErrNotFound {
						err = nil
					}
				}
				mu.Lock()
				if err != nil {
					failed++
					if firstErr == nil {
						firstErr = err
					}
				} else {
					answered++
				}
				mu.Unlock()
			}
		})
	}
	counts := func() (int, int) { mu.Lock(); defer mu.Unlock(); return answered, failed }
	time.Sleep(5 * time.Second)
	victim := hosts[2]
	if err := syscall.Kill(nodePid(t, victim), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	a0, f0 := counts()
	time.Sleep(10 * time.Second)
	a1, f1 := counts()
	t.Logf("%s killed: in the 10 s after, %d requests answered, %d failed (first: %v)", victim, a1-a0, f1-f0, firstErr)
	if f1-f0 > workers {
		t.Errorf("%d requests failed after the kill, want at most the %d in flight", f1-f0, workers)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := cluster.Start(ctx, os.Stdout); err != nil {
		t.Fatal(err)
	}
	backAt := time.Now()
	first := nodeRequests(t, fp, hosts)[2]
	r, err := cluster.NewReader(gocql.PasswordAuthenticator{Username: user, Password: password}, victim)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	kv := cluster.Table{Keyspace: ks, Name: "kv"}
	before, err := r.Snapshot(ctx, ks)
	if err != nil {
		t.Fatal(err)
	}
	// What cqlguard sent the node from then on, as its metrics say, before
	// what the node says it coordinated.
	var sentAfter [2]time.Duration // its first request, its 100th
	for i := 0; i < len(sentAfter) && time.Since(backAt) < time.Minute; {
		n := nodeRequests(t, fp, hosts)[2] - first
		for i < len(sentAfter) && n >= [...]float64{1, 100}[i] {
			sentAfter[i] = time.Since(backAt)
			i++
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("cqlguard sent %s its first request %v and its 100th %v after it was up", victim,
		sentAfter[0].Round(10*time.Millisecond), sentAfter[1].Round(10*time.Millisecond))
	for {
		time.Sleep(200 * time.Millisecond)
		now, err := r.Snapshot(ctx, ks)
		if err != nil {
			t.Fatal(err)
		}
		c := now.Since(before)[victim].Tables[kv]
		if c.Coordinated() >= 100 {
			t.Logf("%s back %v after the kill; it coordinated %d requests within %v of being up",
				victim, backAt.Sub(killedAt).Round(time.Second), c.Coordinated(), time.Since(backAt).Round(100*time.Millisecond))
			break
		}
		if time.Since(backAt) > time.Minute {
			t.Fatalf("%s coordinated %d requests in the minute after it was back", victim, c.Coordinated())
		}
	}
	close(stop)
	wg.Wait()
	a2, f2 := counts()
	t.Logf("in all: %d answered, %d failed", a2, f2)
}

// nodeRequests returns what cqlguard_node_requests_total of fp says it
// sent each of hosts (port 9042); zeros without fp.
func nodeRequests(t *testing.T, fp *fileProxy, hosts []string) []float64 {
	t.Helper()
	sent := make([]float64, len(hosts))
	if fp == nil {
		return sent
	}
	for i, h := range hosts {
		sent[i] = counterValue(t, fp, "cqlguard_node_requests_total", "node", net.JoinHostPort(h, "9042"))
	}
	return sent
}
