package transport

import (
	"crypto/tls"
	"net"
)

// TLSServer is tls.Server over conn, with conn written as a Writer writes
// a plain socket: with raw system calls, and telling the stall hook of a
// Writer of the returned connection (see SetStall) when a write waits for
// room, which tls.Conn's own writes cannot.
func TLSServer(conn net.Conn, conf *tls.Config) *tls.Conn {
	return tls.Server(&stallConn{Conn: conn, out: newSockWriter(conn)}, conf)
}

// stallConn is the socket under a TLSServer connection.
type stallConn struct {
	net.Conn
	out *sockWriter
}

func (c *stallConn) Write(b []byte) (int, error) { return c.out.Write(b) }
