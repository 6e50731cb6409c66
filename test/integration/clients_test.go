package integration

import (
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	dto "github.com/prometheus/client_model/go"
)

// clientsConfig is the budget proxy's configuration file, after its listen
// line: no partition limits, and the connections of user cassandra, as
// each driver authenticates through the proxy (SASL PLAIN), of class
// flood, whose budget of 5 request units a second, at 1 unit a request,
// admits 5 requests a second after a burst of 5: few enough that a driver
// slowed by a busy machine still floods it. A driver whose user the proxy
// did not read would be of the default class, without a budget, and never
// refused.
const clientsConfig = `upstreams: [127.0.0.2:9042]
admin: {listen: ""}
schema: {username: cassandra, password_env: CQLGUARD_TEST_PASSWORD}
clients:
  classes:
    - {name: flood, match: {users: [cassandra]}, max_units_per_second: 5}
request_units: {fixed: 1, per_row: 0, per_kib: 0, per_ms: 0}
`

const (
	budgetClass    = "flood"
	budgetPerSec   = 5
	budgetKeyspace = "cqlguard_clients"
	budgetTable    = "flood"
)

// budgetRun is what one driver did in a flood of the budget proxy, in the
// limits clients' JSON.
type budgetRun struct {
	Write, Read struct{ Accepted, Refused int }
	// RetryDecisions counts the retries the driver made or, for the Rust
	// driver, that its default policy would have made.
	RetryDecisions int `json:"retry_decisions"`
	Seconds        float64
}

// countingRetryPolicy is gocql's retry policy for the floods: it counts
// each time gocql consults it and never retries.
type countingRetryPolicy struct{ consulted atomic.Int64 }

func (p *countingRetryPolicy) Attempt(gocql.RetryableQuery) bool {
	p.consulted.Add(1)
	return false
}

func (p *countingRetryPolicy) GetRetryType(error) gocql.RetryType {
	p.consulted.Add(1)
	return gocql.Rethrow
}

// countingSession returns a gocql session through addr whose retry policy
// counts how often it is consulted, closed when the test ends.
func countingSession(t *testing.T, addr string) (*gocql.Session, *countingRetryPolicy) {
	t.Helper()
	retry := &countingRetryPolicy{}
	s := sessionThrough(t, addr, func(c *gocql.ClusterConfig) {
		c.Timeout = 20 * time.Second
		c.RetryPolicy = retry
	})
	t.Cleanup(s.Close)
	return s, retry
}

