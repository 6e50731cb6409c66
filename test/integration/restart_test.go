package integration

import (
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/cqlguard/cqlguard/config"
)

// TestCassandraRestart stops the real Cassandra under a client's writes
// through cqlguard, then starts it again. Every request gets an answer, a
// result or an error, within the driver's timeout: none waits on a proxy
// that lost its upstream. Once Cassandra is back, the same session writes
// again through the proxy, over new connections.
func TestCassandraRestart(t *testing.T) {
	skipUnlessEnabled(t)
	addr, stopProxy, err := startProxy(config.Config{Listen: "127.0.0.1:0", Upstreams: []string{cassandraAddr}})
	if err != nil {
		t.Fatal(err)
	}
	defer stopProxy()

	s := sessionThrough(t, addr, func(c *gocql.ClusterConfig) {
		c.Timeout, c.ConnectTimeout = 5*time.Second, 5*time.Second
		c.ReconnectInterval = time.Second
	},
		"CREATE KEYSPACE IF NOT EXISTS cqlguard_restart WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
		"CREATE TABLE IF NOT EXISTS cqlguard_restart.t (k int PRIMARY KEY, v int)",
	)
	defer s.Close()

	// The writer records how long each request took to be answered.
	var ok, failed atomic.Int64
	var longest atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			err := s.Query("INSERT INTO cqlguard_restart.t (k, v) VALUES (?, ?)", k, k).Exec()
			if d := int64(time.Since(start)); d > longest.Load() {
				longest.Store(d)
			}
			if err != nil {
				failed.Add(1)
				time.Sleep(50 * time.Millisecond) // paces the writes while Cassandra is down
				continue
			}
			ok.Add(1)
		}
	}()

	script := filepath.Join(repoRoot(), "test", "cassandra", "cassandra.sh")
	run := func(arg string) {
		t.Helper()
		out, err := exec.Command("bash", script, arg).CombinedOutput()
		if err != nil {
			t.Fatalf("cassandra.sh %s: %v\n%s", arg, err, out)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ok.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	before := ok.Load()
	run("stop")
	stopped := time.Now()
	time.Sleep(2 * time.Second) // Cassandra stays down a while: the writes meanwhile fail
	okWhileDown := ok.Load()
	run("start")
	t.Logf("Cassandra was down for %v", time.Since(stopped).Round(time.Millisecond))

	// Back: the same session writes again within the reconnect interval
	// and a few retries.
	deadline := time.Now().Add(60 * time.Second)
	for ok.Load() == okWhileDown && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	recovered := ok.Load() > okWhileDown
	time.Sleep(time.Second) // the session writes on a while after its recovery
	close(stop)
	wg.Wait()

	t.Logf("writes: %d before the stop, %d in all, %d failed; longest wait for an answer %v",
		before, ok.Load(), failed.Load(), time.Duration(longest.Load()).Round(time.Millisecond))
	if before == 0 {
		t.Error("no write succeeded before the stop")
	}
	if failed.Load() == 0 {
		t.Error("no write failed while Cassandra was down")
	}
	if !recovered {
		t.Error("no write succeeded within 60 s of Cassandra's restart")
	}
	// gocql's own timeout is 5 s; an answer that took much longer means a
	// request waited on the proxy with nothing to answer it.
	if d := time.Duration(longest.Load()); d > 12*time.Second {
		t.Errorf("a write waited %v for its answer", d)
	}
}
