package proxy

// reply says what the response to a request needs besides forwarding.
type reply uint8

const (
	replyForward   reply = iota // pass the response through
	replyLocal                  // rewrite rows of system.local
	replyPeers                  // rewrite rows of system.peers
	replyPeersV2                // rewrite rows of system.peers_v2
	replyPrepared               // learn the id of a prepared topology query
	replySupported              // rewrite SUPPORTED
	replyStartup                // end of the handshake: READY, AUTHENTICATE or ERROR
)

// request is what the proxy remembers of a request until its response.
type request struct {
	start int64 // monotonic nanoseconds when it was forwarded
	reply reply
	table reply // for replyPrepared: which topology table was prepared
	used  bool
	ddl   bool // may change the schema: reload it once answered
	// version is the request's protocol version, for an answer the proxy
	// writes itself when the upstream cannot.
	version uint8
	// prepared is what is known of an EXECUTE's statement.
	prepared *preparedStatement
}

// streamPage is one page of the in-flight table.
type streamPage [256]request

// streams tracks in-flight requests by stream id. Drivers use low ids
// first, so the table is paged and pages are allocated on first use: an idle
// connection holds no pages, a busy one a few.
type streams struct {
	pages    [128]*streamPage
	inflight int
}

// begin records a request on stream id and reports whether it counts as one
// more in flight: not when the stream already has one (a client bug the
// proxy still forwards) nor for a negative id, which no answer can name.
func (s *streams) begin(id int16, r request) bool {
	if id < 0 {
		return false
	}
	p := s.pages[uint16(id)>>8]
	if p == nil {
		p = new(streamPage)
		s.pages[uint16(id)>>8] = p
	}
	e := &p[id&0xff]
	dup := e.used
	r.used = true
	*e = r
	if !dup {
		s.inflight++
	}
	return !dup
}

// end removes and returns the request on stream id.
func (s *streams) end(id int16) (request, bool) {
	if id < 0 {
		return request{}, false
	}
	p := s.pages[uint16(id)>>8]
	if p == nil || !p[id&0xff].used {
		return request{}, false
	}
	r := p[id&0xff]
	p[id&0xff] = request{}
	s.inflight--
	return r, true
}

// each calls fn for every request in flight.
func (s *streams) each(fn func(id int16, r request)) {
	for pi, p := range s.pages {
		if p == nil {
			continue
		}
		for i := range p {
			if p[i].used {
				fn(int16(pi<<8|i), p[i])
			}
		}
	}
}
