package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// limitsClient is a driver's limits client (test/drivers/*/limits*): it
// sends LIMIT_N writes and LIMIT_N reads to partition key LIMIT_KEY, checks
// each refusal is what LIMIT_EXPECT says its driver raises, prints a line
// "refused ..." for each, and ends with a JSON line of what it saw.
type limitsClient struct {
	name, dir, script string
	env               []string
	key               int
}

// limitsClients are the limits clients of the drivers other than gocql,
// each on a partition of its own.
var limitsClients = []limitsClient{
	{"python-datastax", "python", "limits_test.py", []string{"CQL_PY_DRIVER=datastax"}, 51},
	{"python-scylla", "python", "limits_test.py", []string{"CQL_PY_DRIVER=scylla"}, 52},
	{"java", "java", "limits", nil, 53},
	{"rust", "rust", "limits_test", nil, 54},
	{"node", "node", "limits_test", nil, 55},
}

// decodeLimitsOutput decodes the closing JSON line of a limits client's
// output into res, and fails the test for each refusal it printed without
// want, unless want is empty.
func decodeLimitsOutput(t *testing.T, out, want string, res any) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), res); err != nil {
		t.Fatalf("driver output: %v", err)
	}
	if want == "" {
		return
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "refused ") && !strings.Contains(l, want) {
			t.Errorf("%s; want the message %q", l, want)
		}
	}
}
