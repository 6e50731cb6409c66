package integration

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cqlguard/cqlguard/config"
)

// hotKeyspace holds the table whose hot reads the hot reads proxy serves:
// kv (k int, c int, v text, PRIMARY KEY (k, c)), with hotRows rows in
// partition 1 and, in partition 2, more tombstones than Cassandra reads
// without a warning.
const (
	hotKeyspace = "cqlguard_hot"
	hotRows     = 25
	tombstones  = 1100 // tombstone_warn_threshold is 1000
)

// hotProxy is a proxy that serves the hot reads of cqlguard_hot.kv, with
// the registry of its metrics.
type hotProxy struct {
	addr string
	reg  *prometheus.Registry
}

// served returns the hot reads of cqlguard_hot.kv by outcome so far.
func (p *hotProxy) served(t *testing.T) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	eachMetric(t, p.reg, func(name string, m *dto.Metric) {
		if name == "cqlguard_hot_reads_total" {
			out[label(m, "outcome")] += m.GetCounter().GetValue()
		}
	})
	return out
}

// eachMetric calls f with each series reg gathers now, and its name.
func eachMetric(t *testing.T, reg prometheus.Gatherer, f func(name string, m *dto.Metric)) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			f(mf.GetName(), m)
		}
	}
}

// label returns the value of m's label name, empty if it has none.
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// startHotProxy runs, until the test ends, a proxy in front of Cassandra
// that serves every read of cqlguard_hot.kv by coalescing and a cache of
// ttl, and creates the keyspace and table through it.
func startHotProxy(t *testing.T, ttl time.Duration) *hotProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Listen, cfg.Upstreams, cfg.Admin.Listen = ln.Addr().String(), []string{cassandraAddr}, ""
	cfg.Schema.Username, cfg.Schema.PasswordEnv = user, "CQLGUARD_TEST_PASSWORD"
	os.Setenv(cfg.Schema.PasswordEnv, password)
	every := config.OpsPerSecond(0)
	cfg.HotReads.Keyspaces = map[string]config.HotReadsKeyspace{hotKeyspace: {Tables: map[string]config.HotReadsTable{
		"kv": {Coalesce: true, CacheTTL: config.Duration(ttl), HotRate: &every},
	}}}
	reg := prometheus.NewRegistry()
	serveProxy(t, ln, cfg, reg)
	s := sessionThrough(t, cfg.Listen, func(c *gocql.ClusterConfig) { c.Timeout = 30 * time.Second },
		"CREATE KEYSPACE IF NOT EXISTS "+hotKeyspace+" WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
		"CREATE TABLE IF NOT EXISTS "+hotKeyspace+".kv (k int, c int, v text, PRIMARY KEY (k, c))")
	defer s.Close()
	for c := range hotRows {
		if err := s.Query("INSERT INTO "+hotKeyspace+".kv (k, c, v) VALUES (1, ?, ?)", c, fmt.Sprint("row ", c)).Exec(); err != nil {
			t.Fatal(err)
		}
	}
	b := s.Batch(gocql.UnloggedBatch)
	for c := range tombstones {
		b.Query("DELETE FROM "+hotKeyspace+".kv WHERE k = 2 AND c = ?", c)
	}
	if err := b.Exec(); err != nil {
		t.Fatal(err)
	}
	// The proxy learns the new table from the schema it reloads after the
	// DDL; until then nothing is served.
	waitFor(t, "the proxy to serve reads of "+hotKeyspace+".kv", func() bool {
		s.Query("SELECT v FROM " + hotKeyspace + ".kv WHERE k = 3").Exec()
		served := (&hotProxy{reg: reg}).served(t)
		return served["forwarded"]+served["cached"]+served["coalesced"] > 0
	})
	return &hotProxy{addr: cfg.Listen, reg: reg}
}

// waitFor polls cond until it holds, for up to 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// page is one page of a paged read: its rows and the paging state that
// follows it.
type page struct {
	rows  []map[string]any
	state []byte
}

// readPages reads every page of stmt, size rows each.
func readPages(t *testing.T, s *gocql.Session, stmt string, size int) ([]page, []string) {
	t.Helper()
	var pages []page
	var warnings []string
	var state []byte
	for {
		it := s.Query(stmt).PageSize(size).PageState(state).Iter()
		rows, err := it.SliceMap()
		if err != nil {
			t.Errorf("%s: %v", stmt, err)
			return nil, nil
		}
		warnings = append(warnings, it.Warnings()...)
		state = it.PageState()
		pages = append(pages, page{rows: rows, state: state})
		if len(state) == 0 {
			return pages, warnings
		}
	}
}

