package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	pframe "github.com/datastax/go-cassandra-native-protocol/frame"
	"github.com/datastax/go-cassandra-native-protocol/message"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

// TestSoak runs many pipelining clients through the proxy and checks that
// every request gets exactly one answer on its stream, that clients which
// hang up with requests in flight leave nothing behind, and that
// goroutines and file descriptors return to their baseline. It runs for a
// second; CQLGUARD_SOAK=10m runs it for longer.
func TestSoak(t *testing.T) {
	duration := time.Second
	if d, err := time.ParseDuration(os.Getenv("CQLGUARD_SOAK")); err == nil {
		duration = d
	}
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{})
	p, addr := startProxy(t, func(c *config.Config) {
		c.Listen, c.Upstreams = "127.0.0.1:0", []string{node.Addr()}
	})
	// The baseline holds the proxy's health connection to the node.
	if err := p.Ready(); err != nil {
		t.Fatal(err)
	}
	goroutines, fds := runtime.NumGoroutine(), openFiles(t)

	query := encodeBody(t, 4, &message.Query{Query: "SELECT v FROM ks.kv WHERE k = 1", Options: &message.QueryOptions{}})
	const clients, inFlight = 16, 32
	var answered, abandoned int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	deadline := time.Now().Add(duration)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 0; time.Now().Before(deadline); round++ {
				// Every other session of odd clients hangs up with its
				// requests in flight.
				hangUp := i%2 == 1 && round%2 == 1
				n, err := soakSession(addr, query, inFlight, 400, hangUp)
				mu.Lock()
				answered += int64(n)
				if hangUp {
					abandoned++
				}
				mu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d requests answered exactly once over %v; %d sessions hung up with requests in flight", answered, duration, abandoned)

	// Everything a session held goes when it ends.
	var g, f int
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if g, f = runtime.NumGoroutine(), openFiles(t); g <= goroutines && f <= fds {
			break
		}
	}
	if g > goroutines || f > fds {
		t.Errorf("after the soak: %d goroutines (baseline %d), %d open files (baseline %d)", g, goroutines, f, fds)
	}
}

// soakSession sends n queries on one connection, keeping inFlight of them
// in flight, and checks that each stream is answered once. With hangUp it
// closes the connection halfway, with requests in flight.
func soakSession(addr string, query []byte, inFlight, n int, hangUp bool) (int, error) {
	c, err := dialTimeout(addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	r := frame.NewReader(bufio.NewReader(c), 1<<20)
	startup := encodeStartup()
	if _, err := c.Write(startup); err != nil {
		return 0, err
	}
	if _, h, err := r.Next(); err != nil || h.Opcode != frame.OpReady {
		return 0, fmt.Errorf("STARTUP: %v %v", h.Opcode, err)
	}
	pending := map[int16]bool{}
	var buf []byte
	send := func(stream int16) error {
		buf = frame.AppendHeader(buf[:0], frame.Header{Version: 4, Stream: stream, Opcode: frame.OpQuery, Length: len(query)})
		buf = append(buf, query...)
		pending[stream] = true
		_, err := c.Write(buf)
		return err
	}
	sent, answered := 0, 0
	for ; sent < inFlight && sent < n; sent++ {
		if err := send(int16(sent + 1)); err != nil {
			return answered, err
		}
	}
	for answered < n {
		if hangUp && answered == n/2 {
			return answered, nil
		}
		_, h, err := r.Next()
		if err != nil {
			return answered, fmt.Errorf("after %d answers: %w", answered, err)
		}
		if !pending[h.Stream] || h.Opcode != frame.OpResult {
			return answered, fmt.Errorf("stream %d answered with %s, in flight: %v", h.Stream, h.Opcode, pending[h.Stream])
		}
		delete(pending, h.Stream)
		answered++
		if sent < n {
			if err := send(h.Stream); err != nil {
				return answered, err
			}
			sent++
		}
	}
	if len(pending) != 0 {
		return answered, fmt.Errorf("%d requests never answered", len(pending))
	}
	return answered, nil
}

func openFiles(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	return len(fds)
}

func dialTimeout(addr string) (net.Conn, error) { return net.DialTimeout("tcp", addr, 5*time.Second) }

// encodeStartup is a v4 STARTUP frame on stream 0.
func encodeStartup() []byte {
	var b bytes.Buffer
	pframe.NewCodec().EncodeFrame(pframe.NewFrame(4, 0, &message.Startup{Options: map[string]string{"CQL_VERSION": "3.0.0"}}), &b)
	return b.Bytes()
}
