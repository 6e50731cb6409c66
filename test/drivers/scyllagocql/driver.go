package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gocql/gocql"
)

// runDriver checks, step by step, what a transparent proxy must preserve
// for this driver: it learns of and dials only the proxy; results,
// batches, paging and errors come through unchanged; and it tells
// conditional statements from others, as ScyllaDB's LWT mark says.
// Prints one line per step and a closing "scylla-gocql: N passed, N
// failed" line; stops at the first failure.
//
// Environment: CQL_KEYSPACE (cqlguard_scyllagocql; dropped and recreated),
// EXPECT_HOSTS (comma-separated, default CQL_HOST).
func runDriver() error {
	ks := envOr("CQL_KEYSPACE", "cqlguard_scyllagocql")
	host := envOr("CQL_HOST", "127.0.0.1")
	expect := strings.Split(envOr("EXPECT_HOSTS", host), ",")
	slices.Sort(expect)
	d := &dialer{}
	c, err := newCluster(d)
	if err != nil {
		return err
	}
	learned := &hostRecorder{}
	c.HostFilter = learned
	passed := 0
	// step runs one step; the first that fails ends the process.
	step := func(name string, body func() error) {
		start := time.Now()
		if err := body(); err != nil {
			fmt.Printf("FAIL %s: %v\nscylla-gocql: %d passed, 1 failed\n", name, err, passed)
			os.Exit(1)
		}
		passed++
		fmt.Printf("ok   %s (%.2fs)\n", name, time.Since(start).Seconds())
	}

	var s *gocql.Session
	step("1. connect", func() error {
		s, err = c.CreateSession()
		return err
	})
	defer s.Close()
	exec := func(stmt string, args ...any) error {
		if err := s.Query(stmt, args...).Exec(); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
		return nil
	}

	steps := []struct {
		name string
		body func() error
	}{
		{"2. create keyspace (SimpleStrategy rf 1) and table (composite partition key, clustering column)", func() error {
			for _, stmt := range []string{
				"DROP KEYSPACE IF EXISTS " + ks,
				"CREATE KEYSPACE " + ks + " WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
				"CREATE TABLE " + ks + ".t (a int, b text, c int, v text, PRIMARY KEY ((a, b), c))",
			} {
				if err := exec(stmt); err != nil {
					return err
				}
			}
			return nil
		}},
		{"3. insert and select: inline literals and bound values (prepared)", func() error {
			if err := exec("INSERT INTO " + ks + ".t (a, b, c, v) VALUES (1, 'x', 1, 'inline')"); err != nil {
				return err
			}
			if err := exec("INSERT INTO "+ks+".t (a, b, c, v) VALUES (?, ?, ?, ?)", 1, "x", 2, "bound"); err != nil {
				return err
			}
			var v string
			if err := s.Query("SELECT v FROM " + ks + ".t WHERE a = 1 AND b = 'x' AND c = 1").Scan(&v); err != nil || v != "inline" {
				return fmt.Errorf("inline select: %q, %v", v, err)
			}
			if err := s.Query("SELECT v FROM "+ks+".t WHERE a = ? AND b = ? AND c = ?", 1, "x", 2).Scan(&v); err != nil || v != "bound" {
				return fmt.Errorf("prepared select: %q, %v", v, err)
			}
			return nil
		}},
		{"4. batches, unlogged and logged, read back", func() error {
			for i, typ := range []gocql.BatchType{gocql.UnloggedBatch, gocql.LoggedBatch} {
				b := s.Batch(typ)
				for c := range 5 {
					b.Query("INSERT INTO "+ks+".t (a, b, c, v) VALUES (?, ?, ?, ?)", 2+i, "batch", c, "b"+strconv.Itoa(c))
				}
				if err := b.Exec(); err != nil {
					return fmt.Errorf("batch %v: %w", typ, err)
				}
				var n int
				if err := s.Query("SELECT count(*) FROM "+ks+".t WHERE a = ? AND b = ?", 2+i, "batch").Scan(&n); err != nil || n != 5 {
					return fmt.Errorf("batch %v read back %d rows, %v", typ, n, err)
				}
			}
			return nil
		}},
		{"5. paging: 2000 rows in one partition, page size 300", func() error {
			const rows = 2000
			if err := parallel(rows, 16, func(c int) error {
				return exec("INSERT INTO "+ks+".t (a, b, c, v) VALUES (?, ?, ?, ?)", 9, "paged", c, "p")
			}); err != nil {
				return err
			}
			iter := s.Query("SELECT c FROM "+ks+".t WHERE a = ? AND b = ?", 9, "paged").PageSize(300).Iter()
			var c, got int
			for iter.Scan(&c) {
				if c != got {
					return fmt.Errorf("row %d has c=%d", got, c)
				}
				got++
			}
			if err := iter.Close(); err != nil || got != rows {
				return fmt.Errorf("%d of %d rows, %v", got, rows, err)
			}
			return nil
		}},
		{"6. conditional statements are LWT to the driver, others are not", func() error {
			for _, tt := range []struct {
				stmt    string
				lwt     bool
				applied bool
			}{
				{"INSERT INTO " + ks + ".t (a, b, c, v) VALUES (?, ?, ?, ?) IF NOT EXISTS", true, true},
				{"INSERT INTO " + ks + ".t (a, b, c, v) VALUES (?, ?, ?, ?) IF NOT EXISTS", true, false},
				{"INSERT INTO " + ks + ".t (a, b, c, v) VALUES (?, ?, ?, ?)", false, false},
			} {
				q := s.Query(tt.stmt, 4, "lwt", 1, "v")
				if tt.lwt {
					applied, err := q.MapScanCAS(map[string]any{})
					if err != nil || applied != tt.applied {
						return fmt.Errorf("%s: applied %v, %v; want %v", tt.stmt, applied, err, tt.applied)
					}
				} else if err := q.Exec(); err != nil {
					return fmt.Errorf("%s: %w", tt.stmt, err)
				}
				if q.IsLWT() != tt.lwt {
					return fmt.Errorf("%s: IsLWT %v, want %v", tt.stmt, q.IsLWT(), tt.lwt)
				}
			}
			return nil
		}},
		{"7. errors reach the driver unchanged", func() error {
			for _, tt := range []struct {
				stmt string
				code int
				text string
			}{
				{"SELECT * FROM " + ks + ".missing_table", 0x2200, "missing_table"},
				{"SELEC nonsense", 0x2000, ""},
			} {
				err := s.Query(tt.stmt).Exec()
				var se serverError
				if !errors.As(err, &se) || se.GetCode() != tt.code || !strings.Contains(se.GetMessage(), tt.text) {
					return fmt.Errorf("%s: %v; want error %#x mentioning %q", tt.stmt, err, tt.code, tt.text)
				}
			}
			return nil
		}},
		{"8. drop keyspace; the driver learned of and dialed EXPECT_HOSTS only", func() error {
			if err := exec("DROP KEYSPACE " + ks); err != nil {
				return err
			}
			if got := learned.seen(); !slices.Equal(got, expect) {
				return fmt.Errorf("learned of hosts %v, want %v", got, expect)
			}
			want := []string{net.JoinHostPort(host, strconv.Itoa(c.Port))}
			if got := d.dialed(); !slices.Equal(got, want) {
				return fmt.Errorf("dialed %v, want %v", got, want)
			}
			return nil
		}},
	}
	for _, st := range steps {
		step(st.name, st.body)
	}
	fmt.Printf("scylla-gocql: %d passed, 0 failed\n", passed)
	return nil
}

// parallel runs fn(0) to fn(n-1) on workers goroutines, and returns the
// first error.
func parallel(n, workers int, fn func(int) error) error {
	work := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := fn(i); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	return <-errs
}

// hostRecorder is a host filter that remembers every host the driver
// learned of, and lets them all through.
type hostRecorder struct {
	mu    sync.Mutex
	hosts []string
}

func (h *hostRecorder) Accept(host *gocql.HostInfo) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hosts = append(h.hosts, host.ConnectAddress().String())
	return true
}

func (h *hostRecorder) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := slices.Clone(h.hosts)
	slices.Sort(out)
	return slices.Compact(out)
}
