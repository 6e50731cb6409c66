package proxy

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

// In cluster mode the answer to a schema change reaches the client only
// once the nodes agree on the schema, or were asked for as long as the
// proxy waits: the driver, which sees the proxy alone, cannot wait for
// them itself, and its next statement may run on a node that has not
// applied the change. A read or a write is not held, nor is anything in
// node mode, where drivers see every node and wait themselves.
func TestSchemaChangeAnsweredOnceNodesAgree(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		mode     string
		query    string
		disagree bool  // the check fails, as when the wait runs out
		checks   int32 // the agreement checks the query makes
	}{
		{"create table", config.ModeCluster, "CREATE TABLE bench.other (k int PRIMARY KEY)", false, 1},
		{"create keyspace", config.ModeCluster, "CREATE KEYSPACE IF NOT EXISTS ks2 WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 3}", false, 1},
		{"drop table, the nodes never agree", config.ModeCluster, "DROP TABLE bench.other", true, 1},
		{"write", config.ModeCluster, "INSERT INTO bench.kv (k, v) VALUES (1, 0x00)", false, 0},
		{"read", config.ModeCluster, "SELECT v FROM bench.kv WHERE k = 1", false, 0},
		{"create table in node mode", config.ModeNode, "CREATE TABLE bench.other (k int PRIMARY KEY)", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			node := fakeNode(t, "127.0.0.1:0", fakenode.Options{})
			var checks atomic.Int32
			var agreed atomic.Bool
			var asked atomic.Value
			check := func(ctx context.Context, node string) error {
				asked.Store(node)
				checks.Add(1)
				if tc.disagree {
					return errors.New("the nodes disagree")
				}
				agreed.Store(true)
				return nil
			}
			cfg := config.Default()
			cfg.Admin.Listen, cfg.Listen, cfg.Upstreams, cfg.Mode = "", "127.0.0.1:0", []string{node.Addr()}, tc.mode
			_, addr := serveProxy(t, cfg, testLogger(), prometheus.NewRegistry(),
				WithSchema(staticSchema{benchSnapshot(t)}), WithSchemaAgreement(check))
			c := dialRaw(t, addr, 4)
			c.startup(nil)
			c.send(1, &message.Query{Query: tc.query, Options: &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne}})
			f := c.recv()
			if f.Header.OpCode != primitive.OpCodeResult {
				t.Fatalf("answered with %v", f.Body.Message)
			}
			_, change := f.Body.Message.(*message.SchemaChangeResult)
			if change && tc.checks > 0 && !tc.disagree && !agreed.Load() {
				t.Errorf("%T answered before the nodes agreed", f.Body.Message)
			}
			if n := checks.Load(); n != tc.checks {
				t.Errorf("%d agreement checks, want %d", n, tc.checks)
			}
			if n, _ := asked.Load().(string); tc.checks > 0 && n != node.Addr() {
				t.Errorf("the agreement was asked of %q, want the node that answered the change, %s", n, node.Addr())
			}
		})
	}
}

// Connections whose schema changes are answered while a check runs share
// the next check, which starts after theirs: one check at a time, however
// many wait.
func TestSchemaAgreementChecksOneAtATime(t *testing.T) {
	t.Parallel()
	var running, most, calls atomic.Int32
	var asked atomic.Value
	asked.Store("")
	release := make(chan struct{})
	started := make(chan struct{}, 8)
	a := newSchemaAgreement(func(ctx context.Context, node string) error {
		calls.Add(1)
		asked.Store(strings.TrimSpace(asked.Load().(string) + " " + node))
		n := running.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		started <- struct{}{}
		<-release
		running.Add(-1)
		return nil
	})
	first := make(chan error, 1)
	go func() { first <- a.wait(context.Background(), "a:9042") }()
	<-started // the first check runs
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for range 5 {
		wg.Go(func() { errs <- a.wait(context.Background(), "b:9042") })
	}
	waitUntil(t, "the five to wait for the next check", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.next != nil && a.next.waiting == 5
	})
	release <- struct{}{}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	<-started // the second check runs, for all five
	release <- struct{}{}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if calls.Load() != 2 || most.Load() != 1 {
		t.Errorf("%d checks, at most %d at once; want 2, one at a time", calls.Load(), most.Load())
	}
	if got := asked.Load(); got != "a:9042 b:9042" {
		t.Errorf("the checks asked %q, want the first's node and then the five's, once", got)
	}
}

// staleRing is a splitRing that counts the times it is asked to be read
// again.
type staleRing struct {
	splitRing
	stale atomic.Int32
}

func (r *staleRing) Stale() { r.stale.Add(1) }

// A schema change has the ring read again: routing places a keyspace's
// replicas by its replication, and a keyspace just made would otherwise
// run on each connection's first node until the next refresh. A read or a
// write does not.
func TestRingReadAgainAfterSchemaChange(t *testing.T) {
	t.Parallel()
	nodes := startNodes(t, 2, fakenode.Options{})
	ring := &staleRing{splitRing: splitRing{low: nodes[0].Addr(), high: nodes[1].Addr()}}
	_, addr := routedProxy(t, nodes[0].Addr(), ring)
	c := dialRaw(t, addr, 4)
	c.startup(nil)
	for i, tc := range []struct {
		query string
		stale int32
	}{
		{"INSERT INTO bench.kv (k, v) VALUES (1, 0x00)", 0},
		{"CREATE KEYSPACE ks2 WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 2}", 1},
		{"SELECT v FROM bench.kv WHERE k = 1", 1},
		{"ALTER KEYSPACE ks2 WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}", 2},
	} {
		c.send(int16(i+1), &message.Query{Query: tc.query, Options: &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne}})
		if f := c.recv(); f.Header.OpCode != primitive.OpCodeResult {
			t.Fatalf("%s: answered with %v", tc.query, f.Body.Message)
		}
		if n := ring.stale.Load(); n != tc.stale {
			t.Errorf("after %s: the ring was asked to be read again %d times, want %d", tc.query, n, tc.stale)
		}
	}
}

// A schema change held for the nodes' agreement holds its own connection's
// answers only: another client's reads and writes through the same proxy
// and node are answered while it waits.
func TestSchemaAgreementHoldsOnlyItsConnection(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{})
	checking := make(chan struct{}, 1)
	release := make(chan struct{})
	check := func(ctx context.Context, node string) error {
		checking <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}
	cfg := config.Default()
	cfg.Admin.Listen, cfg.Listen, cfg.Upstreams = "", "127.0.0.1:0", []string{node.Addr()}
	_, addr := serveProxy(t, cfg, testLogger(), prometheus.NewRegistry(),
		WithSchema(staticSchema{benchSnapshot(t)}), WithSchemaAgreement(check))
	one := &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne}
	held, other := dialRaw(t, addr, 4), dialRaw(t, addr, 4)
	held.startup(nil)
	other.startup(nil)
	held.send(1, &message.Query{Query: "CREATE TABLE bench.other (k int PRIMARY KEY)", Options: one})
	<-checking
	for i, q := range []string{"SELECT v FROM bench.kv WHERE k = 1", "INSERT INTO bench.kv (k, v) VALUES (1, 0x00)"} {
		other.send(int16(i+1), &message.Query{Query: q, Options: one})
		if f := other.recv(); f.Header.OpCode != primitive.OpCodeResult {
			t.Fatalf("%s while another connection's schema change is held: %v", q, f.Body.Message)
		}
	}
	close(release)
	if f := held.recv(); f.Header.OpCode != primitive.OpCodeResult {
		t.Fatalf("the held schema change: %v", f.Body.Message)
	}
}
