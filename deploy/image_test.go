package deploy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestImage builds the repository's Dockerfile and runs the image as it
// ships: `version` prints the build, the user is not root, and the admin
// port, published on the host, answers /healthz. It needs a Docker engine,
// and CQLGUARD_INTEGRATION=1 because the build takes minutes.
func TestImage(t *testing.T) {
	t.Parallel()
	if err := dockerEngine(); err != nil {
		t.Skipf("no Docker engine: %v", err)
	}
	if os.Getenv("CQLGUARD_INTEGRATION") != "1" {
		t.Skip("building the image takes minutes: set CQLGUARD_INTEGRATION=1")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	image := fmt.Sprintf("cqlguard-test:%d", time.Now().UnixNano())
	docker(t, 15*time.Minute, "build", "-t", image, root)
	t.Cleanup(func() { exec.Command("docker", "rmi", "-f", image).Run() })

	if v := docker(t, time.Minute, "run", "--rm", image, "version"); !strings.HasPrefix(v, "cqlguard ") {
		t.Errorf("version printed %q", v)
	}
	if u := docker(t, time.Minute, "image", "inspect", "-f", "{{.Config.User}}", image); u != "65532:65532" {
		t.Errorf("image user %q, want 65532:65532 (distroless nonroot)", u)
	}

	// The image's own configuration names an upstream that is not there:
	// the proxy serves anyway, /healthz answers and /readyz does not.
	id := docker(t, time.Minute, "run", "-d", "-p", "127.0.0.1::9180", image)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := exec.Command("docker", "logs", id).CombinedOutput()
			t.Logf("container logs:\n%s", out)
		}
		exec.Command("docker", "rm", "-f", id).Run()
	})
	addr := docker(t, time.Minute, "port", id, "9180/tcp")
	addr = strings.TrimSpace(strings.SplitN(addr, "\n", 2)[0])
	url := "http://" + addr + "/healthz"
	deadline := time.Now().Add(time.Minute)
	for {
		body, err := get(url)
		if err == nil && body == "ok\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %q, %v", url, body, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if body, err := get("http://" + addr + "/readyz"); err == nil {
		t.Errorf("/readyz answered %q with no upstream node", body)
	}
}

// dockerEngine says why no Docker engine can be used, or nil.
func dockerEngine() error {
	if _, err := exec.LookPath("docker"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput()
	if err != nil {
		return fmt.Errorf("docker info: %w: %s", err, lastLine(out))
	}
	return nil
}

// lastLine is the last non-empty line of out, where docker says what went
// wrong.
func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// docker runs the docker command with args and returns its trimmed
// standard output, failing t if it fails.
func docker(t *testing.T, timeout time.Duration, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return strings.TrimSpace(stdout.String())
}

// get returns the body of a 200 answer to a GET of url.
func get(url string) (string, error) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("%s", resp.Status)
	}
	return string(b), nil
}
