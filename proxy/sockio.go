package proxy

// Reading and writing a connection's socket outside the Go runtime's
// system call accounting.
//
// net.Conn's Read and Write enter the runtime's blocking system call state
// for every read(2) and write(2), although on the non-blocking sockets the
// net package makes they never block. While a goroutine is in that state
// the runtime's monitor thread (sysmon) watches its P: every 20 µs it
// wakes to see whether to hand the P to another thread, and each write on
// loopback, which runs the peer's receive path too, lasts long enough to be
// handed off. At the loads a proxy runs that monitor was a fifth of the
// proxy's CPU (docs/benchmarks.md, issue 18), and the hand-offs cost thread
// wake-ups besides. sockReader and sockWriter make the same read(2) and
// write(2) as raw system calls inside syscall.RawConn's Read and Write, so
// that the net package's poller still waits for readiness and keeps
// deadlines, and the runtime counts the call as the running goroutine's
// own work. A raw call on a non-blocking socket cannot block, so holding
// the P for it costs nobody else anything.
//
// Connections that are not sockets (TLS, in-memory pipes in tests) and
// platforms without raw calls use the connection's own Read and Write.

import (
	"io"
	"net"
	"os"
	"syscall"
)

// sockReader reads a connection, with raw system calls when it is a socket.
// Its Read is for one goroutine at a time.
type sockReader struct {
	conn net.Conn
	raw  syscall.RawConn // nil: read through conn
	b    []byte          // Read's buffer, while rawRead runs
	n    int
	err  error
	fn   func(fd uintptr) bool // rawRead, made once so that Read allocates nothing
}

func newSockReader(conn net.Conn) *sockReader {
	r := &sockReader{conn: conn, raw: rawConnOf(conn)}
	r.fn = r.rawRead
	return r
}

// Read reads what the connection has, up to len(b) bytes, waiting for some
// if it has none.
func (r *sockReader) Read(b []byte) (int, error) {
	if r.raw == nil || len(b) == 0 {
		return r.conn.Read(b)
	}
	r.b, r.n, r.err = b, 0, nil
	err := r.raw.Read(r.fn)
	r.b = nil
	if err != nil {
		// A deadline or a close, from the poller: the same errors as
		// conn.Read's, under the name of raw-read.
		return 0, err
	}
	return r.n, r.err
}

func (r *sockReader) rawRead(fd uintptr) bool {
	n, errno := readRaw(fd, r.b)
	if errno == syscall.EAGAIN {
		return false // the poller waits for bytes, then calls again
	}
	r.n, r.err = readOutcome(r.conn, n, errno)
	return true
}

// readOutcome is what a raw read that returned n and errno, not EAGAIN,
// gives the reader: bytes, EOF, or the error net.Conn's Read would give.
func readOutcome(conn net.Conn, n int, errno syscall.Errno) (int, error) {
	switch {
	case errno != 0:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: conn.LocalAddr(), Addr: conn.RemoteAddr(), Err: os.NewSyscallError("read", errno)}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// sockWriter writes a connection, with raw system calls when it is a
// socket. Its Write is for one goroutine at a time.
type sockWriter struct {
	conn net.Conn
	raw  syscall.RawConn // nil: write through conn
	b    []byte          // what is left to write, while rawWrite runs
	err  error
	fn   func(fd uintptr) bool // rawWrite, made once so that Write allocates nothing
}

func newSockWriter(conn net.Conn) *sockWriter {
	w := &sockWriter{conn: conn, raw: rawConnOf(conn)}
	w.fn = w.rawWrite
	return w
}

// Write writes all of b, waiting for room in the socket as it must, and
// returns how much it wrote.
func (w *sockWriter) Write(b []byte) (int, error) {
	if w.raw == nil {
		return w.conn.Write(b)
	}
	w.b, w.err = b, nil
	err := w.raw.Write(w.fn)
	n := len(b) - len(w.b)
	w.b = nil
	if err == nil {
		err = w.err
	}
	return n, err
}

func (w *sockWriter) rawWrite(fd uintptr) bool {
	for len(w.b) > 0 {
		n, errno := writeRaw(fd, w.b)
		switch errno {
		case 0:
			w.b = w.b[n:]
		case syscall.EAGAIN:
			return false // the poller waits for room, then calls again
		default:
			w.err = &net.OpError{Op: "write", Net: "tcp", Source: w.conn.LocalAddr(), Addr: w.conn.RemoteAddr(), Err: os.NewSyscallError("write", errno)}
			return true
		}
	}
	return true
}

// rawConnOf returns conn's raw connection when raw system calls can read
// and write it, else nil.
func rawConnOf(conn net.Conn) syscall.RawConn {
	if !rawCalls {
		return nil
	}
	// *tls.Conn is no syscall.Conn: its bytes must go through it.
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return raw
}
