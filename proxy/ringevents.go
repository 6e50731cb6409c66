package proxy

// Following the cluster: a connection of the proxy's own to one of the
// upstreams, registered for the cluster's topology, status and schema
// events, so that routing hears of a node added or removed, gone down or
// back up, or a keyspace's replication changed when the cluster does,
// rather than at the next read of the ring (routing.refresh). A topology
// change, or a keyspace's schema change, has the ring read again; a node
// said UP is no longer avoided, and one said DOWN is avoided as one the
// proxy could not reach. It logs in as the schema reader does; the schema
// reader's own gocql session hears only of the upstreams' events, as it
// filters every other node out.

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/frame"
)

// ringEvents follows the events of the cluster of addrs, each tried in
// turn until one takes the registration.
type ringEvents struct {
	addrs              []string
	username, password string
	tls                *tls.Config
	// timeout bounds a dial, the login, and the wait for anything from
	// the node past a heartbeat.
	timeout time.Duration
	// stale asks for the ring to be read again; up and down say that a
	// node, as host:port, is up or down.
	stale    func()
	up, down func(node string)
	// heartbeat is how often the connection is asked OPTIONS, so that a
	// node that stops answering without closing it is left.
	heartbeat time.Duration
	// retry is how long after a connection ends, or fails to follow, the
	// next upstream is tried: a cluster that is gone is not dialed in a
	// loop.
	retry time.Duration
	log   zerolog.Logger
}

// eventsHeartbeat is how often an events connection is asked OPTIONS.
const eventsHeartbeat = 30 * time.Second

// eventsVersion is the protocol version of an events connection: every
// node that speaks v5 speaks v4, whose frames need no segments.
const eventsVersion = 4

// run follows the cluster's events until ctx ends.
func (e *ringEvents) run(ctx context.Context) {
	failing := false
	for i := 0; ctx.Err() == nil; i++ {
		addr := e.addrs[i%len(e.addrs)]
		err := e.follow(ctx, addr, func() {
			if failing {
				e.log.Info().Str("node", addr).Msg("following the cluster's events again")
			}
			failing = false
		})
		if ctx.Err() != nil {
			return
		}
		// Said once until it follows again.
		ev := e.log.Debug()
		if !failing {
			ev = e.log.Warn()
		}
		failing = true
		ev.Err(err).Str("node", addr).Msg("not following the cluster's events; the ring is read every routing.refresh meanwhile")
		select {
		case <-ctx.Done():
			return
		case <-time.After(e.retry):
		}
	}
}

// follow registers for the cluster's events on a connection to addr,
// calls registered once it has, and handles the events until the
// connection ends, or ctx does.
func (e *ringEvents) follow(ctx context.Context, addr string, registered func()) error {
	d := net.Dialer{Timeout: e.timeout}
	var conn net.Conn
	var err error
	if e.tls != nil {
		td := tls.Dialer{NetDialer: &d, Config: e.tls}
		conn, err = td.DialContext(ctx, "tcp", addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	// Events are small: a frame over 64 KiB is no node's.
	r := frame.NewReader(bufio.NewReader(conn), 64<<10)
	conn.SetDeadline(time.Now().Add(e.timeout))
	if err := e.logIn(conn, r); err != nil {
		return err
	}
	if err := roundTrip(conn, r, frame.AppendRegisterRequest(nil, eventsVersion, 0,
		frame.EventTopologyChange, frame.EventStatusChange, frame.EventSchemaChange), frame.OpReady); err != nil {
		return fmt.Errorf("REGISTER: %w", err)
	}
	conn.SetDeadline(time.Time{})
	registered()
	// What changed while no connection followed is read now.
	e.stale()
	done := make(chan struct{})
	defer close(done)
	go func() {
		beats := time.NewTicker(e.heartbeat)
		defer beats.Stop()
		options := frame.AppendHeader(nil, frame.Header{Version: eventsVersion, Stream: 1, Opcode: frame.OpOptions})
		for {
			select {
			case <-done:
				return
			case <-beats.C:
			}
			if _, err := conn.Write(options); err != nil {
				return // the reader finds the connection closed
			}
		}
	}()
	for {
		// The heartbeat's answer comes within a heartbeat and a timeout,
		// if nothing else does.
		conn.SetReadDeadline(time.Now().Add(e.heartbeat + e.timeout))
		f, h, err := r.Next()
		if err != nil {
			return err
		}
		if h.Opcode != frame.OpEvent {
			continue // the heartbeat's SUPPORTED
		}
		ev, err := frame.ParseEvent(f[frame.HeaderSize:], h)
		if err != nil {
			e.log.Debug().Err(err).Msg("an event that cannot be read; the ring is read again")
			e.stale()
			continue
		}
		e.handle(ev)
	}
}

// logIn sends STARTUP on conn, and the login of the schema reader if the
// node asks for one.
func (e *ringEvents) logIn(conn net.Conn, r *frame.Reader) error {
	if _, err := conn.Write(frame.AppendStartupRequest(nil, eventsVersion, 0)); err != nil {
		return err
	}
	_, h, err := r.Next()
	switch {
	case err != nil:
		return fmt.Errorf("STARTUP: %w", err)
	case h.Opcode == frame.OpReady:
		return nil
	case h.Opcode != frame.OpAuthenticate:
		return fmt.Errorf("STARTUP answered with %s", h.Opcode)
	case e.username == "":
		return errors.New("the node asks for a login, and schema.username is empty")
	}
	token := append(append(append([]byte{0}, e.username...), 0), e.password...)
	err = roundTrip(conn, r, frame.AppendAuthResponse(nil, eventsVersion, 0, token), frame.OpAuthSuccess)
	clear(token)
	if err != nil {
		return fmt.Errorf("AUTH_RESPONSE: %w", err)
	}
	return nil
}

// roundTrip writes the request f on conn and wants an answer of opcode
// want.
func roundTrip(conn net.Conn, r *frame.Reader, f []byte, want frame.Opcode) error {
	if _, err := conn.Write(f); err != nil {
		return err
	}
	_, h, err := r.Next()
	if err != nil {
		return err
	}
	if h.Opcode != want {
		return fmt.Errorf("answered with %s", h.Opcode)
	}
	return nil
}

// handle does what the event ev says.
func (e *ringEvents) handle(ev frame.Event) {
	switch string(ev.Type) {
	case frame.EventTopologyChange:
		e.stale()
	case frame.EventStatusChange:
		ip, ok := netip.AddrFromSlice(ev.Addr) // 4 or 16 bytes, as ParseEvent checked
		if !ok || ev.Port < 0 || ev.Port > 65535 {
			e.log.Debug().Str("change", string(ev.Change)).Int32("port", ev.Port).Msg("an event that says nothing known, of a port out of range; ignored")
			return
		}
		// As a ring names its nodes.
		node := netip.AddrPortFrom(ip.Unmap(), uint16(ev.Port)).String()
		switch string(ev.Change) {
		case "UP":
			e.up(node)
		case "DOWN":
			e.down(node)
		default:
			// The protocol has no other status: a node is not avoided on
			// a word the proxy does not know.
			e.log.Debug().Str("change", string(ev.Change)).Str("node", node).Msg("an event that says nothing known, of a status neither UP nor DOWN; ignored")
		}
	case frame.EventSchemaChange:
		// A keyspace's replication places its replicas; a table's change
		// does not.
		if string(ev.Target) == "KEYSPACE" {
			e.stale()
		}
	}
}
