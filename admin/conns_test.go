package admin

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/config"
)

// startAdmin serves an admin listener on a port of its own until the test
// ends, and returns its server and address.
func startAdmin(t *testing.T, edit func(*config.AdminConfig)) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startAdminOn(t, ln, edit), ln.Addr().String()
}

// startAdminOn serves an admin listener on ln until the test ends.
func startAdminOn(t *testing.T, ln net.Listener, edit func(*config.AdminConfig)) *Server {
	t.Helper()
	cfg := config.Default().Admin
	if edit != nil {
		edit(&cfg)
	}
	reg := prometheus.NewRegistry()
	srv, err := NewServer(cfg, stubSource{}, reg, reg, zerolog.Nop())
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return srv
}

// keepAlive is a raw connection to the admin listener that asks for
// /healthz and keeps the connection open, as an HTTP client's pool does.
type keepAlive struct {
	c net.Conn
	r *bufio.Reader
}

func dialKeepAlive(t *testing.T, addr string) *keepAlive {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &keepAlive{c: c, r: bufio.NewReader(c)}
}

// healthz asks for /healthz on the connection and returns the status.
func (k *keepAlive) healthz() (int, error) {
	k.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(k.c, "GET /healthz HTTP/1.1\r\nHost: cqlguard\r\n\r\n"); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(k.r, nil)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Idle keep-alive connections past admin.max_connections make room for
// new ones: the listener holds at most the cap, closing the connection
// idle longest for each new one, and /healthz answers on every fresh
// connection. With every connection busy, a new one waits for one to
// close, and is then served.
func TestAdminConnectionsBounded(t *testing.T) {
	t.Parallel()
	const max, dialed = 8, 40
	srv, addr := startAdmin(t, func(a *config.AdminConfig) { a.MaxConnections = max })
	held := func() int { return int(testutil.ToFloat64(srv.m.open)) }

	conns := make([]*keepAlive, dialed)
	for i := range conns {
		conns[i] = dialKeepAlive(t, addr)
		if status, err := conns[i].healthz(); err != nil || status != http.StatusOK {
			t.Fatalf("connection %d: /healthz %d, %v", i, status, err)
		}
		if n := held(); n > max {
			t.Fatalf("after %d connections the listener holds %d, over the cap of %d", i+1, n, max)
		}
	}
	if n, closed := held(), testutil.ToFloat64(srv.m.closedIdle); n != max || closed != dialed-max {
		t.Errorf("%d connections held, %v closed while idle; want %d and %d", n, closed, max, dialed-max)
	}
	// The connections that were idle longest, mostly the first ones (a
	// connection is idle once the server has noted it, which may be after
	// its client dialed the next), were closed; as many as the cap still
	// answer, the last one among them.
	answered := 0
	for i, k := range conns {
		status, err := k.healthz()
		if err == nil && status == http.StatusOK {
			answered++
		} else if i == dialed-1 {
			t.Errorf("the last connection: /healthz %d, %v", status, err)
		}
	}
	if answered != max {
		t.Errorf("%d connections still answer, want %d", answered, max)
	}
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := fresh.Get("http://" + addr + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz on a fresh connection: %v, %v", resp, err)
	}
	resp.Body.Close()

	for deadline := time.Now().Add(10 * time.Second); held() != max-1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the fresh connection is still counted: %d held", held())
		}
	}

	// Every slot taken by a connection that has sent nothing: none is
	// idle, so a new connection waits, and is served once one closes.
	silent := make([]net.Conn, max)
	for i := range silent {
		silent[i] = dialKeepAlive(t, addr).c
	}
	waiting := make(chan error, 1)
	go func() {
		resp, err := fresh.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		waiting <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); testutil.ToFloat64(srv.m.waited) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the silent connections never filled the listener")
		}
	}
	select {
	case err := <-waiting:
		t.Fatalf("/healthz answered (%v) with every slot taken", err)
	default:
	}
	silent[0].Close()
	if err := <-waiting; err != nil {
		t.Errorf("/healthz once a silent connection closed: %v", err)
	}
	if n := held(); n > max {
		t.Errorf("the listener holds %d connections, over the cap of %d", n, max)
	}
}

// A connection is closed once it has waited for the next request for
// admin.idle_timeout, or for the first one, or the rest of one, for
// admin.read_timeout.
func TestAdminConnectionTimeouts(t *testing.T) {
	t.Parallel()
	const timeout = 200 * time.Millisecond
	tests := []struct {
		name string
		edit func(*config.AdminConfig)
		send func(*testing.T, *keepAlive)
	}{
		{"idle after a request", func(a *config.AdminConfig) { a.IdleTimeout = config.Duration(timeout) }, func(t *testing.T, k *keepAlive) {
			if status, err := k.healthz(); err != nil || status != http.StatusOK {
				t.Fatalf("/healthz: %d, %v", status, err)
			}
		}},
		{"silent from the start", func(a *config.AdminConfig) { a.ReadTimeout = config.Duration(timeout) }, func(*testing.T, *keepAlive) {}},
		{"headers never finished", func(a *config.AdminConfig) { a.ReadTimeout = config.Duration(timeout) }, func(t *testing.T, k *keepAlive) {
			io.WriteString(k.c, "GET /healthz HTTP/1.1\r\nHost: cq")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, addr := startAdmin(t, tt.edit)
			// Before the dial: the server's clock may start once it accepts.
			start := time.Now()
			k := dialKeepAlive(t, addr)
			tt.send(t, k)
			// Wait for the listener to close the connection; the deadline
			// only keeps a failing test from hanging.
			k.c.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, err := io.Copy(io.Discard, k.r)
			took := time.Since(start)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("connection still open after %v", took)
			}
			if took < timeout {
				t.Errorf("connection closed after %v, before the timeout of %v", took, timeout)
			}
			for deadline := time.Now().Add(10 * time.Second); testutil.ToFloat64(srv.m.open) != 0; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the closed connection is still counted")
				}
			}
		})
	}
}

// The admin listener, like the client listener, waits and goes on serving
// when accept fails for want of descriptors or memory.
func TestAdminServeBacksOffOnAcceptErrors(t *testing.T) {
	t.Parallel()
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM} {
		t.Run(errno.Error(), func(t *testing.T) {
			t.Parallel()
			inner, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			startAdminOn(t, &failingListener{Listener: inner, err: errno, fails: 3}, nil)
			k := dialKeepAlive(t, inner.Addr().String())
			if status, err := k.healthz(); err != nil || status != http.StatusOK {
				t.Errorf("/healthz after 3 failed accepts: %d, %v", status, err)
			}
		})
	}
}

// failingListener fails its first fails accepts with err, as accept4
// reports it, then accepts.
type failingListener struct {
	net.Listener
	err   error
	fails int

	mu    sync.Mutex
	calls int
}

func (l *failingListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	l.calls++
	n := l.calls
	l.mu.Unlock()
	if n <= l.fails {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", l.err)}
	}
	return l.Listener.Accept()
}
