package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	dto "github.com/prometheus/client_model/go"
)

// shedConfig is the shedding proxy's configuration file, after its listen
// line. Connections from 127.0.0.3 are of class critical, tier 0, never
// shed; every other one is of class batch, tier 5. Two requests at most
// wait for Cassandra (max_in_flight), so that a flood of critical reads
// keeps the rest waiting inside the proxy: a queue that stands over a
// target of 50 µs for an interval of 100 ms sheds batch's requests
// entirely within a rise of 200 ms. The fall of ten years keeps them shed
// through an interval in which some request did not wait, which happens
// when a slot comes free as a connection reads its next request: such an
// update gives back 50 ms over ten years, 2e-10 of a tier, and the next
// standing interval takes it again. Connections from 127.0.0.4 are of
// class primer, tier 4: shedding counts only the tiers that send requests,
// and the primer's few keep one in use that tier 5, unused between
// drivers, is shed like. The test is of what drivers do with a shed
// request, not of how the controller moves.
const shedConfig = `upstreams: [` + cassandraAddr + `]
admin: {listen: ""}
schema: {username: cassandra, password_env: CQLGUARD_TEST_PASSWORD}
max_in_flight: 2
clients:
  classes:
    - {name: critical, tier: 0, match: {addresses: [` + shedCriticalHost + `/32]}}
    - {name: primer, tier: 4, match: {addresses: [` + shedPrimerHost + `/32]}}
  default: {name: batch, tier: 5}
shedding: {enabled: true, queue_target: 50us, queue_interval: 100ms, rise: 200ms, fall: 87600h, update_every: 50ms}
`

const (
	shedCriticalHost = "127.0.0.3"
	shedPrimerHost   = "127.0.0.4"
	shedKeyspace     = "cqlguard_shed"
	shedTable        = "bulk" // the batch class's; batch is a CQL keyword
	shedTier         = 5
	// shedFlooders is how many critical reads are in flight at once: many
	// times max_in_flight.
	shedFlooders = 32
	// shedCriticalRows is how many rows each critical read counts: several
	// milliseconds of Cassandra's time, so that an interval holds few
	// takings of a slot, and each waited. With point reads, thousands a
	// second, some request of every interval takes a slot just given back
	// or waits less than the target, and the queue never stands (none of
	// 78 intervals sampled over 8 s; with this partition, 61).
	shedCriticalRows = 10000
)

// shedRun is what one driver did in its flood of the shedding proxy, in
// the limits clients' JSON.
type shedRun struct {
	Write, Read struct{ Accepted, Refused int }
	// RetryConsulted counts the times the driver asked its retry policy,
	// and RetryDecisions the times that policy, the driver's default,
	// decided to retry.
	RetryConsulted int `json:"retry_consulted"`
	RetryDecisions int `json:"retry_decisions"`
	// Surfaced is what the driver raised for each shed request.
	Surfaced string
	Seconds  float64
}

// shedCounts are the shedding proxy's counters of the batch class.
type shedCounts struct {
	requests int // cqlguard_client_requests_total{class="batch"}
	shed     int // cqlguard_shed_requests_total{tier="5",outcome="shed"}
	shedTop  int // cqlguard_shed_requests_total{tier="0",outcome="shed"}
}