// TestClassBudgetEnforced floods a proxy whose client class flood, the
// connections authenticated as user cassandra, has a budget of 5 requests
// a second, with writes and then reads from
// each driver in turn: gocql, the DataStax and ScyllaDB Python drivers,
// the Java driver, ScyllaDB's Rust driver and the Node.js driver. Every
// refusal must be Config_error as the driver raises it, naming the class;
// no driver may retry one: the proxy must have seen, in
// cqlguard_client_requests_total, exactly the requests the client made,
// and refused in cqlguard_client_budget_refusals_total those the client saw
// refused.
func TestClassBudgetEnforced(t *testing.T) {
	skipUnlessEnabled(t)
	fp := serveFile(t, clientsConfig, budgetKeyspace)
	cfg, port, reg, seen := fp.cfg, fp.port, fp.reg, fp.seen
	setup := sessionThrough(t, cfg.Listen, func(c *gocql.ClusterConfig) { c.Timeout = 20 * time.Second },
		"CREATE KEYSPACE IF NOT EXISTS "+budgetKeyspace+" WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
		"CREATE TABLE IF NOT EXISTS "+budgetKeyspace+"."+budgetTable+" (k int, c int, PRIMARY KEY (k, c))",
	)
	setup.Close()

	// counters returns the class's requests and budget refusals so far.
	counters := func(t *testing.T) (requests, refusals int) {
		t.Helper()
		eachMetric(t, reg, func(name string, m *dto.Metric) {
			if label(m, "class") != budgetClass {
				return
			}
			switch name {
			case "cqlguard_client_requests_total":
				requests = int(m.GetCounter().GetValue())
			case "cqlguard_client_budget_refusals_total":
				refusals = int(m.GetCounter().GetValue())
			}
		})
		return requests, refusals
	}
	// forwarded returns how many reads and writes of the table the proxy
	// let through since the last call: the observer sees no request the
	// budget refused.
	forwarded := func() int { return seen.takeForwarded(budgetKeyspace, budgetTable) }
	// check compares what a driver reports of its flood of n writes and n
	// reads with what the proxy counted meanwhile.
	const n = 100
	check := func(t *testing.T, res budgetRun, requests, refusals int) {
		t.Helper()
		if res.Write.Accepted+res.Write.Refused != n || res.Read.Accepted+res.Read.Refused != n {
			t.Errorf("%+v: want %d writes and %d reads", res, n, n)
		}
		if res.Write.Refused == 0 || res.Read.Refused == 0 || res.Write.Accepted == 0 {
			t.Errorf("%+v: want writes accepted, and writes and reads refused", res)
		}
		// A bucket of 1 s admits a sequential client while it is not in
		// debt: its burst, what it earns meanwhile, and the request that
		// takes it into debt.
		accepted := res.Write.Accepted + res.Read.Accepted
		if most := budgetPerSec + int(budgetPerSec*res.Seconds) + 2; accepted > most {
			t.Errorf("%d requests accepted in %.2f s; want at most %d", accepted, res.Seconds, most)
		}
		if res.RetryDecisions != 0 {
			t.Errorf("%d retry decisions; want none", res.RetryDecisions)
		}
		if requests != 2*n {
			t.Errorf("the proxy saw %d requests of class %s for %d: refusals were retried", requests, budgetClass, 2*n)
		}
		if refused := res.Write.Refused + res.Read.Refused; refusals != refused {
			t.Errorf("the proxy refused %d requests for the budget, the driver saw %d refused", refusals, refused)
		}
		if got := forwarded(); got != accepted {
			t.Errorf("the proxy forwarded %d requests, the driver saw %d accepted", got, accepted)
		}
		t.Logf("%d writes and %d reads: %d and %d accepted, %d and %d refused in %.2f s; %d retry decisions; the proxy saw %d requests of class %s and refused %d",
			n, n, res.Write.Accepted, res.Read.Accepted, res.Write.Refused, res.Read.Refused, res.Seconds,
			res.RetryDecisions, requests, budgetClass, refusals)
	}
	// delta runs f and returns the class's requests and refusals it made.
	delta := func(t *testing.T, f func()) (requests, refusals int) {
		t.Helper()
		forwarded()
		req0, ref0 := counters(t)
		f()
		req1, ref1 := counters(t)
		return req1 - req0, ref1 - ref0
	}
	want := "cqlguard: client class " + budgetClass + " is over its budget of " + strconv.Itoa(budgetPerSec) +
		" request units per second (clients: max_units_per_second); retry later"

	t.Run("gocql", func(t *testing.T) {
		// gocql consults its retry policy only for idempotent queries,
		// which by default these are not: the policy must not be asked.
		s, retry := countingSession(t, cfg.Listen)
		var res budgetRun
		requests, refusals := delta(t, func() {
			res.Seconds = floodGocql(t, s, budgetKeyspace+"."+budgetTable, n, &res.Write, &res.Read, func(_ string, err error) bool {
				var cfgErr *gocql.RequestErrConfig
				return errors.As(err, &cfgErr) && cfgErr.Message() == want
			}, "*gocql.RequestErrConfig: "+want)
		})
		res.RetryDecisions = int(retry.consulted.Load())
		check(t, res, requests, refusals)
	})

	// The other drivers run their limits client, which floods a partition
	// with writes and then reads, checks each refusal is the Config_error
	// its driver raises for the class (LIMIT_EXPECT=class_budget), and
	// prints a JSON line of what was accepted and refused.
	for _, d := range limitsClients {
		t.Run(d.name, func(t *testing.T) {
			env := append([]string{
				"CQL_PORT=" + port, "LIMIT_EXPECT=class_budget", "LIMIT_CLASS=" + budgetClass,
				"LIMIT_KEYSPACE=" + budgetKeyspace, "LIMIT_TABLE=" + budgetTable,
				"LIMIT_KEY=" + strconv.Itoa(d.key), "LIMIT_N=" + strconv.Itoa(n),
			}, d.env...)
			var out string
			requests, refusals := delta(t, func() { out = runDriverScript(t, d.dir, d.script, env...) })
			var res budgetRun
			decodeLimitsOutput(t, out, want, &res)
			check(t, res, requests, refusals)
		})
	}
}
