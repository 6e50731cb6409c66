package proxy

// Requests whose answers change how a connection's next requests are read,
// classified, shared or charged: STARTUP (compression, the rate-limit
// opt-in, the options client classes match on), AUTH_RESPONSE (the user
// classes match on, the credentials hot reads are shared by) and USE (the
// keyspace unqualified tables are resolved in).
//
// What such a request asks takes effect only once the upstream accepted it
// (READY or AUTHENTICATE, AUTH_SUCCESS, Set_keyspace), and a connection's
// STARTUP and login take effect once: a refused login names nobody, and a
// client cannot move itself into another class after it logged in. The
// request path reads nothing more from the client until the answer came,
// so that no frame pipelined behind one is classified, served from another
// connection's answer or used to invalidate against what the node may not
// be using. Drivers wait for these answers anyway; a client that pipelines
// behind one waits a round trip, alone.

import (
	"hash/maphash"
	"maps"
	"slices"

	"github.com/cqlguard/cqlguard/frame"
)

// verdict is what the upstream made of an awaited request.
type verdict uint8

const (
	notAccepted verdict = iota // refused by the upstream, or never answered
	accepted                   // READY, AUTHENTICATE, AUTH_SUCCESS or a RESULT
	challenged                 // AUTH_CHALLENGE: the login goes on
)

// handshake is what the STARTUP or AUTH_RESPONSE in flight asks for, until
// the upstream accepts it.
type handshake struct {
	comp            frame.Compression
	optIn           bool
	lwtMark         bool   // the driver asked for the LWT mark
	options         uint64 // optionsDigest of the STARTUP
	app, id, driver string
	// principal folds the credentials of the login so far; user is the
	// SASL PLAIN user it names, if hasUser.
	principal uint64
	user      string
	hasUser   bool
}

// awaited reports whether the request path waits for req's answer before
// it reads the next frame.
func awaited(req *request) bool {
	return req.reply == replyStartup || req.reply == replyAuth || req.use || req.reply == replyAsked
}

// verdictOf returns, on the response path, what the upstream's frame h
// says of the awaited request req, which it answers when ok, and whether h
// answers one at all.
func (s *session) verdictOf(req *request, ok bool, h frame.Header) (verdict, bool) {
	if !s.awaiting.Load() {
		return notAccepted, false
	}
	// Cassandra answers a version it does not speak on stream 0, whatever
	// stream the STARTUP used.
	if s.awaitingV5.Load() && h.Opcode == frame.OpError && h.Stream == 0 {
		return notAccepted, true
	}
	if !ok || !awaited(req) {
		return notAccepted, false
	}
	switch {
	case req.reply == replyStartup:
		if h.Opcode == frame.OpReady || h.Opcode == frame.OpAuthenticate {
			return accepted, true
		}
	case req.reply == replyAuth:
		switch h.Opcode {
		case frame.OpAuthSuccess:
			return accepted, true
		case frame.OpAuthChallenge:
			return challenged, true
		}
	case h.Opcode == frame.OpResult:
		return accepted, true
	}
	return notAccepted, true
}

// settle hands the verdict on the awaited request to the request path,
// once its answer is queued for the client. Only one is in flight. The
// response path of another connection than up may settle after up's has
// ended (a request the proxy asked there): then nothing is sent.
func (s *session) settle(v verdict) {
	s.settling.Lock()
	defer s.settling.Unlock()
	s.awaiting.Store(false)
	s.awaitingV5.Store(false)
	if s.unanswered {
		return
	}
	select {
	case s.answered <- v:
	default:
	}
}

// settled applies, on the request path, what the upstream accepted of the
// awaited request req of header h.
func (s *session) settled(h frame.Header, req *request, v verdict) {
	p := &s.pending
	switch req.reply {
	case replyStartup:
		if v != accepted {
			return
		}
		s.started = true
		s.reqCompression, s.rateLimitOptIn, s.options = p.comp, p.optIn, p.options
		s.identity.app, s.identity.id, s.identity.driver = p.app, p.id, p.driver
		s.identityChanged = true
		if h.Version >= 5 {
			// The client's next bytes are segments, as the upstream's are.
			s.fromClient.UseSegments(s.reqCompression == frame.CompressionLZ4)
		}
	case replyAuth:
		switch v {
		case accepted:
			s.authenticated = true
			s.principal = p.principal
			if p.hasUser {
				s.identity.user = p.user
				s.identityChanged = true
			}
		case challenged:
			// The next AUTH_RESPONSE goes on with the same login.
		default:
			p.principal, p.user, p.hasUser = s.principal, "", false
		}
	}
}

// optionsDigest returns a digest of the STARTUP options in body that can
// change the answers the connection gets, 0 when there are none: all but
// the ones that only name the client (classes match on them) and
// COMPRESSION (hot reads key on it apart). Two connections whose STARTUPs
// differ in one of them (THROW_ON_OVERLOAD, ScyllaDB's rate-limit error,
// an option cqlguard does not know) never share a hot read's answer. The
// options are taken as a map, the last value of a key repeated, in any
// order. Once per connection: it allocates.
func (p *Proxy) optionsDigest(body []byte) uint64 {
	opts := map[string]string{}
	frame.EachStartupOption(body, func(k, v []byte) {
		switch string(k) {
		case "APPLICATION_NAME", "APPLICATION_VERSION", "CLIENT_ID", "DRIVER_NAME", "DRIVER_VERSION", "COMPRESSION":
			return
		}
		opts[string(k)] = string(v)
	})
	if len(opts) == 0 {
		return 0
	}
	var h maphash.Hash
	h.SetSeed(p.principalSeed)
	for _, k := range slices.Sorted(maps.Keys(opts)) {
		h.WriteString(k)
		h.WriteByte(0)
		h.WriteString(opts[k])
		h.WriteByte(0)
	}
	return h.Sum64() | 1
}
