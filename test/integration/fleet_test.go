package integration

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/proxy"
	"github.com/cqlguard/cqlguard/ratelimit"
	"github.com/cqlguard/cqlguard/test/redistest"
)

// fleetLimit is the hot table's write limit per partition in the fleet
// tests: 5 times it is a load the test Cassandra takes easily.
const fleetLimit = 100

// TestFleetLimit runs three proxies in front of the real Cassandra, each
// with gocql clients of its own, reporting to a real Redis. One partition
// is offered 5 times its write limit, split evenly over the three and then
// 80/10/10. Coordinated, the fleet admits the limit: with token-bucket
// every second past the first two of a split within 10%, with scylla the
// mean within 10% of what ScyllaDB's limiter admits at that load (the
// limit). Without coordination the even split is admitted about three
// times over, which shows the test can fail.
func TestFleetLimit(t *testing.T) {
	skipUnlessEnabled(t)
	redisAddr := redistest.Start(t)
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
				addrs = append(addrs, startFleetProxy(t, tc.algorithm, tc.coordinated, redisAddr, prefix))
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
				case tc.algorithm == ratelimit.AlgorithmTokenBucket:
					for i, n := range steady {
						if math.Abs(float64(n)-fleetLimit) > 0.1*fleetLimit {
							t.Errorf("split %.2f, second %d: %d admitted, want %d ±10%%", split, i+2, n, fleetLimit)
						}
					}
				default:
					if math.Abs(mean-fleetLimit) > 0.1*fleetLimit {
						t.Errorf("split %.2f: %.1f admitted a second, want %d ±10%%", split, mean, fleetLimit)
					}
				}
			}
		})
	}
}

// startFleetProxy starts a proxy limiting cqlguard_fleet.hot's writes to
// fleetLimit per partition, coordinated through Redis at redisAddr under
// the key prefix given or not, and waits until it knows the table.
func startFleetProxy(t *testing.T, algorithm string, coordinated bool, redisAddr, prefix string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Listen, cfg.Upstreams, cfg.Admin.Listen = ln.Addr().String(), []string{"127.0.0.2:9042"}, ""
	cfg.Schema.Username, cfg.Schema.PasswordEnv = user, "CQLGUARD_TEST_PASSWORD"
	os.Setenv(cfg.Schema.PasswordEnv, password)
	cfg.Limits.Algorithm = algorithm
	writes := config.OpsPerSecond(fleetLimit)
	cfg.Limits.Keyspaces = map[string]config.KeyspaceLimits{
		"cqlguard_fleet": {Tables: map[string]config.RateLimits{"hot": {MaxWritesPerSecond: &writes}}},
	}
	if coordinated {
		cfg.Coordination.Addresses = []string{redisAddr}
		cfg.Coordination.KeyPrefix = prefix
	}
	seen := &classLog{watched: map[string]bool{"cqlguard_fleet": true}, byTable: map[string][]observation{}}
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).Level(zerolog.WarnLevel).With().Str("proxy", cfg.Listen).Logger()
	p, err := proxy.New(cfg, log, prometheus.NewRegistry(), proxy.WithObserver(seen.add))
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	go p.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Shutdown(ctx)
	})
	s := sessionThrough(t, cfg.Listen, func(*gocql.ClusterConfig) {})
	defer s.Close()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err := s.Query("INSERT INTO cqlguard_fleet.hot (k, c) VALUES (-1, 0)").Exec(); err != nil && !strings.Contains(err.Error(), "rate limit") {
			t.Fatalf("probing cqlguard_fleet.hot: %v", err)
		}
		if slices.ContainsFunc(seen.take("cqlguard_fleet", "hot"), func(o observation) bool { return o.pinned }) {
			return cfg.Listen
		}
		if time.Now().After(deadline) {
			t.Fatal("after 20 s the proxy still does not know cqlguard_fleet.hot")
		}
	}
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
