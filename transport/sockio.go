package transport

// Reading and writing a connection's socket outside the Go runtime's
// system call accounting.
//
// net.Conn's Read and Write enter the runtime's system call state for
// every read(2) and write(2), although on the non-blocking sockets the net
// package makes they never block. Entering it wakes the runtime's monitor
// thread (sysmon) from its deep sleep, with a futex, whenever the proxy
// has been idle, and the monitor then checks every 20 µs for a while, to
// hand a P stuck in a system call to another thread. At the loads a proxy
// runs, busy and idle thousands of times a second, that monitor was a
// fifth of the proxy's CPU and its futexes more (docs/benchmarks.md).
// SockReader and sockWriter make the same read(2) and write(2)
// as raw system calls inside syscall.RawConn's Read and Write, so that the
// net package's poller still waits for readiness and keeps deadlines, and
// the runtime counts the call as the running goroutine's own work. A raw
// call on a non-blocking socket cannot block: holding the P keeps other
// goroutines waiting no longer than the call's own CPU time.
//
// Connections that are not the net package's sockets (TLS, wrappers,
// in-memory pipes in tests) and platforms other than Linux use the
// connection's own Read and Write. Under the race detector and the
// sanitizers the same paths make checked calls (sockio_checked_linux.go).

import (
	"io"
	"net"
	"os"
	"syscall"
)

// SockReader reads a connection, with raw system calls when it is one of
// the net package's sockets, and through its own Read when it is not. Its
// Read is for one goroutine at a time.
type SockReader struct {
	conn  net.Conn
	raw   syscall.RawConn // nil: read through conn
	fd    int             // raw's descriptor, for Unread; -1 without raw
	b     []byte          // the buffer, while a raw call runs
	n     int
	err   error
	tried bool // rawReadOrWait has tried b once
	// before, when set, is called as a Read (not readOrWait) finds the
	// socket empty and is about to wait for it; see SetBeforeWait.
	before func()
	// under is the reader of the socket under conn, a TLS connection of
	// TLSServer or TLSClient, which calls before for it; else nil.
	under *SockReader
	read  func(fd uintptr) bool // rawRead, made once so that Read allocates nothing
	wait  func(fd uintptr) bool // rawReadOrWait, made once
}

// NewSockReader returns a SockReader of conn.
func NewSockReader(conn net.Conn) *SockReader {
	r := &SockReader{conn: conn, raw: rawConnOf(conn), fd: -1, under: under(conn)}
	r.read = r.rawRead
	r.wait = r.rawReadOrWait
	if r.raw != nil {
		r.raw.Control(func(fd uintptr) { r.fd = int(fd) })
	}
	return r
}

// SetBeforeWait has fn called when a Read finds the socket empty and is
// about to wait for bytes: for a reader that holds others back while it
// reads part way through a frame. fn runs inside the read, with the
// connection's read side held: it must not block. On a TLS connection of
// TLSServer or TLSClient it is called as a read of the socket under it
// finds the socket empty, not when a Read takes what TLS has decrypted
// already; on another connection without raw calls, which cannot tell,
// before each Read. Waits of a LazyReader between frames (Wait) on a raw
// connection do not call it; on TLS they do.
func (r *SockReader) SetBeforeWait(fn func()) {
	r.before = fn
	if r.under != nil {
		r.under.before = fn
	}
}

// Unread returns how many bytes the socket holds that no read has taken
// yet, for another goroutine than the reader's to tell whether the reader
// is about to wake; false when it cannot tell (not a socket). It is a
// hint: it asks the descriptor the socket had, which once the connection
// is closed may be another file's.
func (r *SockReader) Unread() (int, bool) {
	if r.fd < 0 {
		return 0, false
	}
	n, errno := unreadRaw(r.fd)
	return n, errno == 0
}

// Read reads what the connection has, up to len(b) bytes, waiting for some
// if it has none.
func (r *SockReader) Read(b []byte) (int, error) {
	if r.raw == nil || len(b) == 0 {
		if r.before != nil && r.under == nil && len(b) > 0 {
			r.before()
		}
		return r.conn.Read(b)
	}
	return r.call(b, r.read)
}

// readOrWait is Read for a reader about to wait, on a connection with raw
// calls: it reads into b what the socket has, and when it has nothing it
// waits for the socket to become readable and returns 0 bytes without
// reading, so that the next Read takes everything that came, into a
// larger buffer. Go's poller forgets readiness before each call, so it
// must see one read find the socket empty before it waits.
func (r *SockReader) readOrWait(b []byte) (int, error) {
	r.tried = false
	return r.call(b, r.wait)
}

