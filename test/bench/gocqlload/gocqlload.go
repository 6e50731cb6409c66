// Package gocqlload loads a CQL node or proxy through gocql, as an
// application does: goroutines sharing one session each wait for their
// request's answer before sending the next, so that every request pays the
// driver's and the server's wake-ups and system calls, which the pipelining
// load generator (package load) spreads over many requests.
//
// The workload is one: prepared point reads, SELECT v FROM keyspace.table
// WHERE k = ?, of keys drawn uniformly, over protocol v4, saturating or at
// a fixed rate.
package gocqlload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/cqlguard/cqlguard/test/load"
)

// Spec is one run's load.
type Spec struct {
	// Addr is the node or proxy, host:port; the driver looks for no other.
	Addr string
	// Keyspace and Table name the table read, (k bigint PRIMARY KEY, v
	// blob); Keys is how many keys are drawn from.
	Keyspace, Table string
	Keys            uint64
	// Conns is the driver's connections to Addr (NumConns), Concurrency
	// the requests in flight over all of them: one goroutine each.
	Conns, Concurrency int
	// Rate is requests per second over all goroutines; 0 sends as fast as
	// the concurrency allows.
	Rate float64
	// NoCoalesce turns off the driver's write coalescing
	// (WriteCoalesceWaitTime 0): each request is its own write instead of
	// waiting up to 200 µs for others to join it.
	NoCoalesce bool
	// Warmup is the start of the run left out of the summary, Duration
	// what follows it.
	Warmup, Duration time.Duration
}

// DefaultSpec is the benchmark's load: bench.kv over a million keys, 4
// connections, 64 requests in flight, saturating, 1 s warmup and 5 s
// measured.
func DefaultSpec() Spec {
	return Spec{Keyspace: "bench", Table: "kv", Keys: 1_000_000, Conns: 4, Concurrency: 64,
		Warmup: time.Second, Duration: 5 * time.Second}
}

// maxErrors bounds the distinct error messages a summary keeps.
const maxErrors = 10

// Run opens a session on spec.Addr, loads it for spec.Warmup plus
// spec.Duration, and summarizes the requests sent in the measured part
// (load.Summary; Errors holds the distinct request errors). At a fixed
// rate, a request that waited for a free goroutine counts its latency from
// when it was due, as package load counts one that waited for a stream.
func Run(ctx context.Context, spec Spec) (load.Summary, error) {
	var sum load.Summary
	if spec.Addr == "" || spec.Conns < 1 || spec.Concurrency < 1 || spec.Keys < 1 || spec.Duration <= 0 || spec.Warmup < 0 || spec.Rate < 0 {
		return sum, fmt.Errorf("gocqlload: bad spec %+v", spec)
	}
	c := gocql.NewCluster(spec.Addr)
	c.ProtoVersion = 4
	c.NumConns = spec.Conns
	c.Consistency = gocql.One
	// One host, the one given: behind a proxy, the addresses the node
	// reports are not the ones to dial.
	c.DisableInitialHostLookup = true
	c.Timeout, c.ConnectTimeout = 10*time.Second, 10*time.Second
	if spec.NoCoalesce {
		c.WriteCoalesceWaitTime = 0
	}
	session, err := c.CreateSession()
	if err != nil {
		return sum, fmt.Errorf("gocqlload: session on %s: %w", spec.Addr, err)
	}
	defer session.Close()
	stmt := fmt.Sprintf("SELECT v FROM %s.%s WHERE k = ?", spec.Keyspace, spec.Table)
	// Prepare before the clock starts, on the first connection the pool
	// has; the others prepare on their first use, in the warmup.
	if err := session.Query(stmt, int64(0)).ExecContext(ctx); err != nil {
		return sum, fmt.Errorf("gocqlload: %s: %w", stmt, err)
	}

	start := time.Now()
	from, to := start.Add(spec.Warmup), start.Add(spec.Warmup+spec.Duration)
	var ticket atomic.Int64
	var interval time.Duration
	if spec.Rate > 0 {
		interval = time.Duration(float64(time.Second) / spec.Rate)
	}
	workers := make([]*worker, spec.Concurrency)
	var wg sync.WaitGroup
	for i := range workers {
		w := &worker{lat: load.NewLatencies(), rng: rand.New(rand.NewPCG(uint64(i), uint64(start.UnixNano())))}
		workers[i] = w
		wg.Go(func() {
			for ctx.Err() == nil {
				// The latency counts from when the request was due if it
				// was late because every goroutine was busy, and from when
				// it was sent if its goroutine slept until it: a timer that
				// wakes late is the loader's delay, not the server's.
				now := time.Now()
				due, sent := now, now
				if interval > 0 {
					due = start.Add(time.Duration(ticket.Add(1)-1) * interval)
					if !due.Before(to) {
						return
					}
					if now.Before(due) {
						if !load.SleepUntil(ctx, due) {
							return
						}
						sent = time.Now()
					} else {
						sent = due
					}
				} else if !now.Before(to) {
					return
				}
				var v []byte
				err := session.Query(stmt, int64(w.rng.Uint64N(spec.Keys))).ScanContext(ctx, &v)
				if due.Before(from) {
					continue
				}
				w.record(time.Since(sent), err)
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return sum, err
	}

	total := load.NewLatencies()
	sum.Loader = "gocql"
	for _, w := range workers {
		total.Merge(w.lat)
		sum.Succeeded += w.ok
		sum.Failed += w.failed
		for msg, n := range w.errors {
			if sum.Errors == nil {
				sum.Errors = map[string]int{}
			}
			if _, ok := sum.Errors[msg]; ok || len(sum.Errors) < maxErrors {
				sum.Errors[msg] += n
			}
		}
	}
	sum.Attempted = sum.Answered()
	sum.Seconds = spec.Duration.Seconds()
	sum.Rate = float64(sum.Answered()) / sum.Seconds
	sum.P50, sum.P90, sum.P99, sum.P999 = total.Percentile(50), total.Percentile(90), total.Percentile(99), total.Percentile(99.9)
	sum.Max, sum.Mean = total.Max(), total.Mean()
	if sum.Answered() == 0 {
		return sum, errors.New("gocqlload: no request answered in the measured time")
	}
	return sum, nil
}

// worker is one goroutine's share of the summary.
type worker struct {
	rng        *rand.Rand
	lat        *load.Latencies
	ok, failed uint64
	errors     map[string]int
}

func (w *worker) record(d time.Duration, err error) {
	if err == nil {
		w.ok++
		w.lat.Record(d)
		return
	}
	w.failed++
	if w.errors == nil {
		w.errors = map[string]int{}
	}
	if _, ok := w.errors[err.Error()]; ok || len(w.errors) < maxErrors {
		w.errors[err.Error()]++
	}
}
