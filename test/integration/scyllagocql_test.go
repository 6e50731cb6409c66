package integration

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	dto "github.com/prometheus/client_model/go"

	"github.com/cqlguard/cqlguard/schema"
)

// TestScyllaGocqlThroughProxy runs ScyllaDB's gocql fork client
// (test/drivers/scyllagocql) through the proxy: on the protocol version it
// negotiates (v4: it frames v5 as ScyllaDB does, without segments), opted
// in to ScyllaDB's rate-limit error as the fork always is when a server
// advertises it, and, with Snappy compression, without the opt-in (its
// SUPPORTED hides the error). Compressed, the RESULT Prepared the proxy
// marks as conditional is one it decompressed.
func TestScyllaGocqlThroughProxy(t *testing.T) {
	skipUnlessEnabled(t)
	for _, v := range []struct{ name, comp, optIn string }{{"opt-in", "none", "1"}, {"snappy-no-opt-in", "snappy", "0"}} {
		t.Run(v.name, func(t *testing.T) {
			runDriver(t, "scyllagocql", "CQL_COMPRESSION="+v.comp, "CQL_OPT_IN="+v.optIn,
				"CQL_KEYSPACE=cqlguard_scyllagocql_"+v.comp)
		})
	}
}

// scyllaGocqlLimits is the configuration file of the proxy
// TestScyllaGocqlRefusals floods, after its listen line.
const scyllaGocqlLimits = `upstreams: [` + cassandraAddr + `]
admin: {listen: ""}
schema: {username: cassandra, password_env: CQLGUARD_TEST_PASSWORD}
limits:
  algorithm: token-bucket
  keyspaces:
    cqlguard_scyllagocql:
      tables:
        hot: {max_writes_per_second: 5, max_reads_per_second: 5}
`

// TestScyllaGocqlRefusals floods a partition limited to 5 writes and 5
// reads a second with ScyllaDB's gocql fork, with and without the opt-in
// to the rate-limit error, with the driver's defaults (no retry policy,
// statements not idempotent) and with &gocql.SimpleRetryPolicy{NumRetries:
// 0}, and counts what each refusal cost: the requests to the partition the
// proxy received and refused, against the refusals and attempts the
// application saw. With its
// defaults the fork retries a refusal on the next host of the query plan,
// up to 3 times, and on the same host for a statement it takes for a
// lightweight transaction; the proxy is the one host, and its LWT mark
// tells the fork these statements are not conditional, so no
// configuration may send more than one request per statement.
func TestScyllaGocqlRefusals(t *testing.T) {
	skipUnlessEnabled(t)
	const ks, n = "cqlguard_scyllagocql", 50
	fp := serveFile(t, scyllaGocqlLimits, ks)
	s := sessionThrough(t, fp.cfg.Listen, func(c *gocql.ClusterConfig) { c.Timeout = 20 * time.Second },
		"CREATE KEYSPACE IF NOT EXISTS "+ks+" WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
		"CREATE TABLE IF NOT EXISTS "+ks+".hot (k int, c int, PRIMARY KEY (k, c))")
	defer s.Close()
	// The proxy learns of the table from the schema it reloads after the
	// DDL: an inline write, to a partition no flood uses, is pinned once
	// it has.
	waitFor(t, "the proxy to know "+ks+".hot", func() bool {
		if err := s.Query("INSERT INTO " + ks + ".hot (k, c) VALUES (-1, 0)").Exec(); err != nil {
			t.Fatal(err)
		}
		for _, o := range fp.seen.take(ks, "hot") {
			if o.pinned {
				return true
			}
		}
		return false
	})

	// rejections returns how many requests to the hot table the proxy has
	// refused.
	rejections := func(t *testing.T) (n int) {
		eachMetric(t, fp.reg, func(name string, m *dto.Metric) {
			if name == "cqlguard_rate_limit_rejections_total" && label(m, "table") == "hot" && label(m, "outcome") == "rejected" {
				n += int(m.GetCounter().GetValue())
			}
		})
		return n
	}
	// received returns how many reads and writes of partition k of the
	// hot table reached the proxy since the last call, refused or not.
	received := func(k int) (n int) {
		tok := schema.Token(binary.BigEndian.AppendUint32(nil, uint32(k)))
		for _, o := range fp.seen.take(ks, "hot") {
			if o.pinned && len(o.tokens) == 1 && o.tokens[0] == tok {
				n++
			}
		}
		return n
	}
	key := 60
	for _, optIn := range []string{"1", "0"} {
		for _, retry := range []string{"default", "none"} {
			key++
			t.Run(fmt.Sprintf("opt-in=%s/retry=%s", optIn, retry), func(t *testing.T) {
				received(key)
				before := rejections(t)
				out := runDriverScript(t, "scyllagocql", "limits", "CQL_PORT="+fp.port, "CQL_OPT_IN="+optIn,
					"LIMIT_RETRY="+retry, "LIMIT_KEYSPACE="+ks, "LIMIT_KEY="+strconv.Itoa(key), "LIMIT_N="+strconv.Itoa(n))
				var res struct {
					Write, Read struct{ Accepted, Refused, Attempts int }
					Hosts       []string
				}
				decodeLimitsOutput(t, out, "", &res)
				requests, rejected := received(key), rejections(t)-before
				refused := res.Write.Refused + res.Read.Refused
				attempts := res.Write.Attempts + res.Read.Attempts
				t.Logf("%d statements, %d refused; the driver made %d attempts, the proxy received %d requests and refused %d: %.2f requests per refusal",
					2*n, refused, attempts, requests, rejected, float64(requests-(2*n-refused))/float64(refused))
				if requests != attempts {
					t.Errorf("the proxy received %d requests, the driver made %d attempts", requests, attempts)
				}
				if requests != 2*n || rejected != refused {
					t.Errorf("%d requests, %d refused, for %d statements and %d refusals: refusals were retried", requests, rejected, 2*n, refused)
				}
				if len(res.Hosts) != 1 {
					t.Errorf("attempts went to %v, want the proxy alone", res.Hosts)
				}
			})
		}
	}
}
