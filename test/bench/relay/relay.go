// Package relay is the floor the benchmark measures cqlguard against: a
// TCP relay that copies bytes between each client and one upstream and does
// nothing else. It looks at no byte, so what it costs per request is the
// wake-ups and system calls any proxy in a separate process pays.
//
// Serve, the Go relay, runs two goroutines per connection, each direction
// one io.Copy, which between two TCP connections on Linux moves the bytes
// with splice(2) through a pipe, without copying them into the process.
// ListenEventLoop starts the same relay on one event loop with no
// goroutine per connection, as HAProxy runs with one thread: the two side
// by side tell what the Go scheduler and netpoller cost per request.
package relay

import (
	"errors"
	"io"
	"net"
)

// Serve accepts connections on ln until it is closed, and relays each to a
// new connection to upstream. A connection to upstream that fails closes
// the client's. Serve returns nil once ln is closed; the connections it
// relays then go on until either side ends them.
func Serve(ln net.Listener, upstream string) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go relay(c, upstream)
	}
}

// relay copies between client and a new connection to upstream until both
// directions end. The end of one direction is passed on as a half close, so
// that the other can still deliver what it carries.
func relay(client net.Conn, upstream string) {
	defer client.Close()
	up, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{})
	go func() {
		io.Copy(up, client)
		closeWrite(up)
		close(done)
	}()
	io.Copy(client, up)
	closeWrite(client)
	<-done
}

// closeWrite shuts the writing side of c, or closes c when it has none to
// shut alone.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}
