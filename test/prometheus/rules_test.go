// Package prometheus tests deploy/prometheus/alerts.yml with promtool,
// through prometheus.sh rules: the rules must check, and every alert's
// unit tests in deploy/prometheus/tests must pass. prometheus.sh also runs
// the private Prometheus of test/integration's TestPrometheus.
package prometheus

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

func TestRules(t *testing.T) {
	t.Parallel()
	needPromtool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // an apt-get install included
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", filepath.Join(here(), "prometheus.sh"), "rules").CombinedOutput()
	if err != nil {
		t.Fatalf("prometheus.sh rules: %v\n%s", err, out)
	}
}

// TestRulesGlob checks every file deploy/prometheus/*.yml matches as
// rules, as a Prometheus whose rule_files names that glob loads them: a
// file of another kind there (promtool's unit tests, say) would stop it
// loading any.
func TestRulesGlob(t *testing.T) {
	t.Parallel()
	needPromtool(t)
	files, err := filepath.Glob(filepath.Join(here(), "..", "..", "deploy", "prometheus", "*.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("deploy/prometheus/*.yml matches no file")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "promtool", append([]string{"check", "rules"}, files...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules deploy/prometheus/*.yml: %v\n%s", err, out)
	}
}

// needPromtool skips the test on a machine without promtool, unless
// CQLGUARD_INTEGRATION=1, when prometheus.sh installs it.
func needPromtool(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("promtool"); err == nil {
		return
	}
	if os.Getenv("CQLGUARD_INTEGRATION") != "1" {
		t.Skip("promtool is not installed: set CQLGUARD_INTEGRATION=1 to install Prometheus (test/prometheus/prometheus.sh install)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "bash", filepath.Join(here(), "prometheus.sh"), "install").CombinedOutput(); err != nil {
		t.Fatalf("prometheus.sh install: %v\n%s", err, out)
	}
}

// here is this package's directory.
func here() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}
