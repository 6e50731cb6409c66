package transport

import (
	"bufio"
	"io"
	"sync"
)

// readBufSize is the size of a connection's read buffer while bytes arrive:
// a burst of pipelined frames is read with one system call.
const readBufSize = 16 << 10

// ReadBuffers are the read buffers of many connections' LazyReaders. A
// connection holds one only while it has bytes to read: idle connections,
// the many a driver keeps open, hold none. The zero value is ready to use.
type ReadBuffers struct{ pool sync.Pool }

// get returns a buffered reader of rd.
func (b *ReadBuffers) get(rd io.Reader) *bufio.Reader {
	br, _ := b.pool.Get().(*bufio.Reader)
	if br == nil {
		return bufio.NewReaderSize(rd, readBufSize)
	}
	br.Reset(rd)
	return br
}

// put gives back br, which nothing reads any more.
func (b *ReadBuffers) put(br *bufio.Reader) {
	br.Reset(nil)
	b.pool.Put(br)
}

// LazyReader keeps the bufio.Reader that a connection is read through
// (Reader) without a buffer while the connection is idle. Between frames,
// with nothing buffered, Park gives the buffer back and Wait blocks on the
// connection with a small array of the LazyReader's own; when bytes come,
// it takes a buffer again and the Reader reads those bytes first, then the
// connection. A burst of frames keeps its buffer: a reader that parks only
// when it has read everything that arrived costs one pool round trip per
// burst for a pipelining client, per request for a request-response one
// (tens of nanoseconds, no allocation).
//
// On a plain socket (not TLS), Wait tries the small array once; when the
// socket is empty it waits for it to become readable without reading, and
// the Reader then reads what came straight into its buffer: one read system
// call per burst however long, where reading into the small array first
// would take a second one for every burst longer than it.
type LazyReader struct {
	br     *bufio.Reader // Reader's; the zero Reader while parked
	held   *bufio.Reader // whose buffer br uses while not parked
	bufs   *ReadBuffers
	src    io.Reader
	conn   *SockReader // what src reads the connection through
	sock   *SockReader // conn, when raw calls can wait on it; else nil
	head   [512]byte   // read while parked
	off, n int         // head[off:n] is yet to be read through br
	err    error       // the error of the parked read, after head
}

// NewLazyReader returns a parked LazyReader of src, taking buffers from
// bufs. src reads the connection through sock, or is sock: a reader that
// does more than sock's Read (sets deadlines, say) wraps it.
func NewLazyReader(src io.Reader, sock *SockReader, bufs *ReadBuffers) *LazyReader {
	l := &LazyReader{br: new(bufio.Reader), bufs: bufs, src: src, conn: sock}
	if sock.raw != nil {
		l.sock = sock
	}
	return l
}

// Reader returns the buffered reader to read the connection through. It is
// the same reader for the LazyReader's life, parked or not.
func (l *LazyReader) Reader() *bufio.Reader { return l.br }

// Unread returns how many bytes the connection holds that no read has
// taken yet, false when it cannot tell (TLS, not a socket): see
// SockReader.Unread. Unlike the rest of a LazyReader, any goroutine may
// call it.
func (l *LazyReader) Unread() (int, bool) {
	if l.sock == nil {
		return 0, false
	}
	return l.sock.Unread()
}

// SetBeforeWait has fn called when the Reader, part way through what it
// reads, finds the connection empty and is about to wait for it: see
// SockReader.SetBeforeWait, which also says when it is called on TLS
// (Wait's reads too).
func (l *LazyReader) SetBeforeWait(fn func()) { l.conn.SetBeforeWait(fn) }

// Take gives the Reader a buffer without waiting for bytes.
func (l *LazyReader) Take() {
	if l.held == nil {
		l.held = l.bufs.get((*lazySource)(l))
		*l.br = *l.held
	}
}

// Park gives back the Reader's buffer; the Reader must have nothing
// buffered.
func (l *LazyReader) Park() {
	if l.held == nil {
		return
	}
	*l.br = bufio.Reader{}
	l.bufs.put(l.held)
	l.held = nil
}

// Wait blocks until the connection has bytes, or fails, and gives the
// Reader a buffer to read them with. A failure is the Reader's to return,
// after the bytes. It reports false when bytes were there already, true
// when it waited for them or cannot tell.
func (l *LazyReader) Wait() bool {
	if l.held != nil {
		return false
	}
	l.off = 0
	waited := true
	if l.sock == nil {
		l.n, l.err = l.src.Read(l.head[:])
	} else {
		l.n, l.err = l.sock.readOrWait(l.head[:])
		waited = l.n == 0 && l.err == nil
	}
	l.Take()
	return waited
}

// lazySource is a LazyReader as its Reader's source, which nothing else
// reads.
type lazySource LazyReader

// Read reads the bytes read while parked, then the connection.
func (s *lazySource) Read(b []byte) (int, error) {
	if s.off < s.n {
		n := copy(b, s.head[s.off:s.n])
		s.off += n
		return n, nil
	}
	if s.err != nil {
		err := s.err
		s.err = nil
		return 0, err
	}
	return s.src.Read(b)
}
