// Package prometheus tests deploy/prometheus/alerts.yml with promtool,
// through prometheus.sh rules: the rules must check, and every alert's
// unit tests in alerts_test.yml must pass. prometheus.sh also runs the
// private Prometheus of test/integration's TestPrometheus.
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
	// With CQLGUARD_INTEGRATION=1 the script installs Prometheus where it
	// is missing; without it, a machine without promtool skips the test.
	if os.Getenv("CQLGUARD_INTEGRATION") != "1" {
		if _, err := exec.LookPath("promtool"); err != nil {
			t.Skip("promtool is not installed: set CQLGUARD_INTEGRATION=1 to install Prometheus (test/prometheus/prometheus.sh install)")
		}
	}
	_, file, _, _ := runtime.Caller(0)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // an apt-get install included
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", filepath.Join(filepath.Dir(file), "prometheus.sh"), "rules").CombinedOutput()
	if err != nil {
		t.Fatalf("prometheus.sh rules: %v\n%s", err, out)
	}
}
