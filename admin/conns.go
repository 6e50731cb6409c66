package admin

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
)

// cappedListener holds at most max of the connections it accepts open at
// once, so that the admin listener cannot take the descriptors the CQL
// listener needs. A connection accepted at the cap takes the place of the
// connection idle longest between two requests: HTTP/1.1 lets a server
// close an idle keep-alive connection at any time, and clients open a new
// one. When none is idle the accepted connection waits for one to close or
// go idle, and nothing more is accepted meanwhile: further connections
// wait in the kernel's backlog, which costs the process no descriptor.
// Closing new connections at once instead would fail a probe that a slot
// freed a moment later would have served, and would cost an accept and a
// close per connection of a flood.
//
// The http.Server serving it must have trackCapped as its ConnState hook,
// which is how the listener knows which connections are idle. Accept is called
// by one goroutine, as http.Server does.
type cappedListener struct {
	net.Listener
	max int
	// closedIdle counts idle connections closed to make room; waited,
	// connections accepted at the cap that waited for room.
	closedIdle, waited prometheus.Counter
	open               prometheus.Gauge

	mu    sync.Mutex
	n     int                    // connections open
	idle  map[*cappedConn]uint64 // idle connections, by when they went idle
	clock uint64                 // orders the idle
	// room is signalled when a connection closes or goes idle: Accept may
	// have room then. Buffered, so that a signal sent before Accept waits
	// is not lost.
	room      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func newCappedListener(ln net.Listener, max int, m *metrics) *cappedListener {
	return &cappedListener{
		Listener:   ln,
		max:        max,
		closedIdle: m.closedIdle,
		waited:     m.waited,
		open:       m.open,
		idle:       map[*cappedConn]uint64{},
		room:       make(chan struct{}, 1),
		done:       make(chan struct{}),
	}
}

// Accept accepts a connection and returns it once it fits under the cap.
func (l *cappedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		if acceptRetryable(err) {
			// http.Server retries only errors that say they are temporary.
			return nil, retryableError{err}
		}
		return nil, err
	}
	counted := false
	for {
		l.mu.Lock()
		if l.n < l.max {
			l.n++
			l.mu.Unlock()
			l.open.Inc()
			return &cappedConn{Conn: c, l: l}, nil
		}
		victim := l.longestIdle()
		l.mu.Unlock()
		if victim != nil {
			// The connection may have begun a request since it was last
			// reported idle: the race every server that closes idle
			// connections runs, and clients retry a GET that met it.
			l.closedIdle.Inc()
			victim.Close()
			continue
		}
		if !counted {
			l.waited.Inc()
			counted = true
		}
		select {
		case <-l.room:
		case <-l.done:
			c.Close()
			return nil, fmt.Errorf("accepting on %s: %w", l.Addr(), net.ErrClosed)
		}
	}
}

// Close closes the listener, and ends an Accept that waits for room.
func (l *cappedListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// longestIdle takes the connection idle longest out of the idle ones and
// returns it, nil if none is idle. l.mu is held.
func (l *cappedListener) longestIdle() *cappedConn {
	var oldest *cappedConn
	var since uint64
	for c, at := range l.idle {
		if oldest == nil || at < since {
			oldest, since = c, at
		}
	}
	delete(l.idle, oldest)
	return oldest
}

// trackCapped is the ConnState hook of an http.Server serving a
// cappedListener: it tells the listener which connections are idle.
func trackCapped(nc net.Conn, state http.ConnState) {
	if c, ok := nc.(*cappedConn); ok {
		c.l.track(c, state)
	}
}

// track notes whether c is idle between requests.
func (l *cappedListener) track(c *cappedConn, state http.ConnState) {
	l.mu.Lock()
	if state == http.StateIdle && !c.released {
		l.clock++
		l.idle[c] = l.clock
	} else {
		delete(l.idle, c)
	}
	l.mu.Unlock()
	if state == http.StateIdle {
		l.signal()
	}
}

// release notes that c closed.
func (l *cappedListener) release(c *cappedConn) {
	l.mu.Lock()
	l.n--
	c.released = true
	delete(l.idle, c)
	l.mu.Unlock()
	l.open.Dec()
	l.signal()
}

func (l *cappedListener) signal() {
	select {
	case l.room <- struct{}{}:
	default:
	}
}

// acceptRetryable reports whether accept failed for want of a resource
// that connections ending give back (descriptors of the process or of the
// system, socket buffers, kernel memory) or for a timeout: the listener
// itself is fine, and serving goes on once the failure passes. The CQL
// listener makes the same test.
func acceptRetryable(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() ||
		errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// retryableError is an accept error after which accepting again can work
// (acceptRetryable): http.Server waits and retries when an error says it
// is temporary, and returns otherwise.
type retryableError struct{ err error }

func (e retryableError) Error() string   { return e.err.Error() }
func (e retryableError) Unwrap() error   { return e.err }
func (e retryableError) Temporary() bool { return true }
func (e retryableError) Timeout() bool {
	var ne net.Error
	return errors.As(e.err, &ne) && ne.Timeout()
}

// cappedConn is a connection a cappedListener accepted; closing it makes
// room.
type cappedConn struct {
	net.Conn
	l    *cappedListener
	once sync.Once
	// released is set once the listener counts c no more, so that a late
	// report of it as idle is not kept; under l.mu.
	released bool
}

func (c *cappedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c) })
	return err
}
