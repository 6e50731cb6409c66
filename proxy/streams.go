package proxy

import (
	"sync/atomic"

	"github.com/cqlguard/cqlguard/classify"
	"github.com/cqlguard/cqlguard/hotread"
	"github.com/cqlguard/cqlguard/ratelimit"
	"github.com/cqlguard/cqlguard/schema"
)

// reply says what the response to a request needs besides forwarding.
type reply uint8

const (
	replyForward   reply = iota // pass the response through
	replyLocal                  // rewrite rows of system.local
	replyPeers                  // rewrite rows of system.peers
	replyPeersV2                // rewrite rows of system.peers_v2
	replyPrepared               // learn the statement a PREPARE prepared
	replySupported              // rewrite SUPPORTED
	replyStartup                // end of the handshake: READY, AUTHENTICATE or ERROR
	replyAuth                   // an AUTH_RESPONSE: AUTH_SUCCESS, AUTH_CHALLENGE or ERROR
	replyAsked                  // the proxy's own USE or PREPARE (legs.go): kept from the client
)

// request is what the proxy remembers of a request until its response.
type request struct {
	start int64 // monotonic nanoseconds when it was forwarded
	// waits is the session's clientWaits when it was sent: its answer is
	// timed as the node's latency only if no write to the client waited
	// meanwhile (clientHeld).
	waits uint64
	// set are the settings the request is decided and charged under,
	// loaded with its frame.
	set   *settings
	reply reply
	ddl   bool // may change the schema: reload it once answered
	use   bool // a USE: its Set_keyspace answer sets the connection's keyspace
	// version is the request's protocol version, for an answer the proxy
	// writes itself when the upstream cannot.
	version uint8
	// up is the upstream connection the request was sent on, nil while it
	// waits on another's hot read.
	up *upstream
	// hedgeTo is the connection a read may be hedged to, until it is or
	// may no longer be; hedge the one it was hedged to, at hedgeStart,
	// while that copy is unanswered (hedge.go). Until it is hedged,
	// hedgeStart is when it was sent: what it waited before (a connection
	// opened, a statement prepared) is not the node's slowness.
	hedgeTo, hedge *upstream
	hedgeStart     int64
	// prepared is what is known of a PREPARE's or an EXECUTE's statement.
	prepared *classify.Prepared
	// resend is what is kept to send the request again, for an EXECUTE or
	// a BATCH of prepared statements sent to another node than the
	// session's first (reprepare.go); given back as the request ends.
	resend *resend
	// wrote is what the request may change: its answer invalidates it
	// for hot reads.
	wrote wrote
	// flight is the hot read this request leads (hotreads.go): its answer
	// is handed to the reads that joined it, and cached for ttl at gen.
	flight *hotread.Flight[waiter]
	gen    hotread.Gen
	ttl    int64
	// joined is the hot read in flight this request waits on, not
	// forwarded; seq tells it from a later request on its stream, and
	// joinedTable is its table, to decide it if it is forwarded after all
	// (decideHandedOn).
	joined      *hotread.Flight[waiter]
	seq         uint32
	joinedTable *schema.Table
	// client is the class the request is charged to (nil: none), as it
	// is forwarded and once answered, and size its frame's bytes, part of
	// its price.
	client *clientClass
	size   int32
	// price multiplies what the class is charged, over 1 while shedding
	// prices its tier up (shedding.max_price); 0 is 1.
	price float32
	// charges are the partitions whose budgets in request units the
	// request is charged to, each its share of the price.
	charges  [maxCharges]unitCharge
	nCharges uint8
}

// unitCharge is a partition to charge, and its budget in request units per
// second.
type unitCharge struct {
	token  int64
	label  ratelimit.Label
	budget float32
}

// maxCharges bounds the partitions of one request that are charged: the
// first ones of a batch or an IN list share its price.
const maxCharges = 4

// streams tracks in-flight requests by stream id, in an open-addressing
// table sized by what is in flight, not by the ids a client has used:
// drivers rotate through thousands of ids, and a table indexed by id kept
// every page they touched. A slot holds its request inline, a few hundred
// bytes (TestStreamsMemoryFollowsInFlight logs how many). Between bursts a connection keeps at most streamsKeptIdle slots, and
// once a watchdog tick has passed without a request, none.
//
// A stream id names one request until its answer: begin refuses an id in
// flight, so nothing is ever keyed by an id that was reused before its
// answer.
type streams struct {
	slots    []streamSlot // len is a power of two, or 0
	inflight int
	// peak is the most in flight since nothing last was: a table four
	// times what the last burst needed is given back when it ends, one
	// that bursts keep needing is not (allocating for every burst).
	peak int
	// begun is set by begin, and by shrinkIdle while a request is in
	// flight; shrinkIdle drops a table no request was in since its last
	// call.
	begun bool
	// any is set while a request is in flight. The request path reads it
	// without the lock: only it begins requests, so when it reads false
	// no stream is busy.
	any atomic.Bool
}

