package main

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// portZeroAddr returns an address on port 0's choice for run to listen on:
// run takes addresses, not listeners, so the test's listener is closed
// before run listens there.
func portZeroAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// The binary serves with a config file and flags over it, and SIGTERM
// drains and returns cleanly.
func TestRunServesAndDrainsOnSIGTERM(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "cqlguard.yaml")
	os.WriteFile(cfg, []byte("upstreams: [127.0.0.3:19050]\ndrain_timeout: 2s\nlog: {level: warn}\n"), 0o600)
	listen, admin := portZeroAddr(t), portZeroAddr(t)
	done := make(chan error, 1)
	go func() {
		done <- run([]string{"-config", cfg, "-listen", listen, "-admin", admin})
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get("http://" + admin + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("admin listener never answered: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c, err := net.Dial("tcp", listen); err != nil {
		t.Fatalf("proxy not listening: %v", err)
	} else {
		c.Close()
	}
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after SIGTERM: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("SIGTERM did not stop the proxy")
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(cfg, []byte("listen: 127.0.0.1:9042\nupstrems: [x:1]\n"), 0o600)
	err := run([]string{"-config", cfg})
	if err == nil || !strings.Contains(err.Error(), "bad.yaml:2") || !strings.Contains(err.Error(), `"upstrems"`) {
		t.Fatalf("want an error naming bad.yaml:2 and the key, got %v", err)
	}
}

// SIGHUP reloads the configuration file: the reload shows in the metrics,
// and a bad file is refused without stopping the proxy.
func TestRunReloadsOnSIGHUP(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "cqlguard.yaml")
	base := "upstreams: [127.0.0.3:19052]\ndrain_timeout: 2s\nlog: {level: error}\n"
	os.WriteFile(cfg, []byte(base), 0o600)
	listen, admin := portZeroAddr(t), portZeroAddr(t)
	done := make(chan error, 1)
	go func() {
		done <- run([]string{"-config", cfg, "-watch-config=false", "-listen", listen, "-admin", admin})
	}()
	metrics := func() string {
		resp, err := http.Get("http://" + admin + "/metrics")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	waitFor := func(what string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !strings.Contains(metrics(), what) {
			if time.Now().After(deadline) {
				t.Fatalf("metrics never showed %q", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor(`cqlguard_config_reloads_total{result="success"} 0`)

	os.WriteFile(cfg, []byte(base+"limits:\n  default: {max_writes_per_second: 100}\n"), 0o600)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor(`cqlguard_config_reloads_total{result="success"} 1`)

	os.WriteFile(cfg, []byte(base+"limits:\n  defaults: {}\n"), 0o600)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor(`cqlguard_config_reloads_total{result="failure"} 1`)

	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after SIGTERM: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("SIGTERM did not stop the proxy")
	}
}

func TestRunRejectsBadWatchInterval(t *testing.T) {
	t.Parallel()
	if err := run([]string{"-watch-interval", "0s"}); err == nil || !strings.Contains(err.Error(), "-watch-interval") {
		t.Fatalf("want an error naming -watch-interval, got %v", err)
	}
}
