package proxy

// A node may forget a statement routing prepared on it (legs.go): its
// cache evicts it, a schema change drops it, or it restarts while the
// session's connection to it survives. It then answers an EXECUTE or a
// BATCH of it Unprepared. The client prepared the statement on its
// connection's first node, not there, and a client that does not prepare
// again on Unprepared would fail, one that does would pay a round trip
// for what is the proxy's own business. So the proxy prepares the
// request's statements on that connection again, on the request's stream,
// and sends the request again, as it was sent the first time; the client
// gets the answer to that. It does so once per request: a second
// Unprepared, or a PREPARE the node refuses, gives the client the node's
// Unprepared answer, as without routing.

import (
	"bytes"
	"slices"
	"sync"

	"github.com/cqlguard/cqlguard/classify"
	"github.com/cqlguard/cqlguard/frame"
)

// resend is what the proxy keeps of an EXECUTE, or a BATCH of prepared
// statements, it routed to another node than its connection's first,
// while it is in flight: what it needs to prepare its statements there
// again and send it again.
type resend struct {
	// frame is the request as it was written to the node: compressed as
	// it was, framed in segments by the connection's writer.
	frame []byte
	// stmts are the prepared statements the request runs, in its order;
	// a BATCH may name one more than once.
	stmts []*classify.Prepared
	// keyspace is the session's keyspace when the request was sent, which
	// its connection was brought to (ready): the connection's keyspace as
	// long as the session's is the same.
	keyspace *[]byte
	// unprepared is the node's Unprepared answer, kept while the
	// statements are prepared again, for the client if they cannot be;
	// next is the statement whose PREPARE is in flight.
	unprepared []byte
	next       int
	state      resendState
}

// Where a request kept for resending is.
type resendState uint8

const (
	resendSent      resendState = iota // sent once: an Unprepared answer is the proxy's
	resendPreparing                    // its statements being prepared again: the answer is a PREPARE's
	resendDone                         // sent again, or given up: its answer is the client's
)

// resends are a session's resend buffers not in use.
//
// Keeping a request's frame until its answer costs a copy of it, so it is
// kept only for the requests routed to another node, and in buffers the
// session reuses, so that the request path allocates nothing for it once
// they are. What they hold follows what is in flight: a buffer that held
// more than largeFrame is let go of once its request is answered, and
// every buffer once a watchdog tick has passed without a routed request.
// The request path takes buffers, and whoever ends a request (under the
// session's mu) gives them back: mu is theirs alone.
type resends struct {
	mu   sync.Mutex
	free []*resend
	used bool // a buffer was taken since the last tick
}

// take returns a buffer, empty.
func (p *resends) take() *resend {
	p.mu.Lock()
	p.used = true
	var r *resend
	if n := len(p.free); n > 0 {
		r = p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
	}
	p.mu.Unlock()
	if r == nil {
		r = new(resend)
	}
	return r
}

// give takes back r, whose request is no longer in flight.
func (p *resends) give(r *resend) {
	if cap(r.frame)+cap(r.unprepared) > largeFrame {
		return // not kept for the next request
	}
	clear(r.stmts)
	*r = resend{frame: r.frame[:0], stmts: r.stmts[:0], unprepared: r.unprepared[:0]}
	p.mu.Lock()
	p.free = append(p.free, r)
	p.mu.Unlock()
}

// shrinkIdle is the watchdog's, on every tick: it lets go of every buffer
// when none was taken since the last tick.
func (p *resends) shrinkIdle() {
	p.mu.Lock()
	if !p.used {
		p.free = nil
	}
	p.used = false
	p.mu.Unlock()
}

// keepForResend returns what to keep of the request req of header h,
// whose frame f is about to be sent to another node than the session's
// first, to send it again there, or, hedged, to another replica (hedge.go);
// nil for a request that runs no prepared statement and is not hedged.
// batch are a BATCH's prepared statements. Request path only.
func (s *session) keepForResend(f []byte, h frame.Header, req *request, batch []*classify.Prepared, hedged bool) *resend {
	switch {
	case h.Opcode == frame.OpExecute && req.prepared != nil && req.prepared.ID() != nil:
	case h.Opcode == frame.OpBatch && len(batch) > 0:
	case hedged:
		// A read that may be hedged (hedge.go) is sent again as it was.
	default:
		return nil
	}
	rs := s.resends.take()
	rs.frame = append(rs.frame, f...)
	if h.Opcode == frame.OpExecute {
		rs.stmts = append(rs.stmts, req.prepared)
	} else {
		rs.stmts = append(rs.stmts, batch...)
	}
	rs.keyspace = s.keyspace.Load()
	return rs
}