// TestShedDrivers sheds every request of each driver in turn, from the
// class batch (tier 5), while a flood of critical reads (tier 0) through a
// proxy that lets two requests at a time reach Cassandra keeps its queue
// standing: gocql, the DataStax and ScyllaDB Python drivers, the Java
// driver, ScyllaDB's Rust driver and the Node.js driver, each with its
// default retry policy and statements it does not take for idempotent.
// Every write and read must fail with Overloaded carrying cqlguard's
// message, as the driver surfaces it; the proxy must have counted every
// request the driver sent as shed and forwarded none; and the requests the
// proxy saw beyond those the driver was asked for, its retries, must be
// what its default policy does with the one host a proxy advertises.
// Tier 0 must never be shed.
func TestShedDrivers(t *testing.T) {
	skipUnlessEnabled(t)
	fp := serveFile(t, shedConfig, shedKeyspace)
	cfg, port, reg, seen := fp.cfg, fp.port, fp.reg, fp.seen

	// The schema is made by the critical class: a batch connection's DDL
	// could be shed once the flood runs.
	critical := sessionThrough(t, cfg.Listen, func(c *gocql.ClusterConfig) {
		c.Timeout = 20 * time.Second
		c.NumConns = 4
		c.Dialer = &net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(shedCriticalHost)}}
	},
		"CREATE KEYSPACE IF NOT EXISTS "+shedKeyspace+" WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
		"CREATE TABLE IF NOT EXISTS "+shedKeyspace+".critical (k int, c int, PRIMARY KEY (k, c))",
		"CREATE TABLE IF NOT EXISTS "+shedKeyspace+"."+shedTable+" (k int, c int, PRIMARY KEY (k, c))",
	)
	defer critical.Close()
	// The critical reads count a partition of shedCriticalRows rows: work
	// for Cassandra, little for the proxy and the client.
	for lo := 0; lo < shedCriticalRows; lo += 100 {
		b := critical.Batch(gocql.UnloggedBatch)
		for c := lo; c < min(lo+100, shedCriticalRows); c++ {
			b.Query("INSERT INTO "+shedKeyspace+".critical (k, c) VALUES (0, ?)", c)
		}
		if err := b.Exec(); err != nil {
			t.Fatalf("filling the critical partition: %v", err)
		}
	}

	// The flood: counts, as many at once as shedFlooders, until the test
	// ends. None may fail.
	var (
		floodReads, floodErrors atomic.Int64
		floodErr                atomic.Value
		wg                      sync.WaitGroup
	)
	ctx, stopFlood := context.WithCancel(context.Background())
	for range shedFlooders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := critical.Query("SELECT count(*) FROM " + shedKeyspace + ".critical WHERE k = 0").Exec(); err != nil {
					floodErrors.Add(1)
					floodErr.CompareAndSwap(nil, err.Error())
					continue
				}
				floodReads.Add(1)
			}
		}()
	}
	// The primer: a read every 20 ms from tier 4, shed or not, so that a
	// tier that tier 5 is shed like is in use before any driver runs.
	primer := sessionThrough(t, cfg.Listen, func(c *gocql.ClusterConfig) {
		c.Timeout = 20 * time.Second
		c.Dialer = &net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(shedPrimerHost)}}
	})
	defer primer.Close()
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil {
			primer.Query("SELECT c FROM " + shedKeyspace + ".critical WHERE k = 1 LIMIT 1").Exec()
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
	}()
	floodStart := time.Now()
	defer func() {
		stopFlood()
		wg.Wait()
		elapsed := time.Since(floodStart).Seconds()
		t.Logf("critical flood: %d reads in %.1f s (%.0f/s), %d failed", floodReads.Load(), elapsed, float64(floodReads.Load())/elapsed, floodErrors.Load())
		if n := floodErrors.Load(); n != 0 {
			t.Errorf("%d critical reads failed, first: %v", n, floodErr.Load())
		}
	}()

	// gather reads the registry: the batch class's counters, and the
	// fraction of tier 5 being shed with the queue's shortest wait.
	gather := func(t *testing.T) (c shedCounts, fraction, standing float64) {
		t.Helper()
		eachMetric(t, reg, func(name string, m *dto.Metric) {
			switch name {
			case "cqlguard_client_requests_total":
				if label(m, "class") == "batch" {
					c.requests = int(m.GetCounter().GetValue())
				}
			case "cqlguard_shed_requests_total":
				if label(m, "outcome") != "shed" {
					return
				}
				switch label(m, "tier") {
				case strconv.Itoa(shedTier):
					c.shed = int(m.GetCounter().GetValue())
				case "0":
					c.shedTop = int(m.GetCounter().GetValue())
				}
			case "cqlguard_shed_fraction":
				if label(m, "tier") == strconv.Itoa(shedTier) {
					fraction = m.GetGauge().GetValue()
				}
			case "cqlguard_shed_queue_standing_seconds":
				standing = m.GetGauge().GetValue()
			}
		})
		return c, fraction, standing
	}

	// Shedding must reach all of tier 5 before any driver runs.
	waitStart := time.Now()
	for {
		_, fraction, standing := gather(t)
		if fraction == 1 {
			t.Logf("tier %d shed entirely %.2f s into the flood (shortest wait in the queue's last interval %v)",
				shedTier, time.Since(waitStart).Seconds(), time.Duration(standing*1e9))
			break
		}
		if time.Since(waitStart) > 30*time.Second {
			t.Fatalf("after 30 s of flood, tier %d's shed fraction is %v (shortest wait in the queue's last interval %v)",
				shedTier, fraction, time.Duration(standing*1e9))
		}
		time.Sleep(50 * time.Millisecond)
	}

	// forwarded returns how many reads and writes of the bulk table the
	// proxy let through since the last call: the observer sees no request
	// that was shed.
	forwarded := func() int { return seen.takeForwarded(shedKeyspace, shedTable) }
	// delta runs f and returns the batch class's counters' change.
	delta := func(t *testing.T, f func()) shedCounts {
		t.Helper()
		forwarded()
		c0, _, _ := gather(t)
		f()
		c1, fraction, _ := gather(t)
		if fraction < 1-1e-6 {
			t.Errorf("tier %d's shed fraction fell to %v", shedTier, fraction)
		}
		return shedCounts{requests: c1.requests - c0.requests, shed: c1.shed - c0.shed, shedTop: c1.shedTop - c0.shedTop}
	}
	// check compares what a driver reports of its n writes and n reads
	// with what the proxy counted meanwhile, and with what the driver is
	// expected to surface and to retry.
	const n = 50
	check := func(t *testing.T, res shedRun, c shedCounts, surfaced string, consulted, retries int) {
		t.Helper()
		if res.Write.Accepted != 0 || res.Read.Accepted != 0 || res.Write.Refused != n || res.Read.Refused != n {
			t.Errorf("%+v: want all %d writes and %d reads refused", res, n, n)
		}
		if res.Surfaced != surfaced {
			t.Errorf("a shed request surfaced as %s; want %s", res.Surfaced, surfaced)
		}
		if res.RetryConsulted != consulted || res.RetryDecisions != retries {
			t.Errorf("the retry policy was consulted %d times and decided %d retries; want %d and %d",
				res.RetryConsulted, res.RetryDecisions, consulted, retries)
		}
		// A retry decision on the proxy's one host finds no next host: the
		// driver sends no request more than it was asked for.
		if c.requests != 2*n {
			t.Errorf("the proxy saw %d requests of class batch for %d: %d retried", c.requests, 2*n, c.requests-2*n)
		}
		if c.shed != c.requests {
			t.Errorf("the proxy shed %d requests of tier %d for %d seen", c.shed, shedTier, c.requests)
		}
		if c.shedTop != 0 {
			t.Errorf("the proxy shed %d requests of tier 0", c.shedTop)
		}
		if got := forwarded(); got != 0 {
			t.Errorf("the proxy forwarded %d requests of the %s table", got, shedTable)
		}
		t.Logf("%d writes and %d reads refused in %.2f s, surfaced as %s; retry policy consulted %d times, %d retries decided; the proxy saw %d requests of class batch (%d retried) and shed %d",
			res.Write.Refused, res.Read.Refused, res.Seconds, res.Surfaced, res.RetryConsulted, res.RetryDecisions,
			c.requests, c.requests-2*n, c.shed)
	}
	want := fmt.Sprintf("cqlguard: request shed, tier %d, while the node %s is slow (shedding); retry later", shedTier, cassandraAddr)

	t.Run("gocql", func(t *testing.T) {
		// gocql's default is no retry policy; it would consult one only
		// for idempotent queries, which by default these are not.
		s, retry := countingSession(t, cfg.Listen)
		var res shedRun
		c := delta(t, func() {
			res.Seconds = floodGocql(t, s, shedKeyspace+"."+shedTable, n, &res.Write, &res.Read, func(op string, err error) bool {
				var over *gocql.RequestErrOverloaded
				if !errors.As(err, &over) || over.Code() != gocql.ErrCodeOverloaded || over.Message() != want {
					return false
				}
				if got := fmt.Sprintf("%T", err); res.Surfaced == "" {
					res.Surfaced = got
				} else if got != res.Surfaced {
					t.Errorf("%s: refused with %s, and earlier %s", op, got, res.Surfaced)
				}
				return true
			}, "*gocql.RequestErrOverloaded: "+want)
		})
		res.RetryConsulted = int(retry.consulted.Load())
		check(t, res, c, "*gocql.RequestErrOverloaded", 0, 0)
	})

	// The other drivers run their limits client, which sends n writes and
	// n reads to its own partition with the driver's default retry policy
	// (LIMIT_EXPECT=shed), checks each refusal is Overloaded with the shed
	// message as its driver raises it, and prints a JSON line of what was
	// refused, how, and what its retry policy decided.
	// What each driver raises, and what its default retry policy is asked
	// (consulted) and decides (retries) for the 2n requests.
	expect := map[string]struct {
		surfaced           string
		consulted, retries int
	}{
		// The Python drivers retry Overloaded on the next host whatever
		// the statement; there is none.
		"python-datastax": {"NoHostAvailable(OverloadedErrorMessage)", 2 * n, 2 * n},
		"python-scylla":   {"NoHostAvailable(OverloadedErrorMessage)", 2 * n, 2 * n},
		// The Java and Node.js drivers ask their policy only about
		// idempotent statements.
		"java": {"OverloadedException", 0, 0},
		// The Rust driver asks its policy about every error; the default
		// retries Overloaded only for idempotent statements.
		"rust": {"LastAttemptError(DbError(Overloaded))", 2 * n, 0},
		"node": {"ResponseError", 0, 0},
	}
	for _, d := range limitsClients {
		e, ok := expect[d.name]
		if !ok {
			t.Fatalf("%s: no expectation for its driver", d.name)
		}
		t.Run(d.name, func(t *testing.T) {
			env := append([]string{
				"CQL_PORT=" + port, "LIMIT_EXPECT=shed", "LIMIT_TIER=" + strconv.Itoa(shedTier), "LIMIT_NODE=" + cassandraAddr,
				"LIMIT_KEYSPACE=" + shedKeyspace, "LIMIT_TABLE=" + shedTable,
				"LIMIT_KEY=" + strconv.Itoa(d.key), "LIMIT_N=" + strconv.Itoa(n),
			}, d.env...)
			var out string
			c := delta(t, func() { out = runDriverScript(t, d.dir, d.script, env...) })
			var res shedRun
			decodeLimitsOutput(t, out, want, &res)
			check(t, res, c, e.surfaced, e.consulted, e.retries)
		})
	}
}
