package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// runDriver runs a driver test client (test/drivers/<name>/run.sh) against
// the proxy; the client checks each step itself and exits non-zero on the
// first failure.
func runDriver(t *testing.T, name string, env ...string) {
	t.Helper()
	runDriverScript(t, name, "", env...)
}

// runDriverScript runs one script of a driver's test clients, with env
// over the defaults, and returns its output.
func runDriverScript(t *testing.T, name, script string, env ...string) string {
	t.Helper()
	run := filepath.Join(repoRoot(), "test", "drivers", name, "run.sh")
	cmd := exec.Command("bash", run)
	if script != "" {
		cmd.Args = append(cmd.Args, script)
	}
	cmd.Env = append(os.Environ(),
		"CQL_HOST="+proxyHost, "CQL_PORT=9042", "CQL_USER="+user, "CQL_PASSWORD="+password,
		"EXPECT_HOSTS="+proxyHost)
	cmd.Env = append(cmd.Env, env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("%s (%s):\n%s", name, time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("%s driver test failed: %v", name, err)
	}
	return string(out)
}

func TestPythonDriverThroughProxy(t *testing.T) {
	skipUnlessEnabled(t)
	for _, v := range []struct{ proto, comp string }{{"5", "none"}, {"4", "lz4"}, {"4", "snappy"}, {"5", "lz4"}} {
		t.Run(fmt.Sprintf("v%s-%s", v.proto, v.comp), func(t *testing.T) {
			runDriver(t, "python", "CQL_PROTOCOL="+v.proto, "CQL_COMPRESSION="+v.comp,
				fmt.Sprintf("CQL_KEYSPACE=cqlguard_py_v%s_%s", v.proto, v.comp))
		})
	}
}

func TestNodeDriverThroughProxy(t *testing.T) {
	skipUnlessEnabled(t)
	runDriver(t, "node")
}
