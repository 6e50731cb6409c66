package integration

// Routing on the three-node cluster: through cqlguard in cluster mode, a
// table at replication factor 1 has each request coordinated by the node
// that owns its partition when cqlguard routes (routing.replicas), and
// about a third when every connection is pinned to the node it was opened
// to, as measured by the nodes' own counters (test/cluster).

import (
	"context"
	"fmt"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	dto "github.com/prometheus/client_model/go"

	"github.com/cqlguard/cqlguard/test/cluster"
)

func TestRoutedToReplicas(t *testing.T) {
	hosts := useCluster(t)
	const ks = "cqlguard_routing"
	table := cluster.Table{Keyspace: ks, Name: "kv"}
	auth := gocql.PasswordAuthenticator{Username: user, Password: password}
	clusterKeyspace(t, hosts, ks, 1)

	for _, tc := range []struct {
		name             string
		routed           bool
		minShare, maxShr float64
	}{
		{"pinned", false, 0.2, 0.45},
		{"routed", true, 0.99, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fp := serveFile(t, fmt.Sprintf(`mode: cluster
upstreams: [%s:9042]
routing:
  replicas: %t
schema:
  username: %s
  password_env: CQLGUARD_TEST_PASSWORD
`, hosts[0], tc.routed, user), ks)
			addr := "127.0.0.1:" + fp.port
			s := sessionThrough(t, addr, func(c *gocql.ClusterConfig) {
				c.NumConns = 2
				c.Timeout = 30 * time.Second
			})
			defer s.Close()
			if tc.routed {
				waitRouted(t, s, fp, table.String())
			}
			r, err := cluster.NewReader(auth, hosts...)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			ctx := context.Background()
			before, err := r.Snapshot(ctx, ks)
			if err != nil {
				t.Fatal(err)
			}
			const n = 3000
			start := time.Now()
			if err := readWrite(s, table.String(), n); err != nil {
				t.Fatal(err)
			}
			elapsed := time.Since(start)
			after, err := r.Snapshot(ctx, ks)
			if err != nil {
				t.Fatal(err)
			}
			d := after.Since(before)
			for _, h := range hosts {
				c := d[h].Tables[table]
				t.Logf("%s: coordinated %d reads, %d writes; served %d reads, %d writes; %d peer responses",
					h, c.CoordinatorReads, c.CoordinatorWrites, c.LocalReads, c.LocalWrites, d[h].PeerResponses)
			}
			share := d.ReplicaShare()
			t.Logf("%d writes and %d reads through cqlguard in %v: %.2f%% coordinated by the replica", n, n, elapsed.Round(time.Millisecond), 100*share)
			if share < tc.minShare || share > tc.maxShr {
				t.Errorf("%.2f%% coordinated by the replica, want %.0f%% to %.0f%%", 100*share, 100*tc.minShare, 100*tc.maxShr)
			}
		})
	}
}

// waitRouted reads table through s until fp's proxy has routed a request
// to a replica: it reads the cluster's ring in the background after it
// starts.
func waitRouted(t *testing.T, s *gocql.Session, fp *fileProxy, table string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		var v int
		err := s.Query("SELECT v FROM " + table + " WHERE k = 1").Scan(&v)
		if err != nil && err != gocql.ErrNotFound {
			t.Fatal(err)
		}
		if counterValue(t, fp, "cqlguard_routed_requests_total", "to", "replica") > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no request routed to a replica within 30s: the ring was not read")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// counterValue returns the value of fp's counter name whose label has
// value, 0 if there is none.
func counterValue(t *testing.T, fp *fileProxy, name, labelName, value string) float64 {
	t.Helper()
	var v float64
	eachMetric(t, fp.reg, func(n string, m *dto.Metric) {
		if n == name && label(m, labelName) == value {
			v = m.GetCounter().GetValue()
		}
	})
	return v
}
