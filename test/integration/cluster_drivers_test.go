package integration

// The driver test clients through a cqlguard that routes to replicas, in
// front of the three-node cluster: each driver must see what it sees in
// front of the single node, while cqlguard runs its requests on replicas
// over connections it opened to other nodes, replaying the client's login,
// USE and PREPAREs there.

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/apache/cassandra-gocql-driver/v2/lz4"
)

// routedDriver is one driver run through the routed cqlguard: a driver's
// test client (test/drivers/<name>), with env over the defaults, or gocql
// in this process when name is "gocql".
type routedDriver struct {
	name  string
	env   []string
	proto int              // gocql's protocol version
	comp  gocql.Compressor // gocql's compression
	// more is set for the variants that run only with
	// CQLGUARD_CLUSTER_DRIVERS=1: without them each driver, both protocol
	// versions and each compression still run, in less of make test's
	// time.
	more bool
}

// routedDrivers are variants of each driver that the single node's tests
// run, each in a keyspace of its own: every driver, both protocol versions
// and each compression at least once.
var routedDrivers = []routedDriver{
	{name: "python", env: []string{"CQL_PROTOCOL=5", "CQL_COMPRESSION=lz4", "CQL_KEYSPACE=cqlguard_routed_py_v5_lz4"}},
	{name: "python", env: []string{"CQL_PROTOCOL=4", "CQL_COMPRESSION=snappy", "CQL_KEYSPACE=cqlguard_routed_py_v4_snappy"}, more: true},
	{name: "node", env: []string{"CQL_KEYSPACE=cqlguard_routed_node"}},
	{name: "java", env: []string{"CQL_PROTOCOL=5", "CQL_COMPRESSION=none", "CQL_KEYSPACE=cqlguard_routed_java_v5_none"}, more: true},
	{name: "java", env: []string{"CQL_PROTOCOL=4", "CQL_COMPRESSION=snappy", "CQL_KEYSPACE=cqlguard_routed_java_v4_snappy"}},
	{name: "rust", env: []string{"CQL_COMPRESSION=lz4", "CQL_KEYSPACE=cqlguard_routed_rust_lz4"}},
	{name: "scyllagocql", env: []string{"CQL_COMPRESSION=none", "CQL_OPT_IN=1", "CQL_KEYSPACE=cqlguard_routed_scyllagocql"}},
	{name: "gocql", proto: 4, more: true},
	{name: "gocql", proto: 5, comp: lz4.LZ4Compressor{}},
}

// TestDriversRoutedOnCluster runs each driver's test client through a
// cqlguard in cluster mode with routing.replicas in front of the three-node
// cluster, its upstreams all three nodes, and checks that each driver's
// requests ran on replicas. Each client checks what it checks in front of
// the single node; the keyspaces it makes have one replica, and each of
// its reads and writes runs on the node that holds it.
func TestDriversRoutedOnCluster(t *testing.T) {
	hosts := useCluster(t)
	upstreams := make([]string, len(hosts))
	for i, h := range hosts {
		upstreams[i] = h + ":9042"
	}
	fp := serveFile(t, fmt.Sprintf(`mode: cluster
upstreams: [%s]
admin: {listen: ""}
routing:
  replicas: true
schema:
  username: %s
  password_env: CQLGUARD_TEST_PASSWORD
`, strings.Join(upstreams, ", "), user), "")
	addr := net.JoinHostPort(proxyHost, fp.port)
	for _, d := range routedDrivers {
		name := d.name
		for _, e := range d.env {
			if v, ok := strings.CutPrefix(e, "CQL_KEYSPACE="); ok {
				name = strings.TrimPrefix(v, "cqlguard_routed_")
			}
		}
		if d.name == "gocql" {
			name = fmt.Sprintf("go_v%d_%s", d.proto, compName(d.comp))
		}
		t.Run(name, func(t *testing.T) {
			if d.more && os.Getenv("CQLGUARD_CLUSTER_DRIVERS") != "1" {
				t.Skip("one of the variants run with CQLGUARD_CLUSTER_DRIVERS=1")
			}
			replica := counterValue(t, fp, "cqlguard_routed_requests_total", "to", "replica")
			fallback := counterValue(t, fp, "cqlguard_routed_requests_total", "to", "fallback")
			start := time.Now()
			if d.name == "gocql" {
				exerciseGocql(t, addr, d.proto, d.comp, "cqlguard_routed_"+name)
			} else {
				runDriver(t, d.name, append([]string{"CQL_PORT=" + fp.port}, d.env...)...)
			}
			replica = counterValue(t, fp, "cqlguard_routed_requests_total", "to", "replica") - replica
			fallback = counterValue(t, fp, "cqlguard_routed_requests_total", "to", "fallback") - fallback
			t.Logf("%s through the routed cqlguard in %v: %.0f requests routed to a replica, %.0f ran on their connection's node (fallback)",
				name, time.Since(start).Round(time.Millisecond), replica, fallback)
			if replica == 0 {
				t.Errorf("no request of %s ran on a replica", name)
			}
		})
	}
}

// compName names compression comp as the keyspaces do.
func compName(comp gocql.Compressor) string {
	if comp == nil {
		return "none"
	}
	return comp.Name()
}
