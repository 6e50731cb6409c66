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
