// Package integration runs real drivers through cqlguard against a real
// Apache Cassandra 5, started by test/cassandra/cassandra.sh. The tests run
// when CQLGUARD_INTEGRATION=1 (make test sets it) and skip otherwise.
//
// Cassandra listens on 127.0.0.2:9042 and the proxy on 127.0.0.1:9042: a
// driver that slipped past the proxy would dial 127.0.0.2, which the tests
// watch for.
package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/proxy"
)

const (
	cassandraAddr = "127.0.0.2:9042"
	proxyHost     = "127.0.0.1"
	proxyAddr     = proxyHost + ":9042"
	user          = "cassandra"
	password      = "cassandra"
)

var enabled = os.Getenv("CQLGUARD_INTEGRATION") == "1"

// repoRoot is the repository's top directory.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func TestMain(m *testing.M) {
	if !enabled {
		fmt.Println("integration tests skipped: set CQLGUARD_INTEGRATION=1 (make test does)")
		os.Exit(m.Run())
	}
	os.Exit(runWithCassandra(m))
}

func runWithCassandra(m *testing.M) int {
	script := filepath.Join(repoRoot(), "test", "cassandra", "cassandra.sh")
	start := exec.Command("bash", script, "start")
	start.Stdout, start.Stderr = os.Stdout, os.Stderr
	if err := start.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "starting Cassandra:", err)
		return 1
	}
	if os.Getenv("CQLGUARD_KEEP_CASSANDRA") != "1" {
		defer func() {
			stop := exec.Command("bash", script, "stop")
			stop.Stdout, stop.Stderr = os.Stdout, os.Stderr
			stop.Run()
		}()
	}
	stop, err := startProxy(proxy.Config{Listen: proxyAddr, Upstreams: []string{cassandraAddr}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting cqlguard:", err)
		return 1
	}
	defer stop()
	return m.Run()
}

// startProxy runs a proxy in this process with cfg over the defaults, and
// returns a function that drains it.
func startProxy(over proxy.Config) (func(), error) {
	cfg := proxy.DefaultConfig()
	cfg.Listen = over.Listen
	cfg.Advertise = over.Advertise
	cfg.Upstreams = over.Upstreams
	if over.Mode != "" {
		cfg.Mode = over.Mode
	}
	cfg.Peers = over.Peers
	level := zerolog.WarnLevel
	if os.Getenv("CQLGUARD_DEBUG") == "1" {
		level = zerolog.DebugLevel
	}
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).Level(level).With().Timestamp().Str("proxy", cfg.Listen).Logger()
	p, err := proxy.New(cfg, log, prometheus.NewRegistry())
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, err
	}
	go p.Serve(ln)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Shutdown(ctx)
	}, nil
}

func skipUnlessEnabled(t *testing.T) {
	t.Helper()
	if !enabled {
		t.Skip("set CQLGUARD_INTEGRATION=1")
	}
}
