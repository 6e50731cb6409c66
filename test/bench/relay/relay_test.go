package relay

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// An echo server behind the relay gets every byte a client sends and the
// client every byte it echoes; a client's half close reaches the server,
// and the server's answer still comes back after it.
func TestRelay(t *testing.T) {
	t.Parallel()
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- Serve(ln, echo.Addr().String()) }()

	for _, size := range []int{1, 100, 1 << 20} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		sent := bytes.Repeat([]byte("cql"), size)
		go func() {
			c.Write(sent)
			c.(*net.TCPConn).CloseWrite()
		}()
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || !bytes.Equal(got, sent) {
			t.Errorf("%d bytes sent, %d back, %v", len(sent), len(got), err)
		}
	}

	ln.Close()
	if err := <-served; err != nil {
		t.Errorf("Serve after Close: %v", err)
	}
}

// A client whose upstream cannot be reached is closed.
func TestRelayUpstreamDown(t *testing.T) {
	t.Parallel()
	down, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := down.Addr().String()
	down.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go Serve(ln, addr)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("read %d bytes, %v; want EOF", n, err)
	}
}

// startEcho starts a server that echoes what each connection sends until
// it ends, and reports on the channel each connection it saw end.
func startEcho(t *testing.T) (addr string, ended <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	done := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
				done <- struct{}{}
			}()
		}
	}()
	return ln.Addr().String(), done
}

// The event-loop relay carries every byte both ways, a large payload
// while the answer flows back, and a client's close reaches the upstream.
func TestEventLoop(t *testing.T) {
	t.Parallel()
	echo, ended := startEcho(t)
	rl, err := ListenEventLoop("127.0.0.1:0", echo)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := rl.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()

	for _, size := range []int{1, 100, 1 << 20} {
		c, err := net.Dial("tcp", rl.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		sent := bytes.Repeat([]byte("cql"), size)
		wrote := make(chan error, 1)
		go func() {
			_, err := c.Write(sent)
			wrote <- err
		}()
		got := make([]byte, len(sent))
		_, err = io.ReadFull(c, got)
		if err := <-wrote; err != nil {
			t.Errorf("%d bytes: write: %v", len(sent), err)
		}
		if err != nil || !bytes.Equal(got, sent) {
			t.Errorf("%d bytes sent, not all back: %v", len(sent), err)
		}
		c.Close()
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d bytes: the client's close did not reach the upstream", len(sent))
		}
	}
}

// An upstream that answers and closes has its answer delivered, then the
// client's connection closed.
func TestEventLoopUpstreamCloses(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	answer := bytes.Repeat([]byte("row"), 1000)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Write(answer)
		c.Close()
	}()
	rl, err := ListenEventLoop("127.0.0.1:0", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	c, err := net.Dial("tcp", rl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if got, err := io.ReadAll(c); err != nil || !bytes.Equal(got, answer) {
		t.Errorf("read %d bytes of %d, %v", len(got), len(answer), err)
	}
}

// A client whose upstream cannot be reached is closed.
func TestEventLoopUpstreamDown(t *testing.T) {
	t.Parallel()
	down, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := down.Addr().String()
	down.Close()
	rl, err := ListenEventLoop("127.0.0.1:0", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	c, err := net.Dial("tcp", rl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("read %d bytes, %v; want EOF", n, err)
	}
}
