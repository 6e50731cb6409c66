package proxy

import (
	"encoding/binary"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

func TestNodeScore(t *testing.T) {
	t.Parallel()
	const ms = int64(time.Millisecond)
	// load makes a node that answered each of latencies, the last at
	// seen, with inflight requests waiting.
	load := func(inflight int64, seen int64, latencies ...int64) *nodeLoad {
		n := &nodeLoad{}
		for _, l := range latencies {
			n.observe(l, seen)
		}
		n.inflight.Store(inflight)
		return n
	}
	now := 10 * int64(time.Second)
	cases := []struct {
		name        string
		a, b        *nodeLoad
		wantAbetter bool
	}{
		{"faster", load(0, now, ms, ms), load(0, now, 10*ms, 10*ms), true},
		{"slowed since", load(0, now, ms, 20*ms, 20*ms, 20*ms), load(0, now, 2*ms, 2*ms), false},
		{"long queue", load(9, now, ms), load(0, now, 5*ms), false},
		{"short queue", load(1, now, ms), load(0, now, 10*ms), true},
		{"never answered is tried", load(0, 0), load(0, now, ms), true},
		{"stale is tried again", load(0, now-2*staleAfter, ms, 50*ms, 50*ms), load(0, now, 2*ms), true},
	}
	for _, tc := range cases {
		if got := tc.a.score(now) < tc.b.score(now); got != tc.wantAbetter {
			t.Errorf("%s: score %.0f vs %.0f; want the first better: %t", tc.name, tc.a.score(now), tc.b.score(now), tc.wantAbetter)
		}
	}
}

// bothRing makes two nodes replicas of every token, the first preferred.
type bothRing struct{ first, second string }

func (r bothRing) Replicas(dst []string, keyspace string, token int64) []string {
	return append(dst, r.first, r.second)
}

// A slow replica gets less of the traffic while it is slow, and its share
// back once it recovers.
func TestSlowReplicaAvoided(t *testing.T) {
	t.Parallel()
	nodes := startNodes(t, 3, fakenode.Options{})
	_, addr := routedProxy(t, nodes[0].Addr(), bothRing{first: nodes[1].Addr(), second: nodes[2].Addr()})
	cluster := gocql.NewCluster(addr)
	cluster.NumConns = 4
	s, err := cluster.CreateSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// share runs reads from several goroutines and returns the share of
	// them the preferred replica ran.
	share := func() float64 {
		before1, before2 := nodes[1].Requests(), nodes[2].Requests()
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for k := range 50 {
					key := int64(g*1000 + k)
					if err := s.Query("SELECT v FROM bench.kv WHERE k = ?", key).Exec(); err != nil {
						t.Errorf("read: %v", err)
						return
					}
				}
			})
		}
		wg.Wait()
		d1, d2 := nodes[1].Requests()-before1, nodes[2].Requests()-before2
		return float64(d1) / float64(d1+d2)
	}
	share() // every connection has its legs, and each node its scores
	nodes[1].SetDelay(5 * time.Millisecond)
	if got := share(); got > 0.2 {
		t.Errorf("the slow replica ran %.0f%% of the reads, want under 20%%", 100*got)
	}
	nodes[1].SetDelay(0)
	// Its slowness is forgotten over latencyDecay: the reads come back
	// within a few rounds.
	var got float64
	for range 10 {
		if got = share(); got > 0.3 {
			break
		}
	}
	if got <= 0.3 {
		t.Errorf("the recovered replica ran %.0f%% of the reads, want over 30%%", 100*got)
	}
}

// A replica that dies under load: only the requests in flight on it get an
// error, the others run on the other replica at once, and the node gets
// its share back once it is up again.
func TestReplicaLost(t *testing.T) {
	t.Parallel()
	nodes := startNodes(t, 3, fakenode.Options{})
	lostAddr := nodes[1].Addr()
	_, addr := routedProxy(t, nodes[0].Addr(), bothRing{first: lostAddr, second: nodes[2].Addr()})
	cluster := gocql.NewCluster(addr)
	cluster.NumConns = 4
	s, err := cluster.CreateSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const workers = 8
	// Every worker reads until stop is closed, counting what it did and
	// what failed.
	var failed, done atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			for k := int64(0); ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := s.Query("SELECT v FROM bench.kv WHERE k = ?", int64(g)<<32|k).Exec(); err != nil {
					failed.Add(1)
				}
				done.Add(1)
			}
		})
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("waited 10s for %s", what)
			}
		}
	}
	waitFor("reads on both replicas", func() bool { return nodes[1].Requests() > 100 && nodes[2].Requests() > 100 })
	nodes[1].Close()
	before := done.Load()
	waitFor("reads after the loss", func() bool { return done.Load() > before+500 })
	if f := failed.Load(); f > workers {
		t.Errorf("%d reads failed when a replica died with at most %d in flight", f, workers)
	}
	back, err := fakenode.Start(lostAddr, fakenode.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(back.Close)
	waitFor("reads on the replica back", func() bool { return back.Requests() > 100 })
	close(stop)
	wg.Wait()
	t.Logf("%d reads, %d failed", done.Load(), failed.Load())
}