// resent handles the answer f (h) from u, a connection to another node,
// to the request e, kept for resending. It returns send, a frame for u on
// e's stream (a PREPARE, or e's request again) when the answer is the
// proxy's own; or else the answer the client gets, f or the node's
// Unprepared answer that came before. s.mu and s.respMu are held.
func (s *session) resent(u *upstream, e *request, f []byte, h frame.Header, comp frame.Compression) (send, answer []byte, ah frame.Header) {
	rs := e.resend
	switch rs.state {
	case resendSent:
		// Not for a request sent after the session changed keyspace,
		// which u may no longer be in: the client prepares again, as
		// without routing.
		if h.Opcode != frame.OpError || !s.unpreparedAnswer(f, h, comp) || s.keyspace.Load() != rs.keyspace {
			return nil, f, h
		}
		rs.unprepared = append(rs.unprepared[:0], f...)
		rs.state, rs.next = resendPreparing, 0
		s.p.metrics.reprepares.Inc()
		s.log.Debug().Str("node", u.addr).Int16("stream", h.Stream).Msg("replica answered Unprepared; preparing the request's statements there again")
	case resendPreparing:
		if h.Opcode != frame.OpResult || !s.preparedAs(f, h, comp, rs.stmts[rs.next].ID()) {
			answer, ah = s.gaveUp(u, rs, "the replica did not prepare a statement again")
			return nil, answer, ah
		}
		rs.next++
	default:
		return nil, f, h
	}
	send, ok := rs.nextPrepare(h.Version, h.Stream)
	switch {
	case !ok:
		answer, ah = s.gaveUp(u, rs, "a statement cannot be prepared again in its keyspace on the replica")
		return nil, answer, ah
	case send == nil:
		// Every statement prepared again: the request goes again, and its
		// answer, whatever it is, is the client's.
		rs.state = resendDone
		e.start = s.now()
		send = rs.frame
	}
	if u.load != nil {
		u.load.sent.Add(1)
	}
	return send, nil, h
}

// gaveUp returns the node's Unprepared answer kept in rs, and its header,
// for the client: its statements could not be prepared again on u, which
// the next request prepares them on first (u.forget).
func (s *session) gaveUp(u *upstream, rs *resend, why string) ([]byte, frame.Header) {
	rs.state = resendDone
	u.forget.Store(true)
	s.log.Debug().Str("node", u.addr).Msg(why + "; the client gets its Unprepared")
	// A copy: rs is given back when the request ends, before the answer
	// is written. Off the hot path.
	f := slices.Clone(rs.unprepared)
	h, _ := frame.ParseHeader(f)
	return f, h
}

// nextPrepare returns the PREPARE, of version v on stream, of the next
// statement of rs not prepared again yet, from rs.next on, a statement
// the request names twice being prepared once; nil when every one is. It
// reports false when one cannot be prepared in its keyspace on the
// request's connection.
func (rs *resend) nextPrepare(v uint8, stream int16) ([]byte, bool) {
	var ks []byte
	if rs.keyspace != nil {
		ks = *rs.keyspace
	}
	for ; rs.next < len(rs.stmts); rs.next++ {
		st := rs.stmts[rs.next]
		if slices.ContainsFunc(rs.stmts[:rs.next], func(p *classify.Prepared) bool { return bytes.Equal(p.ID(), st.ID()) }) {
			continue
		}
		in, ok := keyspaceToPrepare(st, ks, v)
		if !ok || st.ID() == nil {
			return nil, false
		}
		// Not the session's scratch space: the response path sends it,
		// seldom.
		return frame.AppendPrepareRequest(nil, v, stream, st.Text(), in), true
	}
	return nil, true
}

// keyspaceToPrepare returns the keyspace to name in a PREPARE of st on a
// connection in keyspace ks (nil: ks itself) and whether st can be
// prepared there. A statement is prepared in the keyspace its client's
// connection was in, which is part of its id; before v5 it can be
// prepared again only on a connection in that keyspace.
func keyspaceToPrepare(st *classify.Prepared, ks []byte, v uint8) ([]byte, bool) {
	switch {
	case string(st.PreparedIn()) == string(ks):
		return nil, true
	case v < 5:
		return nil, false
	}
	return st.PreparedIn(), true
}
