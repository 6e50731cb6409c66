package transport

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"testing"
	"time"
)

// The raw reader and writer move bytes as net.Conn does, wait for a socket
// that is empty or full, and end with the errors net.Conn's would give:
// EOF, a deadline's timeout, a closed connection.
func TestSockIO(t *testing.T) {
	t.Parallel()
	a, b := tcpPair(t, "127.0.0.1:0")
	w, r := newSockWriter(a), NewSockReader(b)
	if rawCalls && (w.raw == nil || r.raw == nil) {
		t.Fatal("a TCP connection is not read and written with raw calls")
	}

	// More than both socket buffers hold: the writer meets a full socket
	// and waits for the reader.
	want := make([]byte, 16<<20)
	for i := range want {
		want[i] = byte(i * 7)
	}
	done := make(chan error, 1)
	go func() {
		n, err := w.Write(want)
		if err == nil && n != len(want) {
			err = io.ErrShortWrite
		}
		done <- err
	}()
	got := make([]byte, 0, len(want))
	buf := make([]byte, 5000)
	for len(got) < len(want) {
		n, err := r.Read(buf)
		if err != nil {
			t.Fatalf("read after %d bytes: %v", len(got), err)
		}
		got = append(got, buf[:n]...)
	}
	if err := <-done; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("bytes arrived changed")
	}

	// A deadline ends a read that finds nothing.
	b.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	var ne net.Error
	if _, err := r.Read(buf); !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	b.SetReadDeadline(time.Time{})

	// The peer's close is EOF once its bytes are read.
	if _, err := w.Write([]byte("last")); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if n, err := io.ReadFull(r, buf[:4]); err != nil || string(buf[:n]) != "last" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if _, err := r.Read(buf); err != io.EOF {
		t.Fatalf("read after the peer closed: %v, want EOF", err)
	}
	// Writing a closed connection fails as net.Conn's Write does.
	if _, err := w.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after close: %v, want net.ErrClosed", err)
	}
	b.Close()
	if _, err := r.Read(buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after close: %v, want net.ErrClosed", err)
	}
}

// A peer that resets the connection fails the write with the system's
// error, wrapped as net.Conn's Write wraps it.
func TestSockWriterReset(t *testing.T) {
	t.Parallel()
	a, b := tcpPair(t, "127.0.0.1:0")
	b.(*net.TCPConn).SetLinger(0)
	b.Close() // RST
	w := newSockWriter(a)
	var err error
	for range 100 {
		if _, err = w.Write(make([]byte, 64<<10)); err != nil {
			break
		}
		time.Sleep(time.Millisecond) // the RST is on its way
	}
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "write" {
		t.Fatalf("write to a reset connection: %v, want a write OpError", err)
	}
}

// countingConn is a socket whose Read does more than read: raw calls must
// not bypass it.
type countingConn struct {
	*net.TCPConn
	n int
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.TCPConn.Read(b)
	c.n += n
	return n, err
}

// Connections that are not the net package's sockets are read and written
// through their own Read and Write, even when they are a syscall.Conn.
func TestSockIOFallback(t *testing.T) {
	t.Parallel()
	x, y := tcpPair(t, "127.0.0.1:0")
	wrapped := &countingConn{TCPConn: y.(*net.TCPConn)}
	if r := NewSockReader(wrapped); r.raw != nil {
		t.Fatal("a wrapped socket got a raw connection")
	} else {
		x.Write([]byte("abc"))
		if _, err := io.ReadFull(r, make([]byte, 3)); err != nil || wrapped.n != 3 {
			t.Fatalf("read through the wrapper: %d bytes counted, %v", wrapped.n, err)
		}
	}

	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	w, r := newSockWriter(a), NewSockReader(b)
	if w.raw != nil || r.raw != nil {
		t.Fatal("a pipe got a raw connection")
	}
	go w.Write([]byte("hello"))
	buf := make([]byte, 5)
	if _, err := io.ReadFull(r, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("read %q, %v", buf, err)
	}
}

// Reading and writing allocate nothing.
func TestSockIOAllocs(t *testing.T) {
	a, b := tcpPair(t, "127.0.0.1:0")
	w, r := newSockWriter(a), NewSockReader(b)
	msg, buf := []byte("0123456789"), make([]byte, 64)
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := w.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(r, buf[:len(msg)]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per write and read", allocs)
	}
}