// A node with requests in flight that has gone quiet for many times its
// latency is the last choice, though its mean does not show it yet.
func TestNodeScoreStalled(t *testing.T) {
	t.Parallel()
	const ms = int64(time.Millisecond)
	now := 10 * int64(time.Second)
	quietFor := func(quiet int64, inflight int64) *nodeLoad {
		n := &nodeLoad{}
		n.observe(ms, now-quiet)
		n.inflight.Store(inflight)
		return n
	}
	busy := quietFor(0, 6) // six in flight, answering
	cases := []struct {
		name string
		n    *nodeLoad
		want bool // better than busy
	}{
		{"quiet, nothing in flight", quietFor(100*ms, 0), true},
		{"quiet a moment, one in flight", quietFor(ms, 1), true},
		{"quiet long, one in flight", quietFor(50*ms, 1), false},
	}
	for _, tc := range cases {
		if got := tc.n.score(now) < busy.score(now); got != tc.want {
			t.Errorf("%s: score %.0f against %.0f; want better: %t", tc.name, tc.n.score(now), busy.score(now), tc.want)
		}
	}
}

func TestDecay(t *testing.T) {
	for _, x := range []float64{0, 1e-9, 1e-6, 1e-3, 1.0 / 129, 1.0 / 128, 0.5, 1, 10, 1000} {
		if got, want := decay(x), math.Exp(-x); math.Abs(got-want) > 1e-7 {
			t.Errorf("decay(%g) = %.10f, want %.10f", x, got, want)
		}
	}
}

// What routing knows of each node is exported per node: the requests sent
// there, those in flight, and the latency it ranks replicas by.
func TestNodeLoadMetrics(t *testing.T) {
	t.Parallel()
	nodes := startNodes(t, 3, fakenode.Options{})
	cfg := config.Default()
	cfg.Admin.Listen = ""
	cfg.Listen, cfg.Upstreams = "127.0.0.1:0", []string{nodes[0].Addr()}
	reg := prometheus.NewRegistry()
	_, addr := serveProxy(t, cfg, testLogger(), reg, WithSchema(staticSchema{benchSnapshot(t)}),
		WithRing(splitRing{low: nodes[1].Addr(), high: nodes[2].Addr()}))
	cluster := gocql.NewCluster(addr)
	cluster.ProtoVersion, cluster.NumConns = 4, 1
	s, err := cluster.CreateSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const keys = 100
	low := 0
	for k := range keys {
		if tokenOf(binary.BigEndian.AppendUint64(nil, uint64(k))) < 0 {
			low++
		}
		if err := s.Query("SELECT v FROM bench.kv WHERE k = ?", k).Exec(); err != nil {
			t.Fatal(err)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]float64{}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "cqlguard_node_") {
			continue
		}
		got[f.GetName()] = map[string]float64{}
		for _, m := range f.GetMetric() {
			got[f.GetName()][m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	// Each read on the node holding it, after the statement's PREPARE.
	sent := got["cqlguard_node_requests_total"]
	if sent[nodes[1].Addr()] != float64(1+low) || sent[nodes[2].Addr()] != float64(1+keys-low) {
		t.Errorf("requests sent per node %v, want %d on %s and %d on %s", sent, 1+low, nodes[1].Addr(), 1+keys-low, nodes[2].Addr())
	}
	for _, n := range nodes[1:] {
		if f := got["cqlguard_node_requests_in_flight"][n.Addr()]; f != 0 {
			t.Errorf("%s: %v requests in flight once all are answered", n.Addr(), f)
		}
		if l := got["cqlguard_node_latency_seconds"][n.Addr()]; l <= 0 || l > 1 {
			t.Errorf("%s: latency %vs", n.Addr(), l)
		}
	}
}
