package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/datastax/go-cassandra-native-protocol/primitive"

	"github.com/cqlguard/cqlguard/frame"
)

// errTooManyFiles is accept's error when the process is out of descriptors.
var errTooManyFiles = syscall.EMFILE

// upstreamConn is a fresh connection to an upstream node.
type upstreamConn struct {
	conn           net.Conn
	br             *bufio.Reader
	rateLimitError bool // the node advertises SCYLLA_RATE_LIMIT_ERROR
}

// dialUpstream connects to addr and asks for its SUPPORTED options, so that
// the proxy knows, before the driver's STARTUP, whether the node takes the
// rate-limit opt-in. The OPTIONS exchange uses v4 framing, which every node
// that speaks v4 or v5 accepts before STARTUP.
func dialUpstream(addr string, timeout time.Duration, tlsConf *tls.Config) (*upstreamConn, error) {
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
	u := &upstreamConn{conn: c, br: bufio.NewReaderSize(c, 16<<10)}
	c.SetDeadline(time.Now().Add(timeout))
	options := frame.AppendHeader(nil, frame.Header{Version: 4, Stream: 0, Opcode: frame.OpOptions})
	if _, err := c.Write(options); err != nil {
		c.Close()
		return nil, fmt.Errorf("upstream %s: sending OPTIONS: %w", addr, err)
	}
	r := frame.NewReader(u.br, 1<<20)
	f, h, err := r.Next()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("upstream %s: reading SUPPORTED: %w", addr, err)
	}
	if h.Opcode == frame.OpSupported {
		opts, err := primitive.ReadStringMultiMap(bytes.NewReader(f[frame.HeaderSize:]))
		if err == nil {
			_, u.rateLimitError = opts[rateLimitKey]
		}
	}
	c.SetDeadline(time.Time{})
	return u, nil
}

// versionError is the ERROR Cassandra sends for a protocol version it does
// not speak, in a header the driver can read: the 8-byte v1/v2 layout for
// older versions, v4 for newer ones.
func versionError(e *frame.UnsupportedVersionError) []byte {
	if e.Version >= 1 && e.Version < 3 {
		msg := e.Error()
		b := []byte{e.Version | 0x80, 0, 0, byte(frame.OpError), 0, 0, 0, 0}
		b = append(b, 0, 0, 0, byte(frame.ErrCodeProtocol), byte(len(msg)>>8), byte(len(msg)))
		b = append(b, msg...)
		n := len(b) - 8
		b[4], b[5], b[6], b[7] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
		return b
	}
	return frame.AppendError(nil, 4, 0, frame.ErrCodeProtocol, e.Error())
}

// refuse answers a client's first frame with a server error and closes the
// connection, for when no upstream node can serve it.
func refuse(c net.Conn, maxFrame int, msg string) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	_, h, err := frame.NewReader(bufio.NewReader(c), maxFrame).Next()
	var tooLarge *frame.TooLargeError
	if err != nil && !errors.As(err, &tooLarge) {
		return
	}
	c.Write(frame.AppendError(nil, h.Version, h.Stream, frame.ErrCodeServer, msg))
}
