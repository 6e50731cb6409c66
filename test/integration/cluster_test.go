package integration

// TestClusterCounters checks test/cluster's counts against drivers whose
// routing is known: on a three-node cluster, a table at replication factor
// 1 written and read through gocql's token-aware policy has each request
// coordinated by the node that owns its partition, and through plain round
// robin only about a third.

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/cqlguard/cqlguard/test/cluster"
)

// threeNodes starts the three-node cluster once for the tests that call it,
// and returns its nodes' addresses; TestMain stops it after the run.
var threeNodes = sync.OnceValues(func() ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := cluster.Start(ctx, os.Stdout); err != nil {
		return nil, err
	}
	return cluster.Hosts(), nil
})

// clusterUsed is whether a test asked for the cluster.
var clusterUsed atomic.Bool

// useCluster returns the cluster's nodes, starting it first if it is the
// first test to ask.
func useCluster(t *testing.T) []string {
	t.Helper()
	skipUnlessEnabled(t)
	clusterUsed.Store(true)
	hosts, err := threeNodes()
	if err != nil {
		t.Fatalf("starting the three-node cluster: %v", err)
	}
	return hosts
}

// stopClusterIfUsed stops the three-node cluster if a test asked for it,
// unless CQLGUARD_KEEP_CASSANDRA=1.
func stopClusterIfUsed() {
	if !clusterUsed.Load() || os.Getenv("CQLGUARD_KEEP_CASSANDRA") == "1" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := cluster.Stop(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}

// clusterKeyspace makes ks afresh on the cluster of hosts, at replication
// factor rf (SimpleStrategy), with one table, kv (k int PRIMARY KEY, v int).
func clusterKeyspace(t *testing.T, hosts []string, ks string, rf int) {
	t.Helper()
	c := gocql.NewCluster(hosts...)
	c.Authenticator = gocql.PasswordAuthenticator{Username: user, Password: password}
	c.Timeout = 30 * time.Second
	s, err := c.CreateSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, q := range []string{
		"DROP KEYSPACE IF EXISTS " + ks,
		fmt.Sprintf("CREATE KEYSPACE %s WITH replication = {'class': 'SimpleStrategy', 'replication_factor': %d}", ks, rf),
		"CREATE TABLE " + ks + ".kv (k int PRIMARY KEY, v int)",
	} {
		if err := s.Query(q).Exec(); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func TestClusterCounters(t *testing.T) {
	hosts := useCluster(t)
	const ks = "cqlguard_cluster_counts"
	table := cluster.Table{Keyspace: ks, Name: "kv"}
	auth := gocql.PasswordAuthenticator{Username: user, Password: password}
	clusterKeyspace(t, hosts, ks, 1)

	for _, tc := range []struct {
		name   string
		policy func() gocql.HostSelectionPolicy
		// check judges the run's counts.
		check func(t *testing.T, d cluster.Snapshot, share float64)
	}{
		{"token aware", func() gocql.HostSelectionPolicy { return gocql.TokenAwareHostPolicy(gocql.RoundRobinHostPolicy()) },
			func(t *testing.T, d cluster.Snapshot, share float64) {
				// Each node coordinated exactly what it served.
				for _, h := range hosts {
					if c := d[h].Tables[table]; c.CoordinatorReads != c.LocalReads || c.CoordinatorWrites != c.LocalWrites {
						t.Errorf("%s coordinated %d reads and %d writes but served %d and %d", h, c.CoordinatorReads, c.CoordinatorWrites, c.LocalReads, c.LocalWrites)
					}
				}
				if share < 0.99 {
					t.Errorf("%.1f%% coordinated by the replica, want at least 99%%", 100*share)
				}
			}},
		{"round robin", func() gocql.HostSelectionPolicy { return gocql.RoundRobinHostPolicy() },
			func(t *testing.T, d cluster.Snapshot, share float64) {
				// Each node is sent a third of the requests and owns the
				// partitions of about a third of them.
				if share < 0.25 || share > 0.42 {
					t.Errorf("%.1f%% coordinated by the replica, want about a third", 100*share)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 3000
			c := gocql.NewCluster(hosts...)
			c.Authenticator = auth
			c.PoolConfig.HostSelectionPolicy = tc.policy()
			c.Timeout = 30 * time.Second
			s, err := c.CreateSession()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			// The reader logs in before the first snapshot: a login reads
			// system_auth on the node that owns it.
			r, err := cluster.NewReader(auth, hosts...)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			ctx := context.Background()
			before, err := r.Snapshot(ctx, ks)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if err := readWrite(s, table.String(), n); err != nil {
				t.Fatal(err)
			}
			elapsed := time.Since(start)
			after, err := r.Snapshot(ctx, ks)
			if err != nil {
				t.Fatal(err)
			}
			d := after.Since(before)
			for _, h := range hosts {
				c := d[h].Tables[table]
				t.Logf("%s: coordinated %d reads, %d writes; served %d reads, %d writes; %d peer responses",
					h, c.CoordinatorReads, c.CoordinatorWrites, c.LocalReads, c.LocalWrites, d[h].PeerResponses)
			}
			total := d.Total(table)
			if total.CoordinatorReads != n || total.CoordinatorWrites != n || total.LocalReads != n || total.LocalWrites != n {
				t.Errorf("the nodes coordinated %d reads and %d writes and served %d and %d; want %d of each",
					total.CoordinatorReads, total.CoordinatorWrites, total.LocalReads, total.LocalWrites, n)
			}
			share := d.ReplicaShare()
			t.Logf("%d writes and %d reads in %v: %.2f%% coordinated by the replica", n, n, elapsed.Round(time.Millisecond), 100*share)
			tc.check(t, d, share)
		})
	}
}

// readWrite writes keys 0 to n−1 of table (k int PRIMARY KEY, v int) and
// then reads them, a few requests at a time.
func readWrite(s *gocql.Session, table string, n int) error {
	const workers = 4
	for _, op := range []func(k int) error{
		func(k int) error { return s.Query("INSERT INTO "+table+" (k, v) VALUES (?, ?)", k, k).Exec() },
		func(k int) error {
			var v int
			return s.Query("SELECT v FROM "+table+" WHERE k = ?", k).Scan(&v)
		},
	} {
		keys := make(chan int)
		errs := make(chan error, workers)
		for range workers {
			go func() {
				var first error
				for k := range keys {
					if err := op(k); err != nil && first == nil {
						first = fmt.Errorf("key %d: %w", k, err)
					}
				}
				errs <- first
			}()
		}
		for k := range n {
			keys <- k
		}
		close(keys)
		var first error
		for range workers {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		if first != nil {
			return first
		}
	}
	return nil
}
