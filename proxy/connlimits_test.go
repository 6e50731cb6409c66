package proxy

import (
	"bufio"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

// A client that sends half a frame and stalls is disconnected after
// frame_timeout; one that idles between frames for longer is not.
func TestFrameTimeout(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{})
	_, addr := startProxy(t, func(c *config.Config) {
		c.Listen, c.Upstreams = "127.0.0.1:0", []string{node.Addr()}
		c.FrameTimeout = config.Duration(300 * time.Millisecond)
	})
	options := frame.AppendHeader(nil, frame.Header{Version: 4, Stream: 7, Opcode: frame.OpOptions})

	idle := rawConn(t, addr)
	stalled := rawConn(t, addr)
	start := time.Now()
	stalled.Write(options[:5])
	// The idle client idles for twice frame_timeout: the point of the test.
	time.Sleep(600 * time.Millisecond)
	b, err := io.ReadAll(stalled)
	if err != nil || len(b) != 0 {
		t.Errorf("stalled client: read % x, %v; want the connection closed", b, err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("stalled client disconnected after %v", took)
	}

	idle.Write(options)
	_, h, err := frame.NewReader(bufio.NewReader(idle), 1<<20).Next()
	if err != nil || h.Opcode != frame.OpSupported || h.Stream != 7 {
		t.Errorf("idle client's OPTIONS after %v: %v %v", time.Since(start), h, err)
	}
}

// Past max_connections a new connection's first request is answered with an
// error naming the setting, and the connection closed; once a connection
// ends, a new one is served.
func TestMaxConnections(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{})
	_, addr := startProxy(t, func(c *config.Config) {
		c.Listen, c.Upstreams = "127.0.0.1:0", []string{node.Addr()}
		c.MaxConnections = 1
	})
	options := frame.AppendHeader(nil, frame.Header{Version: 4, Stream: 1, Opcode: frame.OpOptions})
	ask := func(c net.Conn) (frame.Header, []byte) {
		t.Helper()
		c.Write(options)
		f, h, err := frame.NewReader(bufio.NewReader(c), 1<<20).Next()
		if err != nil {
			t.Fatalf("OPTIONS: %v", err)
		}
		return h, f[frame.HeaderSize:]
	}
	first := rawConn(t, addr)
	if h, _ := ask(first); h.Opcode != frame.OpSupported {
		t.Fatalf("first connection: %v", h)
	}
	second := rawConn(t, addr)
	h, body := ask(second)
	if code, msg := errorOf(t, h, body); code != frame.ErrCodeServer || !strings.Contains(msg, "max_connections 1") {
		t.Errorf("second connection: %#x %q", code, msg)
	}
	first.Close()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		third := rawConn(t, addr)
		if h, _ := ask(third); h.Opcode == frame.OpSupported {
			break
		}
		third.Close()
		if time.Now().After(deadline) {
			t.Fatal("no connection served after the first closed")
		}
	}
}

// When the upstream connection dies with requests in flight, each of them is
// answered with a server error on its own stream, then the connection closes.
func TestUpstreamLostAnswersInFlight(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{ResetQuery: "boom"})
	_, addr := startProxy(t, func(c *config.Config) {
		c.Listen, c.Upstreams = "127.0.0.1:0", []string{node.Addr()}
	})
	c := dialRaw(t, addr, 4)
	c.startup(nil)
	c.send(1, &message.Query{Query: "SELECT boom FROM ks.kv", Options: &message.QueryOptions{}})
	c.send(2, &message.Query{Query: "SELECT v FROM ks.kv", Options: &message.QueryOptions{}})
	answered := map[int16]bool{}
	for {
		f, h, err := c.r.Next()
		if err != nil {
			break
		}
		if code, msg := errorOf(t, h, f[frame.HeaderSize:]); code != frame.ErrCodeServer || !strings.Contains(msg, "may or may not have been applied") {
			t.Errorf("stream %d: %#x %q", h.Stream, code, msg)
		}
		answered[h.Stream] = true
	}
	// Stream 2 reaches the proxy right behind stream 1, so it is in flight
	// too unless the upstream died before the proxy forwarded it.
	if !answered[1] {
		t.Errorf("streams answered: %v; want 1 (and 2) with a server error", answered)
	}
	t.Logf("answered with a server error: %v", answered)
}

// With max_in_flight_per_connection requests waiting for the upstream, the
// proxy reads nothing more from that client until one is answered; every
// request is still answered.
func TestMaxInFlightPerConnection(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{SlowQuery: "slow", SlowFor: 50 * time.Millisecond})
	p, addr := startProxy(t, func(c *config.Config) {
		c.Listen, c.Upstreams = "127.0.0.1:0", []string{node.Addr()}
		c.MaxInFlightPerConnection = 2
	})
	c := dialRaw(t, addr, 4)
	c.startup(nil)
	for i := range 6 {
		c.send(int16(10+i), &message.Query{Query: "SELECT v FROM ks.slow", Options: &message.QueryOptions{}})
	}
	seen := map[int16]bool{}
	for range 6 {
		f := c.recv()
		if f.Header.OpCode != primitive.OpCodeResult || seen[f.Header.StreamId] {
			t.Fatalf("stream %d answered with %v (seen before: %v)", f.Header.StreamId, f.Body.Message, seen[f.Header.StreamId])
		}
		seen[f.Header.StreamId] = true
	}
	if waits := testutil.ToFloat64(p.metrics.inFlightWaits); waits < 1 {
		t.Errorf("the request path never waited: %v", waits)
	}
}

// failingListener fails its first fails calls of Accept with err, as
// accept4 does when the process, or the system, is out of descriptors or
// memory, and notes when each call came.
type failingListener struct {
	net.Listener
	err   error
	fails int

	mu    sync.Mutex
	calls []time.Time
}

func (l *failingListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	l.calls = append(l.calls, time.Now())
	n := len(l.calls)
	l.mu.Unlock()
	if n <= l.fails {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", l.err)}
	}
	return l.Listener.Accept()
}

// When accept fails for want of descriptors or memory, or times out, the
// client listener waits, longer each time, and goes on serving: it
// neither spins nor stops.
func TestServeBacksOffOnAcceptErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
	}{
		{"process out of descriptors", syscall.EMFILE},
		{"system out of descriptors", syscall.ENFILE},
		{"no socket buffers", syscall.ENOBUFS},
		{"no kernel memory", syscall.ENOMEM},
		{"timeout", os.ErrDeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			node := fakeNode(t, "127.0.0.1:0", fakenode.Options{})
			inner, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			const fails = 3
			ln := &failingListener{Listener: inner, err: tt.err, fails: fails}
			startProxyOn(t, ln, func(c *config.Config) { c.Upstreams = []string{node.Addr()} })

			c := rawConn(t, inner.Addr().String())
			c.Write(frame.AppendHeader(nil, frame.Header{Version: 4, Stream: 1, Opcode: frame.OpOptions}))
			if _, h, err := frame.NewReader(bufio.NewReader(c), 1<<20).Next(); err != nil || h.Opcode != frame.OpSupported {
				t.Fatalf("OPTIONS after %d failed accepts: %v %v", fails, h, err)
			}
			ln.mu.Lock()
			defer ln.mu.Unlock()
			if len(ln.calls) < fails+1 {
				t.Fatalf("%d calls of Accept", len(ln.calls))
			}
			// 5, 10 and 20 ms between the failures and the next call.
			if waited := ln.calls[fails].Sub(ln.calls[0]); waited < 35*time.Millisecond {
				t.Errorf("%d failed accepts retried within %v: no back-off", fails, waited)
			}
		})
	}
}