type streamSlot struct {
	used bool
	id   int16
	r    request
}

const (
	// streamsMinSlots is the table's first size.
	streamsMinSlots = 16
	// streamsKeptIdle is the largest table a connection keeps between
	// bursts: a larger one, grown by a burst, is dropped once a burst ends
	// needing a quarter of it or less, or when the watchdog finds nothing
	// in flight (shrinkIdle).
	streamsKeptIdle = 64
)

// home returns the slot where id's probe starts. Fibonacci hashing spreads
// the sequential ids drivers use over the table.
func (s *streams) home(id int16) int {
	return int((uint32(uint16(id)) * 0x9E3779B1) >> 16 & uint32(len(s.slots)-1))
}

// find returns id's slot, or -1.
func (s *streams) find(id int16) int {
	if len(s.slots) == 0 {
		return -1
	}
	mask := len(s.slots) - 1
	for i := s.home(id); ; i = (i + 1) & mask {
		e := &s.slots[i]
		if !e.used {
			return -1
		}
		if e.id == id {
			return i
		}
	}
}

// lookup returns the request in flight on stream id, nil if none; the
// pointer is valid until the table changes.
func (s *streams) lookup(id int16) *request {
	i := s.find(id)
	if i < 0 {
		return nil
	}
	return &s.slots[i].r
}

// busy reports whether a request on stream id is in flight.
func (s *streams) busy(id int16) bool { return s.find(id) >= 0 }

// begin records a request on stream id. It reports false, recording
// nothing, for a negative id (the server's, for events) or an id already in
// flight: the caller refuses such a request rather than forward it.
func (s *streams) begin(id int16, r request) bool {
	if id < 0 || s.find(id) >= 0 {
		return false
	}
	// At most half full, so that probes stay short.
	if 2*(s.inflight+1) > len(s.slots) {
		s.grow()
	}
	mask := len(s.slots) - 1
	i := s.home(id)
	for s.slots[i].used {
		i = (i + 1) & mask
	}
	s.slots[i] = streamSlot{used: true, id: id, r: r}
	s.inflight++
	s.peak = max(s.peak, s.inflight)
	s.begun = true
	s.any.Store(true)
	return true
}

func (s *streams) grow() {
	old := s.slots
	s.slots = make([]streamSlot, max(2*len(old), streamsMinSlots))
	mask := len(s.slots) - 1
	for _, e := range old {
		if !e.used {
			continue
		}
		i := s.home(e.id)
		for s.slots[i].used {
			i = (i + 1) & mask
		}
		s.slots[i] = e
	}
}

// end removes and returns the request on stream id.
func (s *streams) end(id int16) (request, bool) {
	i := s.find(id)
	if i < 0 {
		return request{}, false
	}
	r := s.slots[i].r
	s.remove(i)
	s.inflight--
	if s.inflight == 0 {
		s.any.Store(false)
		if len(s.slots) > streamsKeptIdle && 4*s.peak <= len(s.slots) {
			s.slots = nil
		}
		s.peak = 0
	}
	return r, true
}

// shrinkIdle is the watchdog's, on every tick. With nothing in flight it
// drops a table larger than a connection keeps between bursts, and a table
// no request was in since the last call: a connection idle for a whole
// tick, as most of the connections a driver keeps open are, holds none,
// and one that is busy keeps what its bursts need.
func (s *streams) shrinkIdle() {
	if s.inflight == 0 && (!s.begun || len(s.slots) > streamsKeptIdle) {
		s.slots = nil
	}
	s.begun = s.inflight > 0
}

// remove empties slot i, moving back the entries of its probe run that
// would no longer be found past the hole (no tombstones, so a long-lived
// connection's probes never lengthen).
func (s *streams) remove(i int) {
	mask := len(s.slots) - 1
	for j := (i + 1) & mask; s.slots[j].used; j = (j + 1) & mask {
		h := s.home(s.slots[j].id)
		// Entry j may fill the hole at i unless its home lies cyclically
		// in (i, j].
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			s.slots[i] = s.slots[j]
			i = j
		}
	}
	s.slots[i] = streamSlot{}
}

// each calls fn for every request in flight.
func (s *streams) each(fn func(id int16, r request)) {
	for _, e := range s.slots {
		if e.used {
			fn(e.id, e.r)
		}
	}
}

// updateEach calls fn with every request in flight and its stream; fn
// may change the request, not the table.
func (s *streams) updateEach(fn func(id int16, r *request)) {
	for i := range s.slots {
		if s.slots[i].used {
			fn(s.slots[i].id, &s.slots[i].r)
		}
	}
}

// update calls fn with every request in flight, which it may change.
func (s *streams) update(fn func(r *request)) {
	s.updateEach(func(_ int16, r *request) { fn(r) })
}
