package transport

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// A parked lazyReader gives br every byte that came while it waited, in
// order, then the connection's end: on a socket, whose wait reads nothing
// once the socket is readable, and on a pipe, whose wait reads into head.
func TestLazyReaderWait(t *testing.T) {
	t.Parallel()
	for _, size := range []int{1, 511, 512, 513, 4000, 40000} {
		for _, kind := range []string{"tcp", "pipe"} {
			var a, b net.Conn
			if kind == "tcp" {
				a, b = tcpPair(t, "127.0.0.1:0")
			} else {
				a, b = net.Pipe()
				t.Cleanup(func() { a.Close(); b.Close() })
			}
			var bufs ReadBuffers
			sock := NewSockReader(b)
			l := NewLazyReader(sock, sock, &bufs)
			if (l.sock != nil) != (kind == "tcp") {
				t.Fatalf("%s: raw wait %v", kind, l.sock != nil)
			}
			want := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
			go func() {
				a.Write(want)
				a.Close()
			}()
			var got []byte
			for {
				l.Wait()
				chunk := make([]byte, 70000)
				n, err := l.Reader().Read(chunk)
				got = append(got, chunk[:n]...)
				for err == nil && l.Reader().Buffered() > 0 {
					n, err = l.Reader().Read(chunk)
					got = append(got, chunk[:n]...)
				}
				if err != nil {
					if !errors.Is(err, io.EOF) {
						t.Fatalf("%s, %d bytes: %v", kind, size, err)
					}
					break
				}
				l.Park()
			}
			l.Park()
			if !bytes.Equal(got, want) {
				t.Fatalf("%s, %d bytes: got %d bytes, not what was sent", kind, size, len(got))
			}
		}
	}
}

// A parked lazyReader whose connection is closed under it returns the
// closing's error, not a hang.
func TestLazyReaderClosedWhileParked(t *testing.T) {
	t.Parallel()
	_, b := tcpPair(t, "127.0.0.1:0")
	var bufs ReadBuffers
	sock := NewSockReader(b)
	l := NewLazyReader(sock, sock, &bufs)
	done := make(chan error, 1)
	go func() {
		l.Wait()
		_, err := l.Reader().ReadByte()
		done <- err
	}()
	b.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after close: %v, want net.ErrClosed", err)
	}
}

// A LazyReader's before-wait hook is its socket's: on a connection without
// raw calls it runs before each read, so that a reader part way through a
// frame lets others go before it waits.
func TestLazyReaderBeforeWaitWithoutRawCalls(t *testing.T) {
	t.Parallel()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	b.SetReadDeadline(time.Now().Add(5 * time.Second)) // fails rather than hangs
	var bufs ReadBuffers
	sock := NewSockReader(b)
	l := NewLazyReader(sock, sock, &bufs)
	calls := make(chan struct{}, 2)
	l.SetBeforeWait(func() { calls <- struct{}{} })
	go func() {
		a.Write([]byte("ab"))
		<-calls // Wait's read
		<-calls // the read of the rest, about to wait
		a.Write([]byte("c"))
	}()
	l.Wait()
	buf := make([]byte, 3)
	if _, err := io.ReadFull(l.Reader(), buf); err != nil || string(buf) != "abc" {
		t.Fatalf("read %q, %v", buf, err)
	}
}