// call runs fn, a raw read of b, inside the raw connection's Read.
func (r *SockReader) call(b []byte, fn func(fd uintptr) bool) (int, error) {
	r.b, r.n, r.err = b, 0, nil
	err := r.raw.Read(fn)
	r.b = nil
	if err != nil {
		// A deadline or a close, from the poller: the same errors as
		// conn.Read's, which name the operation read.
		renameOp(err, "read")
		return 0, err
	}
	return r.n, r.err
}

func (r *SockReader) rawRead(fd uintptr) bool {
	if !r.readOnce(fd) {
		if r.before != nil {
			r.before()
		}
		return false
	}
	return true
}

// readOnce reads the socket fd into r.b once, and reports false when it
// was empty.
func (r *SockReader) readOnce(fd uintptr) bool {
	n, errno := readRaw(fd, r.b)
	switch {
	case errno == syscall.EAGAIN:
		return false // the poller waits for bytes, then calls again
	case errno != 0:
		r.err = opError(r.conn, "read", errno)
	case n == 0:
		r.err = io.EOF
	default:
		r.n = n
	}
	return true
}

func (r *SockReader) rawReadOrWait(fd uintptr) bool {
	if r.tried {
		return true // readable now; the next Read reads
	}
	r.tried = true
	return r.readOnce(fd)
}

// sockWriter writes a connection, with raw system calls when it is a
// socket. Its Write is for one goroutine at a time.
type sockWriter struct {
	conn net.Conn
	raw  syscall.RawConn // nil: write through conn
	b    []byte          // what is left to write, while rawWrite runs
	err  error
	fn   func(fd uintptr) bool // rawWrite, made once so that Write allocates nothing
	// stall, when set, is called with true before Write waits for room in
	// the socket (its peer is not reading as fast) and with false once it
	// is done waiting; stalled says it was called with true. It is called
	// from rawWrite, where the socket said so, rather than after stopping
	// there, which would cost a write more each time.
	stall   func(waiting bool)
	stalled bool
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
	if w.stalled {
		w.stalled = false
		w.stall(false)
	}
	n := len(b) - len(w.b)
	w.b = nil
	if err != nil {
		renameOp(err, "write")
		return n, err
	}
	return n, w.err
}

func (w *sockWriter) rawWrite(fd uintptr) bool {
	for len(w.b) > 0 {
		n, errno := writeRaw(fd, w.b)
		switch {
		case errno == syscall.EAGAIN:
			// The poller waits for room, then calls again.
			if w.stall != nil && !w.stalled {
				w.stalled = true
				w.stall(true)
			}
			return false
		case errno != 0:
			w.err = opError(w.conn, "write", errno)
			return true
		case n == 0:
			// As net.Conn's Write: a socket that takes nothing and
			// says nothing is not waited on forever.
			w.err = io.ErrUnexpectedEOF
			return true
		}
		w.b = w.b[n:]
	}
	return true
}

// rawConnOf returns conn's raw connection when raw system calls can read
// and write it, else nil. Only the net package's own socket types qualify:
// another type that is a syscall.Conn (a *tls.Conn is not) may do more in
// its Read and Write than move bytes, and must not be bypassed.
func rawConnOf(conn net.Conn) syscall.RawConn {
	if !rawCalls {
		return nil
	}
	var raw syscall.RawConn
	var err error
	switch c := conn.(type) {
	case *net.TCPConn:
		raw, err = c.SyscallConn()
	case *net.UnixConn:
		raw, err = c.SyscallConn()
	default:
		return nil
	}
	if err != nil {
		return nil
	}
	return raw
}

// opError is the error net.Conn's Read or Write gives for errno.
func opError(conn net.Conn, op string, errno syscall.Errno) error {
	return &net.OpError{Op: op, Net: conn.LocalAddr().Network(), Source: conn.LocalAddr(), Addr: conn.RemoteAddr(), Err: os.NewSyscallError(op, errno)}
}

// renameOp gives an error of RawConn's Read or Write ("raw-read",
// "raw-write") the operation's name net.Conn's would have, so that logs
// read the same either way.
func renameOp(err error, op string) {
	if e, ok := err.(*net.OpError); ok {
		e.Op = op
	}
}
