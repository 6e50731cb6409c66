package proxy

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/cqlguard/cqlguard/frame"
)

// upstreamConn is a fresh connection to an upstream node.
type upstreamConn struct {
	conn           net.Conn
	in             *lazyReader
	rateLimitError bool // the node advertises SCYLLA_RATE_LIMIT_ERROR
	lwtMark        bool // the node advertises SCYLLA_LWT_ADD_METADATA_MARK
}

// dialUpstream connects to addr and asks for its SUPPORTED options, so that
// the proxy knows, before the driver's STARTUP, whether the node takes the
// rate-limit opt-in. The OPTIONS exchange uses v4 framing, which every node
// that speaks v4 or v5 accepts before STARTUP.
func dialUpstream(addr string, timeout time.Duration, tlsConf *tls.Config, bufs *readBuffers) (*upstreamConn, error) {
	d := &net.Dialer{Timeout: timeout}
	var c net.Conn
	var err error
	if tlsConf != nil {
		c, err = tls.DialWithDialer(d, "tcp", addr, tlsConf)
	} else {
		c, err = d.Dial("tcp", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("dialing upstream %s: %w", addr, err)
	}
	in := newSockReader(c)
	u := &upstreamConn{conn: c, in: newLazyReader(in, in, bufs)}
	u.in.take()
	c.SetDeadline(time.Now().Add(timeout))
	options := frame.AppendHeader(nil, frame.Header{Version: 4, Stream: 0, Opcode: frame.OpOptions})
	if _, err := c.Write(options); err != nil {
		c.Close()
		u.in.park()
		return nil, fmt.Errorf("upstream %s: sending OPTIONS: %w", addr, err)
	}
	r := frame.NewReader(u.in.br, 1<<20)
	f, h, err := r.Next()
	if err != nil {
		c.Close()
		u.in.park()
		return nil, fmt.Errorf("upstream %s: reading SUPPORTED: %w", addr, err)
	}
	if h.Opcode == frame.OpSupported {
		u.rateLimitError, _ = frame.SupportedHas(f[frame.HeaderSize:], h, rateLimitKey)
		u.lwtMark, _ = frame.SupportedHas(f[frame.HeaderSize:], h, lwtMarkKey)
	}
	c.SetDeadline(time.Time{})
	return u, nil
}

// refuseTimeout is how long a refused connection is given to send its
// first frame and read the answer: a driver sends one as soon as it is
// connected.
const refuseTimeout = 5 * time.Second

// refuseConn answers a client's first frame with a server error and closes the
// connection, for when no upstream node can serve it or there are too
// many connections. A TLS connection whose handshake is not done yet does
// it within the same deadline.
func (p *Proxy) refuseConn(c net.Conn, msg string) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(p.refuseTimeout))
	_, h, err := frame.NewReader(bufio.NewReader(c), int(p.cfg.MaxFrameBytes)).Next()
	var tooLarge *frame.TooLargeError
	if err != nil && !errors.As(err, &tooLarge) {
		return
	}
	b := frame.AppendError(nil, h.Version, h.Stream, frame.ErrCodeServer, msg)
	p.metrics.frame(dirResponse, frame.OpError, len(b))
	c.Write(b)
}

// readBufSize is the size of a connection's read buffer while bytes arrive:
// a burst of pipelined frames is read with one system call.
const readBufSize = 16 << 10

// readBuffers are the read buffers of a proxy's connections. A connection
// holds one only while it has bytes to read (see lazyReader): idle
// connections, the many a driver keeps open, hold none.
type readBuffers struct{ pool sync.Pool }

// get returns a buffered reader of rd.
func (b *readBuffers) get(rd io.Reader) *bufio.Reader {
	br, _ := b.pool.Get().(*bufio.Reader)
	if br == nil {
		return bufio.NewReaderSize(rd, readBufSize)
	}
	br.Reset(rd)
	return br
}

// put gives back br, which nothing reads any more.
func (b *readBuffers) put(br *bufio.Reader) {
	br.Reset(nil)
	b.pool.Put(br)
}

// lazyReader keeps the bufio.Reader that a frame.Reader reads through (br)
// without a buffer while the connection is idle. Between frames, with
// nothing buffered, park gives the buffer back and wait blocks on the
// connection with a small array of the lazyReader's own; when bytes come,
// it takes a buffer again and br reads those bytes first, then the
// connection. A burst of frames keeps its buffer: the request and response
// paths park only when they have read everything that arrived, so a
// pipelining client costs one pool round trip per burst, a request-response
// one per request (tens of nanoseconds, no allocation).
//
// On a plain socket (not TLS), wait tries the small array once; when the
// socket is empty it waits for it to become readable without reading
// (sockReader.ReadOrWait), and br then reads what came straight into its
// buffer: one read system call per burst however long, where reading into
// the small array first would take a second one for every burst longer
// than it.
type lazyReader struct {
	br     *bufio.Reader // the frame.Reader's; the zero Reader while parked
	held   *bufio.Reader // whose buffer br uses while not parked
	bufs   *readBuffers
	src    io.Reader
	sock   *sockReader // the socket src reads, when raw calls can wait on it; else nil
	head   [512]byte   // read while parked
	off, n int         // head[off:n] is yet to be read through br
	err    error       // the error of the parked read, after head
}

// newLazyReader returns a parked lazyReader of src, which reads through
// sock, taking buffers from bufs.
func newLazyReader(src io.Reader, sock *sockReader, bufs *readBuffers) *lazyReader {
	l := &lazyReader{br: new(bufio.Reader), bufs: bufs, src: src}
	if sock.raw != nil {
		l.sock = sock
	}
	return l
}

// take gives br a buffer without waiting for bytes.
func (l *lazyReader) take() {
	if l.held == nil {
		l.held = l.bufs.get(l)
		*l.br = *l.held
	}
}

// park gives back br's buffer; br must have nothing buffered.
func (l *lazyReader) park() {
	if l.held == nil {
		return
	}
	*l.br = bufio.Reader{}
	l.bufs.put(l.held)
	l.held = nil
}

// wait blocks until the connection has bytes, or fails, and gives br a
// buffer to read them with. A failure is br's to return, after the bytes.
// It reports false when bytes were there already, true when it waited for
// them or cannot tell.
func (l *lazyReader) wait() bool {
	if l.held != nil {
		return false
	}
	l.off = 0
	waited := true
	if l.sock == nil {
		l.n, l.err = l.src.Read(l.head[:])
	} else {
		l.n, l.err = l.sock.ReadOrWait(l.head[:])
		waited = l.n == 0 && l.err == nil
	}
	l.take()
	return waited
}

// Read is br's source: the bytes read while parked, then the connection.
func (l *lazyReader) Read(b []byte) (int, error) {
	if l.off < l.n {
		n := copy(b, l.head[l.off:l.n])
		l.off += n
		return n, nil
	}
	if l.err != nil {
		err := l.err
		l.err = nil
		return 0, err
	}
	return l.src.Read(b)
}
