// Command demo runs a short workload through cqlguard: many clients reading
// and writing uniformly spread partitions, and a few hammering one hot
// partition. It prints per-second outcomes and the proxy's own counts.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

func main() {
	proxyAddr := flag.String("proxy", "127.0.0.1:9042", "cqlguard address")
	admin := flag.String("admin", "http://127.0.0.1:9180", "cqlguard admin URL")
	seconds := flag.Int("seconds", 10, "how long to run")
	flag.Parse()
	if err := run(*proxyAddr, *admin, *seconds); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// outcome counts requests by result, and the answered ones by operation.
type outcome struct{ ok, limited, failed, okReads, okWrites atomic.Int64 }

func run(proxyAddr, admin string, seconds int) error {
	host, port, _ := strings.Cut(proxyAddr, ":")
	c := gocql.NewCluster(host)
	fmt.Sscan(port, &c.Port)
	c.Authenticator = gocql.PasswordAuthenticator{Username: "cassandra", Password: "cassandra"}
	c.Consistency = gocql.One
	c.Timeout = 10 * time.Second
	s, err := c.CreateSession()
	if err != nil {
		return fmt.Errorf("connecting through cqlguard: %w", err)
	}
	defer s.Close()
	for _, stmt := range []string{
		"CREATE KEYSPACE IF NOT EXISTS cqlguard_demo WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
		"CREATE TABLE IF NOT EXISTS cqlguard_demo.kv (k int PRIMARY KEY, v text)",
	} {
		if err := s.Query(stmt).Exec(); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}

	var uniform, hot outcome
	stop := make(chan struct{})
	var wg sync.WaitGroup
	worker := func(o *outcome, key func() int) {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			k := key()
			var err error
			write := rand.IntN(2) == 0
			if write {
				err = s.Query("INSERT INTO cqlguard_demo.kv (k, v) VALUES (?, ?)", k, "value").Exec()
			} else {
				var v string
				err = s.Query("SELECT v FROM cqlguard_demo.kv WHERE k = ?", k).Scan(&v)
				if errors.Is(err, gocql.ErrNotFound) {
					err = nil
				}
			}
			var re gocql.RequestError
			switch {
			case err == nil:
				o.ok.Add(1)
				if write {
					o.okWrites.Add(1)
				} else {
					o.okReads.Add(1)
				}
			case errors.As(err, &re) && (re.Code() == 0xF000 || re.Code() == 0x2300):
				o.limited.Add(1)
			default:
				o.failed.Add(1)
			}
		}
	}
	for range 16 {
		wg.Add(1)
		go worker(&uniform, func() int { return rand.IntN(100000) })
	}
	for range 8 {
		wg.Add(1)
		go worker(&hot, func() int { return 42 })
	}

	// The hot partition's reads and writes are limited separately, to
	// hotLimit a second each, so each is shown against its own limit.
	const hotLimit = 100
	fmt.Printf("%4s  %24s  %63s\n", "", "uniform (16 clients)", "hot key 42 (8 clients)")
	fmt.Printf("%4s  %8s %7s %7s  %8s %7s %7s %15s  %15s\n", "sec", "ok/s", "limited", "failed", "ok/s", "limited", "failed", "reads ok/limit", "writes ok/limit")
	var prevU, prevH [5]int64
	snap := func(o *outcome) [5]int64 {
		return [5]int64{o.ok.Load(), o.limited.Load(), o.failed.Load(), o.okReads.Load(), o.okWrites.Load()}
	}
	for sec := 1; sec <= seconds; sec++ {
		time.Sleep(time.Second)
		u, h := snap(&uniform), snap(&hot)
		fmt.Printf("%4d  %8d %7d %7d  %8d %7d %7d %9.2f x %d  %9.2f x %d\n", sec,
			u[0]-prevU[0], u[1]-prevU[1], u[2]-prevU[2], h[0]-prevH[0], h[1]-prevH[1], h[2]-prevH[2],
			float64(h[3]-prevH[3])/hotLimit, hotLimit, float64(h[4]-prevH[4])/hotLimit, hotLimit)
		prevU, prevH = u, h
	}
	fmt.Printf("reads (writes) ok/limit: the hot partition's reads (writes) answered that\nsecond, as a multiple of its limit of %d reads (writes) a second.\n", hotLimit)
	close(stop)
	wg.Wait()
	u, h := snap(&uniform), snap(&hot)
	fmt.Printf("total uniform: %d ok, %d limited, %d failed; hot: %d ok, %d limited, %d failed\n",
		u[0], u[1], u[2], h[0], h[1], h[2])
	fmt.Print(`The uniform clients are never limited: each of their partitions is far under
its limit. The hot partition gets about its limit once the load on it is
steady; more passes while the load grows, by design. The limiter (ScyllaDB's)
counts a partition's operations in a counter halved every wall-clock second,
accepts everything while the count is under twice the limit, then a share
that shrinks as the count grows: when each second offers as much as the last,
that leaves the limit. A partition new to the limiter starts at zero, and a
load that keeps growing (here the hot clients speed up as refusals come back
faster than answers) starts each second from half of a count that lags
behind it: the first seconds let several times the limit through, and the
excess shrinks as the load levels off (docs/limiter.md).
`)
	return printProxyCounts(admin)
}

// printProxyCounts shows the proxy's own view: its decisions, from its
// metrics, and the hottest partitions, from /hot.
func printProxyCounts(admin string) error {
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		return fmt.Errorf("reading cqlguard metrics: %w", err)
	}
	defer resp.Body.Close()
	fmt.Println("cqlguard metrics (/metrics):")
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		// The limiter's series and the requests forwarded, non-zero.
		if (strings.HasPrefix(line, "cqlguard_rate_limit") || strings.HasPrefix(line, "cqlguard_frames_total{direction=\"request\"")) &&
			!strings.HasSuffix(line, " 0") {
			fmt.Println("  " + line)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	hot, err := http.Get(admin + "/hot?n=5")
	if err != nil {
		return fmt.Errorf("reading cqlguard /hot: %w", err)
	}
	defer hot.Body.Close()
	fmt.Println("hottest partitions now (/hot?n=5):")
	_, err = io.Copy(os.Stdout, hot.Body)
	return err
}
