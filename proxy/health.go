package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cqlguard/cqlguard/frame"
)

// healthEvery is how often the health connection asks its node for
// OPTIONS. Between two asks it waits on the connection, so that a node
// that closes it, as a stopping one does, is seen at once.
const healthEvery = 2 * time.Second

// healthRetry is the wait between attempts while no node answers.
const healthRetry = time.Second

// upstreamHealth is what /readyz and cqlguard_upstream_up report: the last
// check of one connection the proxy keeps open to an upstream node for
// that purpose. A probe then costs a read of a value, not a connection to
// a node per probe, which under a kubelet's probes of every pod is a
// steady stream of connections and handshakes for the cluster to serve.
type upstreamHealth struct {
	state atomic.Pointer[healthState]
	// checked is closed after the first check, so that a probe that comes
	// before it waits for an answer instead of failing.
	checked chan struct{}
	once    sync.Once
}

// healthState is the outcome of one check.
type healthState struct {
	err  error // nil when the node answered
	addr string
	at   time.Time
}

func newUpstreamHealth() *upstreamHealth {
	return &upstreamHealth{checked: make(chan struct{})}
}

func (h *upstreamHealth) set(addr string, err error) {
	h.state.Store(&healthState{err: err, addr: addr, at: time.Now()})
	h.once.Do(func() { close(h.checked) })
}

// up reports whether the last check found a node that answers.
func (h *upstreamHealth) up() bool {
	st := h.state.Load()
	return st != nil && st.err == nil
}

// wait returns the last check's error, waiting up to timeout for the
// first check.
func (h *upstreamHealth) wait(timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-h.checked:
	case <-t.C:
		return errors.New("no upstream node checked yet")
	}
	return h.state.Load().err
}

// watchUpstreams keeps one connection to an upstream node and checks it,
// recording each outcome in p.health, until stop is closed. When its node
// stops answering it connects to the next that does, as client
// connections would.
func (p *Proxy) watchUpstreams(stop <-chan struct{}) {
	var (
		mu      sync.Mutex
		cur     *healthConn
		stopped bool
	)
	// Stopping interrupts a wait on the connection at once.
	go func() {
		<-stop
		mu.Lock()
		stopped = true
		if cur != nil {
			cur.u.conn.SetDeadline(time.Unix(1, 0))
		}
		mu.Unlock()
	}()
	use := func(c *healthConn) bool {
		mu.Lock()
		defer mu.Unlock()
		if cur != nil {
			cur.u.conn.Close()
		}
		cur = c
		if stopped && c != nil {
			c.u.conn.SetDeadline(time.Unix(1, 0))
		}
		return !stopped
	}
	defer use(nil)
	for !stopping(stop) {
		if cur == nil {
			u, addr, err := p.dialUpstream()
			if err != nil {
				p.health.set("", err)
				if !sleepUnless(stop, healthRetry) {
					return
				}
				continue
			}
			// dialUpstream has had the node answer OPTIONS already.
			u.in.Park()
			p.health.set(addr, nil)
			if !use(&healthConn{u: u, addr: addr, r: frame.NewReader(bufio.NewReaderSize(u.conn, 4<<10), 1<<20)}) {
				return
			}
			continue
		}
		// Wait on the connection, then ask the node again.
		err := cur.idle(healthEvery)
		if err == nil {
			err = cur.check(time.Duration(p.cfg.DialTimeout))
		}
		if stopping(stop) {
			return // an error here is the stop's own doing
		}
		p.health.set(cur.addr, err)
		if err != nil && !use(nil) { // another node may answer
			return
		}
	}
}

// stopping reports whether stop is closed.
func stopping(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// healthConn is the connection watchUpstreams keeps.
type healthConn struct {
	u    *upstream
	addr string
	r    *frame.Reader
}

// check asks the node for OPTIONS and reads its answer.
func (c *healthConn) check(timeout time.Duration) error {
	c.u.conn.SetDeadline(time.Now().Add(timeout))
	options := frame.AppendHeader(nil, frame.Header{Version: 4, Stream: 1, Opcode: frame.OpOptions})
	if _, err := c.u.conn.Write(options); err != nil {
		return fmt.Errorf("upstream %s: sending OPTIONS: %w", c.addr, err)
	}
	_, h, err := c.r.Next()
	if err != nil {
		return fmt.Errorf("upstream %s: reading SUPPORTED: %w", c.addr, err)
	}
	if h.Opcode != frame.OpSupported {
		return fmt.Errorf("upstream %s: answered OPTIONS with %s", c.addr, h.Opcode)
	}
	return nil
}

// idle waits for d on the connection, which should stay silent, and
// returns an error if the node closes it or sends something unasked.
func (c *healthConn) idle(d time.Duration) error {
	c.u.conn.SetReadDeadline(time.Now().Add(d))
	var b [1]byte
	n, err := c.u.conn.Read(b[:])
	var timeout interface{ Timeout() bool }
	switch {
	case n > 0:
		return fmt.Errorf("upstream %s: sent a frame unasked", c.addr)
	case errors.As(err, &timeout) && timeout.Timeout():
		return nil
	case err != nil:
		return fmt.Errorf("upstream %s: connection lost: %w", c.addr, err)
	}
	return nil
}

// sleepUnless waits for d and reports whether it passed before stop was
// closed.
func sleepUnless(stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop:
		return false
	case <-t.C:
		return true
	}
}
