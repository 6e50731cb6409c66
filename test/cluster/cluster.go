// Package cluster starts and stops the three-node Cassandra cluster of
// test/cassandra/cluster.sh for tests, and reads from each node the counts
// that tell which node coordinated a table's requests and which served them
// (Reader), so that a test can tell how many requests reached a replica of
// their partition first.
package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
)

// Port is every node's native (CQL) port.
const Port = 9042

// Hosts returns the nodes' addresses, as cluster.sh starts them by
// default; the first is the seed.
func Hosts() []string { return []string{"127.0.1.1", "127.0.1.2", "127.0.1.3"} }

// Start starts the cluster unless it runs, and returns once every node
// sees every node UP; the script's output goes to out. On two cores it
// takes about a minute from cold, a little less from existing data, and
// under a second when the cluster runs.
func Start(ctx context.Context, out io.Writer) error {
	return script(ctx, out, "start")
}

// Stop stops the cluster, keeping its data for the next Start.
func Stop(ctx context.Context, out io.Writer) error {
	return script(ctx, out, "stop")
}

// script runs cluster.sh with args.
func script(ctx context.Context, out io.Writer, args ...string) error {
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "..", "cassandra", "cluster.sh")
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", append([]string{path}, args...)...)
	cmd.Stdout = out
	cmd.Stderr = io.MultiWriter(out, &stderr)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("cluster.sh %s: %w: %s", args[0], err, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}
