// Command connflood measures what idle connections cost a running
// cqlguard. It opens -conns connections to -target and leaves them open:
// to the admin listener (the default target), each asks for /healthz
// first and then stays, as an HTTP client's pool leaves it; to any other
// address, each sends nothing at all, as a client that never starts its
// TLS handshake. After -wait it reads the proxy's descriptors and memory
// from /metrics, on a connection of its own, as it did before, times
// /healthz on a fresh connection, and counts the connections the proxy
// still holds open.
//
//	go run ./test/connflood -admin 127.0.0.1:9180 -conns 3000
//	go run ./test/connflood -admin 127.0.0.1:9180 -target 127.0.0.1:9042 -conns 1000 -wait 6s
//
// The descriptor limit must allow the connections (ulimit -n).
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func main() {
	admin := flag.String("admin", "127.0.0.1:9180", "the admin listener, host:port")
	target := flag.String("target", "", "where to open the connections (default: the admin listener)")
	conns := flag.Int("conns", 3000, "connections to open")
	wait := flag.Duration("wait", 0, "how long to wait once they are open before measuring")
	flag.Parse()
	if *target == "" {
		*target = *admin
	}
	if err := run(*admin, *target, *conns, *wait); err != nil {
		fmt.Fprintln(os.Stderr, "connflood:", err)
		os.Exit(1)
	}
}

// The process's figures that /metrics carries.
var figures = []string{"process_open_fds", "go_memstats_heap_inuse_bytes", "go_memstats_stack_inuse_bytes", "process_resident_memory_bytes", "go_goroutines"}

func run(admin, target string, n int, wait time.Duration) error {
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	before, err := scrape(fresh, admin)
	if err != nil {
		return err
	}
	held := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	answered := 0
	for i := range n {
		c, err := net.DialTimeout("tcp", target, 10*time.Second)
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		held = append(held, c)
		if target == admin && healthz(c) == nil {
			answered++
		}
	}
	time.Sleep(wait)
	start := time.Now()
	resp, err := fresh.Get("http://" + admin + "/healthz")
	if err != nil {
		return fmt.Errorf("/healthz on a fresh connection with %d held: %w", n, err)
	}
	resp.Body.Close()
	took := time.Since(start)
	after, err := scrape(fresh, admin)
	if err != nil {
		return err
	}
	open := 0
	for _, c := range held {
		if stillOpen(c) {
			open++
		}
	}
	fmt.Printf("%d connections opened to %s", n, target)
	if target == admin {
		fmt.Printf(", %d answered /healthz", answered)
	}
	fmt.Printf(", %d still open after %v; /healthz on a fresh connection: %s in %v\n", open, wait, resp.Status, took.Round(time.Microsecond))
	for _, name := range figures {
		fmt.Printf("%-32s %14.0f -> %14.0f (%+.0f)\n", name, before[name], after[name], after[name]-before[name])
	}
	for _, name := range []string{"cqlguard_admin_connections", "cqlguard_client_connections"} {
		if v, ok := after[name]; ok {
			fmt.Printf("%-32s %14.0f\n", name, v)
		}
	}
	return nil
}

// healthz asks for /healthz on c and reads the answer, leaving c open.
func healthz(c net.Conn) error {
	c.SetDeadline(time.Now().Add(30 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: cqlguard\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// stillOpen reports whether the proxy has not closed c: a read finds
// nothing to read rather than the end of the connection.
func stillOpen(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(time.Millisecond))
	var b [1]byte
	_, err := c.Read(b[:])
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// scrape reads the process's figures and cqlguard's connection gauges
// from /metrics.
func scrape(c *http.Client, admin string) (map[string]float64, error) {
	resp, err := c.Get("http://" + admin + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("/metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("/metrics: %w", err)
	}
	out := map[string]float64{}
	for name, f := range families {
		if len(f.GetMetric()) == 0 || !(strings.HasPrefix(name, "process_") || strings.HasPrefix(name, "go_") || strings.HasSuffix(name, "_connections")) {
			continue
		}
		m := f.GetMetric()[0]
		switch {
		case m.GetGauge() != nil:
			out[name] = m.GetGauge().GetValue()
		case m.GetCounter() != nil:
			out[name] = m.GetCounter().GetValue()
		}
	}
	return out, nil
}