// Unread counts what the peer wrote and no read has taken, allocating
// nothing; it cannot tell on what is not a socket.
func TestSockReaderUnread(t *testing.T) {
	a, b := tcpPair(t, "127.0.0.1:0")
	r := NewSockReader(b)
	if !rawCalls {
		if _, ok := r.Unread(); ok {
			t.Fatal("Unread told without raw calls")
		}
		return
	}
	if n, ok := r.Unread(); !ok || n != 0 {
		t.Fatalf("empty socket: Unread %d, %v", n, ok)
	}
	if _, err := a.Write([]byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	// Loopback delivers within the write.
	if n, ok := r.Unread(); !ok || n != 10 {
		t.Fatalf("after 10 bytes came: Unread %d, %v", n, ok)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(r, buf); err != nil {
		t.Fatal(err)
	}
	if n, ok := r.Unread(); !ok || n != 6 {
		t.Fatalf("after reading 4 of 10: Unread %d, %v", n, ok)
	}
	if allocs := testing.AllocsPerRun(100, func() { r.Unread() }); allocs != 0 {
		t.Fatalf("%.1f allocations per Unread", allocs)
	}
	p, q := net.Pipe()
	defer p.Close()
	defer q.Close()
	if _, ok := NewSockReader(q).Unread(); ok {
		t.Fatal("Unread told on a pipe")
	}
}

// SetBeforeWait's fn is called as a Read is about to wait: on a socket,
// only when it finds nothing to read; on a connection without raw calls,
// which cannot tell, before every Read.
func TestSockReaderBeforeWait(t *testing.T) {
	t.Parallel()
	read := func(t *testing.T, r *SockReader, want string) {
		t.Helper()
		buf := make([]byte, 8)
		if n, err := r.Read(buf); err != nil || string(buf[:n]) != want {
			t.Fatalf("read %q, %v; want %q", buf[:n], err, want)
		}
	}
	// waitRead reads "y", which a goroutine writes to w once fn is
	// called, and returns how many times fn was.
	waitRead := func(t *testing.T, r *SockReader, w net.Conn) int {
		t.Helper()
		calls := 0
		called := make(chan struct{})
		r.SetBeforeWait(func() {
			if calls++; calls == 1 {
				close(called)
			}
		})
		go func() {
			<-called
			w.Write([]byte("y"))
		}()
		read(t, r, "y")
		return calls
	}

	t.Run("socket", func(t *testing.T) {
		if !rawCalls {
			t.Skip("no raw calls on this platform")
		}
		a, b := tcpPair(t, "127.0.0.1:0")
		b.SetReadDeadline(time.Now().Add(5 * time.Second)) // fails rather than hangs
		r := NewSockReader(b)
		a.Write([]byte("x"))
		waitUntilUnread(t, r, 1)
		r.SetBeforeWait(func() { t.Error("fn called for a read of bytes there already") })
		read(t, r, "x")
		if n := waitRead(t, r, a); n != 1 {
			t.Errorf("fn called %d times for a read that waited, want 1", n)
		}
	})
	t.Run("pipe", func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		b.SetReadDeadline(time.Now().Add(5 * time.Second))
		r := NewSockReader(b)
		if n := waitRead(t, r, a); n != 1 {
			t.Errorf("fn called %d times for a read, want 1", n)
		}
	})
}

// waitUntilUnread waits until r's socket holds n bytes unread.
func waitUntilUnread(t *testing.T, r *SockReader, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if got, ok := r.Unread(); ok && got == n {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("%d bytes unread, want %d", got, n)
		}
	}
}

// On a TLS connection of TLSServer or TLSClient, the before-wait hook runs
// as a read of the socket under it finds the socket empty: not for a Read
// of what TLS has decrypted already, which does not wait.
func TestSockReaderBeforeWaitOverTLS(t *testing.T) {
	t.Parallel()
	if !rawCalls {
		t.Skip("no raw calls on this platform")
	}
	a, b := tcpPair(t, "127.0.0.1:0")
	a.SetDeadline(time.Now().Add(5 * time.Second))
	b.SetDeadline(time.Now().Add(5 * time.Second))
	// No session tickets: nothing but the test's records follows the
	// handshake.
	server := TLSServer(b, &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}, SessionTicketsDisabled: true})
	client := TLSClient(a, &tls.Config{InsecureSkipVerify: true})
	done := make(chan error, 1)
	go func() { done <- server.Handshake() }()
	if err := client.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, side := range []struct {
		name string
		r, w net.Conn
	}{{"server", server, client}, {"client", client, server}} {
		t.Run(side.name, func(t *testing.T) {
			r := NewSockReader(side.r)
			if r.under == nil {
				t.Fatal("the TLS connection's socket is not read with raw calls")
			}
			calls := 0
			r.SetBeforeWait(func() { calls++ })
			side.w.Write([]byte("xy"))
			buf := make([]byte, 1)
			if n, err := r.Read(buf); err != nil || string(buf[:n]) != "x" {
				t.Fatalf("read %q, %v; want x", buf[:n], err)
			}
			before := calls
			if n, err := r.Read(buf); err != nil || string(buf[:n]) != "y" {
				t.Fatalf("read %q, %v; want y", buf[:n], err)
			}
			if calls != before {
				t.Errorf("fn called %d times for a read of what TLS had decrypted", calls-before)
			}
			called := make(chan struct{})
			r.SetBeforeWait(func() {
				if calls++; calls == before+1 {
					close(called)
				}
			})
			go func() {
				<-called
				side.w.Write([]byte("z"))
			}()
			if n, err := r.Read(buf); err != nil || string(buf[:n]) != "z" {
				t.Fatalf("read %q, %v; want z", buf[:n], err)
			}
		})
	}
}

// selfSigned returns a certificate for 127.0.0.1 that signs itself.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
