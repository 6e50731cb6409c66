package relay

import (
	"context"
	"fmt"
	"log"
	"net"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"
)

// EventLoop is the relay run as HAProxy runs with nbthread 1: one event
// loop (gnet's, over epoll) accepts the clients, dials their upstream
// connections and moves every byte between them, with no goroutine per
// connection. Next to Serve it measures what the Go runtime's scheduler
// and netpoller cost a relay: the loop's goroutine handles each readiness
// itself, where Serve's wakes the goroutine parked on the socket.
//
// The bytes pass through the loop's buffer (read(2) then write(2)), not
// splice(2). Bytes for a side that cannot take them at once wait in that
// side's buffer, which grows without bound: the relay never stops reading
// the other side. The end of either side (EOF or an error) ends both: gnet
// closes a socket it reads EOF on, so there is no half close to pass on;
// what is still buffered for the other side is written out as far as it
// goes without blocking, then that side is closed too.
type EventLoop struct {
	addr   net.Addr
	engine gnet.Engine
	done   chan error
}

// ListenEventLoop listens on addr and relays each connection accepted to a
// new connection to upstream until Close. A connection to upstream that
// fails closes the client's.
func ListenEventLoop(addr, upstream string) (*EventLoop, error) {
	up, err := net.ResolveTCPAddr("tcp", upstream)
	if err != nil {
		return nil, fmt.Errorf("event-loop relay: upstream %q: %w", upstream, err)
	}
	h := &loopHandler{upstream: up, booted: make(chan gnet.Engine, 1)}
	e := &EventLoop{done: make(chan error, 1)}
	go func() {
		// Not locked to its thread: gnet's loop yields (runtime.Gosched)
		// whenever a poll finds nothing, and a locked goroutine's yield
		// hands the P to another thread and back through futexes, which
		// cost more than a third of the loop's time under the gocql load.
		e.done <- gnet.Run(h, "tcp://"+addr,
			gnet.WithMulticore(false), gnet.WithNumEventLoop(1),
			gnet.WithTCPNoDelay(gnet.TCPNoDelay),
			gnet.WithLogger(errorLogger{}))
	}()
	select {
	case e.engine = <-h.booted:
	case err := <-e.done:
		return nil, fmt.Errorf("event-loop relay: %w", err)
	}
	if e.addr, err = listenAddr(e.engine); err != nil {
		e.Close()
		return nil, fmt.Errorf("event-loop relay: %w", err)
	}
	return e, nil
}

// Addr is the address the relay listens on.
func (e *EventLoop) Addr() net.Addr { return e.addr }

// Close stops the loop, closing the listener and every connection it
// relays, and returns once it has stopped.
func (e *EventLoop) Close() error {
	// Stop polls for the end every half second; the end of Run says it
	// at once, so Stop is cut short then.
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		e.engine.Stop(ctx)
		close(stopped)
	}()
	err := <-e.done
	cancel()
	<-stopped
	if err != nil {
		return fmt.Errorf("event-loop relay: %w", err)
	}
	return nil
}

// listenAddr reads the bound address off the engine's listener, which
// gnet does not report: with port 0 only the socket knows its port.
func listenAddr(eng gnet.Engine) (net.Addr, error) {
	fd, err := eng.Dup()
	if err != nil {
		return nil, fmt.Errorf("listener: %w", err)
	}
	defer unix.Close(fd)
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return nil, fmt.Errorf("listener address: %w", err)
	}
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(sa.Addr[:]), Port: sa.Port}, nil
	case *unix.SockaddrInet6:
		return &net.TCPAddr{IP: net.IP(sa.Addr[:]), Port: sa.Port}, nil
	}
	return nil, fmt.Errorf("listener address %T: not TCP", sa)
}

// link is one client connection and the upstream connection dialled for
// it; both carry it as their context. It is touched on the loop only.
type link struct {
	client, up gnet.Conn // up is nil until its connection is open
	closed     bool
}

// peer is the other side of c.
func (l *link) peer(c gnet.Conn) gnet.Conn {
	if c == l.client {
		return l.up
	}
	return l.client
}

// loopHandler is the relay's handler of gnet's events, all of which run
// on the one loop.
type loopHandler struct {
	gnet.BuiltinEventEngine
	upstream net.Addr
	booted   chan gnet.Engine
}

func (h *loopHandler) OnBoot(eng gnet.Engine) gnet.Action {
	h.booted <- eng
	return gnet.None
}

// OnOpen links a new client to an upstream connection, which gnet dials
// off the loop and then opens on it; the upstream's opening sends what
// the client sent meanwhile.
func (h *loopHandler) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	if l, ok := c.Context().(*link); ok {
		if l.closed {
			return nil, gnet.Close
		}
		l.up = c
		if l.client.InboundBuffered() == 0 {
			return nil, gnet.None
		}
		early, _ := l.client.Next(-1)
		return early, gnet.None
	}
	l := &link{client: c}
	c.SetContext(l)
	loop := c.EventLoop()
	opened, err := loop.Register(gnet.NewContext(context.Background(), l), h.upstream)
	if err != nil {
		return nil, gnet.Close
	}
	go func() {
		if res := <-opened; res.Err != nil {
			loop.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
				if !l.closed {
					l.closed = true
					return loop.Close(l.client)
				}
				return nil
			}))
		}
	}()
	return nil, gnet.None
}

// OnTraffic writes what c gave to its peer; before the upstream is open,
// the client's bytes stay in its buffer.
func (h *loopHandler) OnTraffic(c gnet.Conn) gnet.Action {
	l := c.Context().(*link)
	peer := l.peer(c)
	if peer == nil {
		return gnet.None
	}
	b, _ := c.Next(-1)
	peer.Write(b)
	if l.closed {
		// The write failed and closed both sides.
		return gnet.Close
	}
	return gnet.None
}

// OnClose closes c's peer, once.
func (h *loopHandler) OnClose(c gnet.Conn, _ error) gnet.Action {
	l, ok := c.Context().(*link)
	if !ok || l.closed {
		return gnet.None
	}
	l.closed = true
	if peer := l.peer(c); peer != nil {
		c.EventLoop().Close(peer)
	}
	return gnet.None
}

// errorLogger passes on gnet's errors only: its information (a line at
// every start) would go into the bench's output.
type errorLogger struct{}

func (errorLogger) Debugf(string, ...any)        {}
func (errorLogger) Infof(string, ...any)         {}
func (errorLogger) Warnf(string, ...any)         {}
func (errorLogger) Errorf(f string, args ...any) { log.Printf("event-loop relay: "+f, args...) }
func (errorLogger) Fatalf(f string, args ...any) { log.Fatalf("event-loop relay: "+f, args...) }
