package integration

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/proxy"
)

const limitsConfig = `listen: 127.0.0.1:9043
upstreams: [127.0.0.2:9042]
admin: {listen: ""}
schema: {username: cassandra, password_env: CQLGUARD_TEST_PASSWORD}
limits:
  algorithm: token-bucket
  keyspaces:
    cqlguard_limits:
      tables:
        hot: {max_writes_per_second: %d}
`

// TestLimitsEnforced floods one partition through a proxy with a write
// limit: gocql gets Config_error with ScyllaDB's message for the excess,
// another partition of the table and another table are not refused, and a
// reload changes the limit without closing the connection.
func TestLimitsEnforced(t *testing.T) {
	skipUnlessEnabled(t)
	os.Setenv("CQLGUARD_TEST_PASSWORD", password)
	path := filepath.Join(t.TempDir(), "cqlguard.yaml")
	writeLimits := func(limit string) {
		if err := os.WriteFile(path, []byte(strings.Replace(limitsConfig, "%d", limit, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeLimits("5")
	cfg, err := proxy.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxy.New(cfg, zerolog.New(os.Stderr).Level(zerolog.WarnLevel), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ln)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Shutdown(ctx)
	}()

	c := gocql.NewCluster(cfg.Listen)
	c.Authenticator = gocql.PasswordAuthenticator{Username: user, Password: password}
	c.Timeout = 20 * time.Second
	c.NumConns = 1
	s, err := c.CreateSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, q := range []string{
		"CREATE KEYSPACE IF NOT EXISTS cqlguard_limits WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
		"CREATE TABLE IF NOT EXISTS cqlguard_limits.hot (k int, c int, PRIMARY KEY (k, c))",
		"CREATE TABLE IF NOT EXISTS cqlguard_limits.cold (k int, c int, PRIMARY KEY (k, c))",
	} {
		if err := s.Query(q).Exec(); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// The proxy learns of the tables from the schema change.
	time.Sleep(2 * time.Second)

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
				t.Fatalf("unexpected error: %v", err)
			}
		}
		return accepted, rejected
	}
	start := time.Now()
	acc, rej := flood("hot", 1, 100)
	elapsed := time.Since(start).Seconds()
	// The bucket holds 1 s of the limit and refills at 5/s.
	if max := 5 + int(5*elapsed) + 1; acc > max || rej == 0 {
		t.Errorf("hot partition: %d accepted, %d refused in %.2f s; want at most %d accepted", acc, rej, elapsed, max)
	}
	t.Logf("hot partition, limit 5/s: %d accepted, %d refused in %.2f s", acc, rej, elapsed)
	if acc, rej := flood("hot", 2, 5); rej != 0 || acc != 5 {
		t.Errorf("another partition of the table: %d accepted, %d refused", acc, rej)
	}
	if acc, rej := flood("cold", 1, 100); rej != 0 || acc != 100 {
		t.Errorf("another table: %d accepted, %d refused", acc, rej)
	}

	// Raise the limit: the same session, on the same connection, is no
	// longer refused.
	writeLimits("100000")
	if err := p.ReloadConfig(path); err != nil {
		t.Fatal(err)
	}
	if acc, rej := flood("hot", 1, 100); rej != 0 {
		t.Errorf("after raising the limit: %d accepted, %d refused", acc, rej)
	}
}