// TestHotReadsGocql reads the hot partition of a table whose hot reads the
// proxy serves, from many goroutines at once with gocql at protocol v4 and
// v5, and checks that every answer served from another read's (coalesced
// or cached) decodes as a direct read's does: the same rows in the same
// pages with the same paging states, and the same warnings. A writer that
// reads back each of its writes, among the concurrent readers of the same
// statement, sees its write every time.
func TestHotReadsGocql(t *testing.T) {
	skipUnlessEnabled(t)
	hp := startHotProxy(t, 200*time.Millisecond)
	for _, proto := range []int{4, 5} {
		t.Run(fmt.Sprint("v", proto), func(t *testing.T) {
			edit := func(c *gocql.ClusterConfig) {
				c.ProtoVersion, c.Keyspace, c.Timeout = proto, hotKeyspace, 20*time.Second
				c.NumConns = 2
			}
			direct := sessionThrough(t, cassandraAddr, edit)
			defer direct.Close()
			through := sessionThrough(t, hp.addr, edit)
			defer through.Close()

			const stmt = "SELECT * FROM kv WHERE k = 1"
			want, _ := readPages(t, direct, stmt, 10)
			if len(want) != 3 {
				t.Fatalf("direct read: %d pages, want 3", len(want))
			}
			_, wantWarnings := readPages(t, direct, "SELECT * FROM kv WHERE k = 2", 100)
			if len(wantWarnings) == 0 {
				t.Fatalf("no tombstone warning reading %d tombstones directly", tombstones)
			}
			before := hp.served(t)
			var wg sync.WaitGroup
			for g := range 32 {
				wg.Go(func() {
					for range 20 {
						if g%4 == 0 {
							_, warnings := readPages(t, through, "SELECT * FROM kv WHERE k = 2", 100)
							if !reflect.DeepEqual(warnings, wantWarnings) {
								t.Errorf("warnings through the proxy %q, directly %q", warnings, wantWarnings)
								return
							}
							continue
						}
						got, _ := readPages(t, through, stmt, 10)
						if len(got) != len(want) {
							t.Errorf("%d pages through the proxy, %d directly", len(got), len(want))
							return
						}
						for i := range got {
							if !reflect.DeepEqual(got[i].rows, want[i].rows) || !bytes.Equal(got[i].state, want[i].state) {
								t.Errorf("page %d through the proxy differs:\n%v %x\n%v %x", i, got[i].rows, got[i].state, want[i].rows, want[i].state)
								return
							}
						}
					}
				})
			}
			wg.Wait()
			after := hp.served(t)
			shared := after["cached"] + after["coalesced"] - before["cached"] - before["coalesced"]
			t.Logf("hot reads: %v", after)
			if shared == 0 {
				t.Errorf("no read was served from another's answer: %v", after)
			}
		})
	}

	t.Run("read your writes", func(t *testing.T) {
		edit := func(c *gocql.ClusterConfig) {
			c.Keyspace, c.Timeout, c.NumConns = hotKeyspace, 20*time.Second, 2
		}
		through := sessionThrough(t, hp.addr, edit)
		defer through.Close()
		const read = "SELECT v FROM kv WHERE k = 1 AND c = 0"
		ctx, cancel := context.WithCancel(context.Background())
		var readers sync.WaitGroup
		var reads atomic.Int64
		for range 16 {
			readers.Go(func() {
				for ctx.Err() == nil {
					var v string
					if err := through.Query(read).Scan(&v); err != nil && ctx.Err() == nil {
						t.Errorf("hot read: %v", err)
						return
					}
					reads.Add(1)
				}
			})
		}
		before := hp.served(t)
		stale := 0
		const writes = 300
		for i := range writes {
			want := fmt.Sprint("write ", i)
			if err := through.Query("UPDATE kv SET v = ? WHERE k = 1 AND c = 0", want).Exec(); err != nil {
				t.Fatal(err)
			}
			var got string
			if err := through.Query(read).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != want {
				stale++
				t.Errorf("read back %q after writing %q", got, want)
			}
		}
		cancel()
		readers.Wait()
		after := hp.served(t)
		shared := after["cached"] + after["coalesced"] - before["cached"] - before["coalesced"]
		t.Logf("%d writes read back, %d stale; %d concurrent hot reads, %v served from another's answer", writes, stale, reads.Load(), shared)
		if shared == 0 {
			t.Errorf("no read was served from another's answer while the writes ran: %v", after)
		}
	})
}

// TestHotReadsDrivers runs the hot reads clients of the DataStax Python
// driver and the Apache Cassandra Java driver 4.x (test/drivers/*) through
// the hot reads proxy: each compares every page of concurrent paged reads,
// simple and prepared, with the same read sent to Cassandra directly, and
// reads back each of its writes among concurrent reads of the same row.
// Each must have been served reads from another read's answer.
func TestHotReadsDrivers(t *testing.T) {
	skipUnlessEnabled(t)
	hp := startHotProxy(t, 200*time.Millisecond)
	host, port, err := net.SplitHostPort(hp.addr)
	if err != nil {
		t.Fatal(err)
	}
	directHost, directPort, err := net.SplitHostPort(cassandraAddr)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ driver, script, proto, comp string }{
		{"python", "hot_reads_test.py", "5", "none"},
		{"python", "hot_reads_test.py", "5", "lz4"},
		{"python", "hot_reads_test.py", "4", "lz4"},
		{"java", "hotreads", "5", "none"},
		{"java", "hotreads", "5", "lz4"},
		{"java", "hotreads", "4", "lz4"},
	} {
		t.Run(fmt.Sprintf("%s-v%s-%s", c.driver, c.proto, c.comp), func(t *testing.T) {
			before := hp.served(t)
			// Later entries win over runDriverScript's defaults (os/exec
			// keeps the last value of a duplicate key).
			runDriverScript(t, c.driver, c.script, "CQL_HOST="+host, "CQL_PORT="+port,
				"DIRECT_HOST="+directHost, "DIRECT_PORT="+directPort, "HOT_KEYSPACE="+hotKeyspace,
				"CQL_PROTOCOL="+c.proto, "CQL_COMPRESSION="+c.comp)
			after := hp.served(t)
			for outcome := range after {
				after[outcome] -= before[outcome]
			}
			t.Logf("this client's hot reads: %v", after)
			if after["cached"]+after["coalesced"] == 0 {
				t.Errorf("no read of the %s driver was served from another's answer: %v", c.driver, after)
			}
		})
	}
}
