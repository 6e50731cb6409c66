package transport

import (
	"crypto/tls"
	"net"
)

// TLSServer is tls.Server over conn, with conn read and written as a
// SockReader and a Writer read and write a plain socket: with raw system
// calls, telling the stall hook of a Writer of the returned connection
// (see SetStall) when a write waits for room, and the before-wait hook of
// a SockReader of it (see SetBeforeWait) when a read finds conn empty,
// which tls.Conn's own reads and writes cannot.
func TLSServer(conn net.Conn, conf *tls.Config) *tls.Conn {
	return tls.Server(newSockConn(conn), conf)
}

// TLSClient is tls.Client over conn, which it reads and writes as
// TLSServer does.
func TLSClient(conn net.Conn, conf *tls.Config) *tls.Conn {
	return tls.Client(newSockConn(conn), conf)
}

// sockConn is the socket under a TLS connection of TLSServer or TLSClient.
type sockConn struct {
	net.Conn
	in  *SockReader
	out *sockWriter
}

func newSockConn(conn net.Conn) *sockConn {
	return &sockConn{Conn: conn, in: NewSockReader(conn), out: newSockWriter(conn)}
}

func (c *sockConn) Read(b []byte) (int, error)  { return c.in.Read(b) }
func (c *sockConn) Write(b []byte) (int, error) { return c.out.Write(b) }

// under returns the reader of the socket under conn, when conn is a TLS
// connection of TLSServer or TLSClient over a socket raw calls read; else
// nil.
func under(conn net.Conn) *SockReader {
	if c, ok := conn.(*tls.Conn); ok {
		if sc, ok := c.NetConn().(*sockConn); ok && sc.in.raw != nil {
			return sc.in
		}
	}
	return nil
}
