package integration

import (
	"encoding/binary"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cqlguard/cqlguard/classify"
	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/proxy"
	"github.com/cqlguard/cqlguard/schema"
)

// limitsConfig is the proxy's configuration file, after its listen line.
const limitsConfig = `upstreams: [127.0.0.2:9042]
admin: {listen: ""}
schema: {username: cassandra, password_env: CQLGUARD_TEST_PASSWORD}
limits:
  algorithm: token-bucket
  keyspaces:
    cqlguard_limits:
      tables:
        hot: {max_writes_per_second: %d, max_reads_per_second: %d}
`

// TestLimitsEnforced floods partitions of one table through a proxy that
// limits it to 5 reads and 5 writes per second per partition. gocql, the
// DataStax Python driver and the Java driver get Config_error with
// ScyllaDB's message, and ScyllaDB's Python and Rust drivers
// RateLimitReached with the operation's type; no driver retries a refused
// request; another partition of the table and
// another table are not refused while the flood runs; a reload changes the
// limit without closing the connection.
func TestLimitsEnforced(t *testing.T) {
	skipUnlessEnabled(t)
	os.Setenv("CQLGUARD_TEST_PASSWORD", password)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	path := filepath.Join(t.TempDir(), "cqlguard.yaml")
	writeLimits := func(limit string) {
		text := "listen: " + ln.Addr().String() + "\n" + strings.ReplaceAll(limitsConfig, "%d", limit)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeLimits("5")
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := &classLog{watched: map[string]bool{"cqlguard_limits": true}, byTable: map[string][]observation{}}
	p := serveProxy(t, ln, cfg, prometheus.NewRegistry(), proxy.WithObserver(seen.add))

	s := sessionThrough(t, cfg.Listen, func(c *gocql.ClusterConfig) { c.Timeout = 20 * time.Second },
		"CREATE KEYSPACE IF NOT EXISTS cqlguard_limits WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
		"CREATE TABLE IF NOT EXISTS cqlguard_limits.hot (k int, c int, PRIMARY KEY (k, c))",
		"CREATE TABLE IF NOT EXISTS cqlguard_limits.cold (k int, c int, PRIMARY KEY (k, c))",
	)
	defer s.Close()
	// The proxy learns of the tables from the schema change: an inline
	// write to each, in a partition no check counts, is pinned to its
	// partition once it has.
	for _, table := range []string{"hot", "cold"} {
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if err := s.Query("INSERT INTO cqlguard_limits." + table + " (k, c) VALUES (-1, 0)").Exec(); err != nil {
				t.Fatalf("probing cqlguard_limits.%s: %v", table, err)
			}
			if slices.ContainsFunc(seen.take("cqlguard_limits", table), func(o observation) bool { return o.pinned }) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after 20 s the proxy still does not know cqlguard_limits.%s", table)
			}
		}
	}
	seen.take("cqlguard_limits", "hot")

	// requestsSeen returns how many reads or writes of partition k of the
	// hot table reached the proxy since the last call: a driver that
	// retried a refusal would send more than it was asked to.
	requestsSeen := func(k int32) int {
		tok := schema.Token(binary.BigEndian.AppendUint32(nil, uint32(k)))
		n := 0
		for _, o := range seen.take("cqlguard_limits", "hot") {
			if o.pinned && len(o.tokens) == 1 && o.tokens[0] == tok && (o.op == classify.OpRead || o.op == classify.OpWrite) {
				n++
			}
		}
		return n
	}
	// within reports whether accepted is what a bucket of 1 s at 5/s lets
	// through in elapsed seconds.
	within := func(accepted int, elapsed float64) bool {
		return accepted >= 5 && accepted <= 5+int(5*elapsed)+1
	}

	flood := func(table string, k int, n int) (accepted, rejected int) {
		t.Helper()
		for i := range n {
			err := s.Query("INSERT INTO cqlguard_limits."+table+" (k, c) VALUES (?, ?)", k, i).Exec()
			switch {
			case err == nil:
				accepted++
			case strings.Contains(err.Error(), "Per-partition rate limit reached for write in table cqlguard_limits.hot, rejected by coordinator"):
				rejected++
			default:
				t.Errorf("unexpected error: %v", err)
				return
			}
		}
		return accepted, rejected
	}

	t.Run("gocql", func(t *testing.T) {
		// Side traffic, alone and then beside the flood: 200 writes to the
		// cold table and 4 to another partition of hot, within its burst
		// of 5. None may be refused; its pace is reported.
		side := func() (rate float64, refused int) {
			start := time.Now()
			for i := range 200 {
				_, r := flood("cold", 10+i%5, 1)
				refused += r
				if i%50 == 0 {
					_, r := flood("hot", 2, 1)
					refused += r
				}
			}
			return 204 / time.Since(start).Seconds(), refused
		}
		alone, refusedAlone := side()
		time.Sleep(time.Second) // partition 2 of hot refills
		var wg sync.WaitGroup
		var during float64
		var refusedOthers int
		wg.Add(1)
		go func() {
			defer wg.Done()
			during, refusedOthers = side()
		}()
		start := time.Now()
		acc, rej := flood("hot", 1, 100)
		elapsed := time.Since(start).Seconds()
		wg.Wait()
		if !within(acc, elapsed) || rej == 0 {
			t.Errorf("hot partition: %d accepted, %d refused in %.2f s; want 5 to %d accepted", acc, rej, elapsed, 5+int(5*elapsed)+1)
		}
		if got := requestsSeen(1); got != 100 {
			t.Errorf("gocql sent %d requests for 100 writes: refusals were retried", got)
		}
		if refusedOthers+refusedAlone != 0 {
			t.Errorf("other partitions and tables: %d refused during the flood", refusedOthers)
		}
		t.Logf("hot partition, limit 5/s: %d accepted, %d refused in %.2f s; other traffic %.0f req/s alone, %.0f req/s during the flood, none refused",
			acc, rej, elapsed, alone, during)
	})

	// Drivers in other languages run a script that floods one partition
	// of hot with writes and then reads, and prints a JSON line of what
	// was accepted and refused; the script itself checks that each refusal
	// is the error its driver should raise (LIMIT_EXPECT).
	for _, d := range []struct {
		name, dir, script string
		env               []string
		key               int32
	}{
		{"python-datastax", "python", "limits_test.py", []string{"CQL_PY_DRIVER=datastax", "LIMIT_EXPECT=config_error"}, 10},
		{"python-scylla", "python", "limits_test.py", []string{"CQL_PY_DRIVER=scylla", "LIMIT_EXPECT=rate_limit"}, 20},
		{"rust", "rust", "limits_test", []string{"LIMIT_EXPECT=rate_limit"}, 40},
		{"java", "java", "limits", []string{"LIMIT_EXPECT=config_error"}, 30},
	} {
		t.Run(d.name, func(t *testing.T) {
			const n = 50
			env := append([]string{"CQL_PORT=" + port, "LIMIT_KEY=" + strconv.Itoa(int(d.key)), "LIMIT_N=" + strconv.Itoa(n)}, d.env...)
			out := runDriverScript(t, d.dir, d.script, env...)
			var res struct {
				Write, Read struct{ Accepted, Refused int }
				Seconds     float64
			}
			decodeLimitsOutput(t, out, "", &res)
			for _, op := range []struct {
				name string
				acc  int
			}{{"write", res.Write.Accepted}, {"read", res.Read.Accepted}} {
				if !within(op.acc, res.Seconds) {
					t.Errorf("%ss: %d of %d accepted in %.2f s", op.name, op.acc, n, res.Seconds)
				}
			}
			if got := requestsSeen(d.key); got != 2*n {
				t.Errorf("the driver sent %d requests for %d: refusals were retried", got, 2*n)
			}
		})
	}

	t.Run("reload", func(t *testing.T) {
		// Raise the limit: the same session, on the same connection, is
		// no longer refused.
		writeLimits("100000")
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Reload(cfg); err != nil {
			t.Fatal(err)
		}
		if acc, rej := flood("hot", 1, 100); rej != 0 {
			t.Errorf("after raising the limit: %d accepted, %d refused", acc, rej)
		}
	})
}
