// Package redistest gives tests running Redis servers, started and stopped
// through test/redis/redis.sh: a plain instance, one with an ACL user, one
// that speaks TLS only, or a cluster of three masters, each on free ports of
// 127.0.0.1 and stopped when the test ends. Redis keeps nothing on disk: a
// restarted server has no keys.
//
// With CQLGUARD_INTEGRATION=1 the helpers install Redis (Debian's packages)
// where it is missing; without it they skip the test when redis-server or
// redis-cli is not installed, so that go test ./... passes on a machine
// without Redis.
package redistest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// User is the ACL user of the servers StartACL starts.
const User = "cqlguard"

// Credentials are what a client of a StartACL server logs in with.
type Credentials struct {
	User     string
	Password string
	// PasswordFile holds Password alone, without a newline.
	PasswordFile string
}

// Start runs a plain Redis and returns its address, host:port.
func Start(t testing.TB) string {
	t.Helper()
	need(t)
	port := freePort(t)
	addr := run(t, "start", port)
	stopAtCleanup(t, port)
	return addr
}

// StartACL runs a Redis whose default user is off, so that a client must
// log in as User with the returned password, and returns its address.
func StartACL(t testing.TB) (addr string, c Credentials) {
	t.Helper()
	need(t)
	port := freePort(t)
	file := run(t, "start-acl", port)
	stopAtCleanup(t, port)
	pw, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("redistest: reading the password: %v", err)
	}
	return "127.0.0.1:" + port, Credentials{User: User, Password: string(pw), PasswordFile: file}
}

// StartTLS runs a Redis that accepts TLS connections only, with a
// certificate for 127.0.0.1 and localhost signed by a CA of its own, and
// returns its address and the CA's certificate file (PEM).
func StartTLS(t testing.TB) (addr, caFile string) {
	t.Helper()
	need(t)
	port := freePort(t)
	caFile = run(t, "start-tls", port)
	stopAtCleanup(t, port)
	return "127.0.0.1:" + port, caFile
}

// StartCluster runs a Redis cluster of three masters, its slots split
// between them and no replicas, and returns the masters' addresses once
// every one of them sees the cluster as ok.
func StartCluster(t testing.TB) []string {
	t.Helper()
	need(t)
	first := clusterPorts(t)
	out := run(t, "start-cluster", strconv.Itoa(first))
	for i := range 3 {
		stopAtCleanup(t, strconv.Itoa(first+i))
	}
	addrs := strings.Fields(out)
	if len(addrs) != 3 {
		t.Fatalf("redistest: redis.sh start-cluster printed %q, want three addresses", out)
	}
	return addrs
}

// Stop stops the server at addr, one that a Start function started; its
// configuration stays for Restart.
func Stop(t testing.TB, addr string) {
	t.Helper()
	run(t, "stop", portOf(t, addr))
}

// Restart stops the server at addr if it runs and starts it again on the
// same port with the same configuration: the same password, CA and cluster,
// and no keys. It returns when the server answers, and for a cluster node
// when the node sees the cluster as ok.
func Restart(t testing.TB, addr string) {
	t.Helper()
	run(t, "restart", portOf(t, addr))
}

// TLSConfig is a client configuration for a StartTLS server that trusts
// caFile's CA only.
func TLSConfig(t testing.TB, caFile string) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("redistest: no certificate in %s", caFile)
	}
	return &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
}

// need skips the test where Redis is missing and may not be installed.
func need(t testing.TB) {
	t.Helper()
	if os.Getenv("CQLGUARD_INTEGRATION") == "1" {
		return
	}
	for _, cmd := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(cmd); err != nil {
			t.Skipf("%s is not installed: set CQLGUARD_INTEGRATION=1 to install Redis (test/redis/redis.sh install)", cmd)
		}
	}
}

// script is the path of redis.sh, found from this file's.
func script() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "redis", "redis.sh")
}

// runScript runs redis.sh with args and returns what it printed on stdout,
// trimmed. Its time limit covers an installation with apt-get.
func runScript(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{script()}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("redis.sh %s: %w\n%s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

func run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := runScript(args...)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return out
}

// stopAtCleanup stops port's server when the test ends, if it runs, and
// deletes its directory.
func stopAtCleanup(t testing.TB, port string) {
	t.Cleanup(func() {
		if _, err := runScript("stop", "--wipe", port); err != nil {
			t.Errorf("redistest: %v", err)
		}
	})
}

func portOf(t testing.TB, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return port
}

// freePort is a port of 127.0.0.1 that nothing listened on a moment ago.
func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: finding a free port: %v", err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// clusterPorts is the first of three consecutive free ports p whose
// cluster bus ports, p+10000 as redis.sh configures them, are free too.
func clusterPorts(t testing.TB) int {
	t.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("redistest: finding free ports: %v", err)
		}
		first := ln.Addr().(*net.TCPAddr).Port
		if first+10002 > 65535 {
			ln.Close()
			continue
		}
		lns := []net.Listener{ln}
		for _, p := range []int{first + 1, first + 2, first + 10000, first + 10001, first + 10002} {
			if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
				lns = append(lns, l)
			}
		}
		for _, l := range lns {
			l.Close()
		}
		if len(lns) == 6 {
			return first
		}
	}
	t.Fatal("redistest: found no three consecutive free ports with free cluster bus ports")
	return 0
}
