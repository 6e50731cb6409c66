package proxy

import (
	"bufio"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
)

// Regression tests for where hedged reads (hedge.go) meet hot reads
// (hotreads.go): a read that leads a flight other connections' reads
// joined, hedged to a second replica. Whichever copy answers, and whatever
// the leader's or a follower's client does meanwhile, each client gets
// each of its answers once, on its own stream, and is charged only for
// what it sent.

// hotHedged is a proxy in front of up routing bench.kv to b and c, that
// hedges reads after a millisecond and coalesces every read of bench.kv;
// each forwarded request costs one request unit, charged to the class
// named after its client's APPLICATION_NAME. Its leader's read of
// partition 5, on stream 10, is held by b and by c, where it was hedged;
// the followers' identical reads, on streams 20 and 30, joined it.
type hotHedged struct {
	p         *Proxy
	addr      string
	up, b, c  *legNode
	lead      *stubClient
	ls        *session // the leader's session
	followers [2]*stubClient
	fs        [2]*session
	query     string // the read they share
}

// followerStreams are the streams of the followers' reads, and the
// leader's is leadStream.
var followerStreams = [2]int16{20, 30}

const leadStream = 10

// classNames are the classes of the leader's and the followers' clients.
var classNames = [3]string{"lead", "f1", "f2"}

// startHotHedged starts hotHedged: the query is the read they share,
// which must name partition 5, and ttl how long bench.kv's answers are
// cached (0: not at all); b answers a read naming "big" padded with 100
// bytes and c with 200, so that an answer tells which node gave it.
func startHotHedged(t *testing.T, query string, ttl time.Duration, edit func(*config.Config)) *hotHedged {
	t.Helper()
	up, b, c := startLegNode(t), startLegNode(t), startLegNode(t)
	p, addr, _ := startLegsProxy(t, up.addr(), listRing{b.addr(), c.addr()}, func(cfg *config.Config) {
		hedgeAfter(time.Millisecond)(cfg)
		every := config.OpsPerSecond(0)
		cfg.HotReads.MaxWait = config.Duration(time.Minute)
		cfg.HotReads.Keyspaces = map[string]config.HotReadsKeyspace{"bench": {Tables: map[string]config.HotReadsTable{
			"kv": {Coalesce: true, CacheTTL: config.Duration(ttl), HotRate: &every}}}}
		cfg.RequestUnits = config.RequestUnitsConfig{Fixed: 1}
		for _, name := range classNames {
			cfg.Clients.Classes = append(cfg.Clients.Classes, config.ClientClass{Name: name, Match: config.ClientMatch{ApplicationNames: []string{name}}})
		}
		if edit != nil {
			edit(cfg)
		}
	})
	h := &hotHedged{p: p, addr: addr, up: up, b: b, c: c, query: query}
	h.lead = dialApp(t, addr, classNames[0])
	warmLegs(t, p, h.lead, b, c)
	h.ls = onlySession(t, p)
	for i := range h.followers {
		h.followers[i] = dialApp(t, addr, classNames[1+i])
		h.fs[i] = newestSession(t, p, append([]*session{h.ls}, h.fs[:i]...)...)
	}
	b.set(func(n *legNode) { n.hold, n.bigResult = "k = 5", 100 })
	c.set(func(n *legNode) { n.hold, n.bigResult = "k = 5", 200 })
	hedges := testutil.ToFloat64(p.metrics.hedges)
	prefer(p, b.addr(), c.addr())
	h.lead.write(stubQuery(leadStream, query))
	b.waitHeld(t, 1)
	c.waitHeld(t, 1) // the hedge
	// Counted once sent.
	waitUntil(t, "the hedge counted", func() bool { return testutil.ToFloat64(p.metrics.hedges) > hedges })
	if n := testutil.ToFloat64(p.metrics.hedges) - hedges; n != 1 {
		t.Fatalf("%v hedges, want the leader's read hedged once", n)
	}
	coalesced := h.hotServed(t, "coalesced")
	for i, f := range h.followers {
		f.write(stubQuery(followerStreams[i], query))
	}
	waitUntil(t, "the followers' reads joined the leader's", func() bool {
		return h.hotServed(t, "coalesced")-coalesced == float64(len(h.followers))
	})
	// What each connection counts in flight is its own: the followers'
	// reads hold their streams, not their connections to a node; the
	// leader's and its hedge each hold the leader's connection to its node.
	for i, s := range h.fs {
		s.mu.Lock()
		inflight, sent, legs := s.streams.inflight, s.up.inflight.Load(), len(s.legs)
		s.mu.Unlock()
		if inflight != 1 || sent != 0 || legs != 0 {
			t.Errorf("follower %d: %d requests in flight, %d sent, %d connections to other nodes; want 1, 0, 0", i+1, inflight, sent, legs)
		}
	}
	h.ls.mu.Lock()
	for _, u := range h.ls.legs {
		if n := u.inflight.Load(); n != 1 {
			t.Errorf("the leader's connection to %s has %d requests in flight, want 1", u.addr, n)
		}
	}
	h.ls.mu.Unlock()
	return h
}

func (h *hotHedged) hotServed(t *testing.T, outcome string) float64 {
	t.Helper()
	return metricValue(t, h.p.hotReads.served.WithLabelValues("bench", "kv", outcome))
}

// units returns the request units charged to each client's class so far.
func (h *hotHedged) units(t *testing.T) [3]float64 {
	t.Helper()
	var u [3]float64
	for i, name := range classNames {
		u[i] = metricValue(t, h.p.clientMetrics.units.WithLabelValues(name))
	}
	return u
}

// wantUnits checks that each client's class was charged want[i] units
// since before.
func (h *hotHedged) wantUnits(t *testing.T, before, want [3]float64) {
	t.Helper()
	now := h.units(t)
	for i := range now {
		if got := now[i] - before[i]; got != want[i] {
			t.Errorf("class %s charged %v units, want %v", classNames[i], got, want[i])
		}
	}
}

// ranTimes returns how many times n ran the QUERY text, in no keyspace.
func ranTimes(n *legNode, text string) int {
	_, ran := n.count()
	k := 0
	for _, r := range ran {
		if r == "|"+text {
			k++
		}
	}
	return k
}

// followersServed wants each follower's next read answered: they are
// served as before.
func (h *hotHedged) followersServed() {
	for i, f := range h.followers {
		f.answered(readKV(followerStreams[i]+1, "bench.kv", 7), followerStreams[i]+1)
	}
}

// end closes the clients and checks that their sessions ended leaving
// nothing behind: no hedge timer, no flight, no slot of max_in_flight,
// nothing counted in flight on a node, and no answer that reached a
// connection it was not for.
func (h *hotHedged) end(t *testing.T) {
	t.Helper()
	h.lead.c.Close()
	for _, f := range h.followers {
		f.c.Close()
	}
	sessionsEnded(t, h.p)
	for _, s := range append([]*session{h.ls}, h.fs[:]...) {
		wantNoTrace(t, h.p, s, h.up, h.b, h.c)
	}
	if n := h.p.hotReads.flights.Len(); n != 0 {
		t.Errorf("%d flights left", n)
	}
	if n := h.p.inflight.Taken(); n != 0 {
		t.Errorf("%d slots of max_in_flight taken", n)
	}
	if n := testutil.ToFloat64(h.p.metrics.protocolErrors.WithLabelValues("stray_response")); n != 0 {
		t.Errorf("%v stray responses", n)
	}
}

// dialApp is dialStub for a client that names itself app in its STARTUP.
func dialApp(t *testing.T, addr, app string) *stubClient {
	t.Helper()
	c := rawConn(t, addr)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	sc := &stubClient{t: t, c: c, r: frame.NewReader(bufio.NewReader(c), 1<<20)}
	sc.write(msgFrame(t, 4, 0, &message.Startup{Options: map[string]string{"CQL_VERSION": "3.0.0", "APPLICATION_NAME": app}}))
	if _, h, err := sc.r.Next(); err != nil || h.Opcode != frame.OpReady {
		t.Fatalf("STARTUP: %v %v", h.Opcode, err)
	}
	return sc
}

// newestSession waits for the session of the client dialled last: p's
// one session not among known.
func newestSession(t *testing.T, p *Proxy, known ...*session) *session {
	t.Helper()
	var s *session
	waitUntil(t, "the new session", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
	sessions:
		for o := range p.sessions {
			for _, k := range known {
				if o == k {
					continue sessions
				}
			}
			s = o
			return true
		}
		return false
	})
	return s
}

// wantAnswer reads c's next answer and wants a RESULT on stream whose body
// is padded with pad bytes, as the node that gave it pads it.
func wantAnswer(t *testing.T, c *stubClient, stream int16, pad int) {
	t.Helper()
	_, h, err := c.r.Next()
	if err != nil || h.Opcode != frame.OpResult || h.Stream != stream || h.Length != 4+pad {
		t.Fatalf("want a RESULT of %d bytes on stream %d, got %s of %d bytes on stream %d, %v", 4+pad, stream, h.Opcode, h.Length, h.Stream, err)
	}
}

// A hot read hedged, with reads of other connections joined to it: the
// copy answered first answers the leader and every follower, each once on
// its own stream, and is what the cache keeps; the copy answered later
// reaches nobody and is not cached. Only the leader is charged, once, and
// each node ran the read once.
func TestHedgedHotReadFollowers(t *testing.T) {
	t.Parallel()
	const query = "SELECT big FROM bench.kv WHERE k = 5"
	for _, tc := range []struct {
		name       string
		hedgeFirst bool
	}{{"hedge answers first", true}, {"first copy answers first", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := startHotHedged(t, query, 10*time.Second, nil)
			won := testutil.ToFloat64(h.p.metrics.hedgesWon)
			units := h.units(t)
			first, second, pad, wantWon := h.b, h.c, 100, 0.0
			if tc.hedgeFirst {
				first, second, pad, wantWon = h.c, h.b, 200, 1
			}
			first.release()
			wantAnswer(t, h.lead, leadStream, pad)
			for i, f := range h.followers {
				wantAnswer(t, f, followerStreams[i], pad)
			}
			if got := testutil.ToFloat64(h.p.metrics.hedgesWon) - won; got != wantWon {
				t.Errorf("hedges won %v, want %v", got, wantWon)
			}
			second.release()
			waitUntil(t, "the other copy answered", func() bool { return h.ls.leftoversNow() == 0 })
			h.wantUnits(t, units, [3]float64{1, 0, 0})

			// The cache holds the answer given, not the one that came
			// later.
			cached := h.hotServed(t, "cached")
			for i, f := range h.followers {
				f.write(stubQuery(followerStreams[i]+1, query))
				wantAnswer(t, f, followerStreams[i]+1, pad)
			}
			if got := h.hotServed(t, "cached") - cached; got != 2 {
				t.Errorf("%v reads served from the cache, want 2", got)
			}
			// Nothing more comes to anyone: each client's next answer is
			// to what it asks next.
			for i, c := range append([]*stubClient{h.lead}, h.followers[:]...) {
				c.answered(readKV(int16(40+i), "bench.kv", 7), int16(40+i))
			}
			for _, n := range []*legNode{h.b, h.c} {
				if k := ranTimes(n, query); k != 1 {
					t.Errorf("node %s ran the read %d times, want 1", n.addr(), k)
				}
			}
			if k := ranTimes(h.up, query); k != 0 {
				t.Errorf("the first node ran the read %d times, want 0", k)
			}
			h.end(t)
		})
	}
}

// A leader whose client leaves while its read is hedged, both copies
// held, and followed: the followers are forwarded on their own
// connections and answered there, each once; each is charged for its read
// now that it reached a node, and the leader for its own once, though it
// was sent twice. What the nodes answer later reaches nobody.
func TestHedgedHotReadLeaderLeaves(t *testing.T) {
	t.Parallel()
	h := startHotHedged(t, "SELECT v FROM bench.kv WHERE k = 5", 0, nil)
	units := h.units(t)
	reissued := metricValue(t, h.p.hotReads.reissued)
	h.lead.c.Close()
	for i, f := range h.followers {
		f.wantResult(followerStreams[i])
	}
	if got := metricValue(t, h.p.hotReads.reissued) - reissued; got != 2 {
		t.Errorf("%v reads forwarded on their own, want 2", got)
	}
	waitUntil(t, "the leader's session to end", func() bool {
		h.p.mu.Lock()
		defer h.p.mu.Unlock()
		_, ok := h.p.sessions[h.ls]
		return !ok
	})
	wantNoTrace(t, h.p, h.ls)
	h.b.release()
	h.c.release()
	h.wantUnits(t, units, [3]float64{1, 1, 1})
	h.followersServed()
	h.end(t)
}

// A leader whose client stops reading while its read is hedged and
// followed holds up no follower: they are forwarded on their own
// connections as soon as its answers wait for room, and answered while it
// still does not read. Once it reads again it gets each of its answers
// once.
func TestHedgedHotReadLeaderStopsReading(t *testing.T) {
	t.Parallel()
	h := startHotHedged(t, "SELECT v FROM bench.kv WHERE k = 5", 0, func(cfg *config.Config) {
		cfg.MaxBufferedBytes = 64 << 10
	})
	units := h.units(t)
	const big = 256 << 10
	stopReading(t, h.lead, h.ls)
	// Either node's answer is large: the reads may be hedged.
	h.b.set(func(n *legNode) { n.bigResult = big })
	h.c.set(func(n *legNode) { n.bigResult = big })
	prefer(h.p, h.c.addr(), h.b.addr())
	want := map[int16]int{leadStream: 1}
	for i := range 8 {
		stream := int16(100 + i)
		h.lead.write(stubQuery(stream, fmt.Sprintf("SELECT big FROM bench.kv WHERE k = %d", 1000+i)))
		want[stream] = 1
	}
	waitUntil(t, "the leader's writer to wait", func() bool {
		return h.ls.clientWaiting() && h.ls.toClient.Held() >= big
	})
	for i, f := range h.followers {
		f.wantResult(followerStreams[i])
	}
	if !h.ls.clientWaiting() {
		t.Fatal("the leader read meanwhile: the test shows nothing")
	}
	released := make(chan struct{})
	go func() {
		h.b.release()
		h.c.release()
		close(released)
	}()
	got := map[int16]int{}
	for range want {
		stream, op, msg, err := h.lead.nextOp()
		if err != nil || op != frame.OpResult {
			t.Fatalf("want a RESULT, got %s %q on stream %d, %v", op, msg, stream, err)
		}
		got[stream]++
	}
	for stream := range want {
		if got[stream] != 1 {
			t.Errorf("stream %d answered %d times", stream, got[stream])
		}
	}
	<-released
	waitUntil(t, "no copies awaited", func() bool { return h.ls.leftoversNow() == 0 })
	h.wantUnits(t, units, [3]float64{1 + 8, 1, 1})
	h.lead.answered(readKV(leadStream, "bench.kv", 7), leadStream)
	h.followersServed()
	h.end(t)
}

// A follower whose client stops reading before the leader's hedged read
// is answered harms only itself: the leader and the other follower get
// the answer at once, and the read of the follower that does not read is
// forwarded on its own connection, where its answer waits for it, charged
// to it. Once it reads again it gets each of its answers once.
func TestHedgedHotReadFollowerNotReading(t *testing.T) {
	t.Parallel()
	h := startHotHedged(t, "SELECT v FROM bench.kv WHERE k = 5", 0, func(cfg *config.Config) {
		cfg.MaxBufferedBytes = 64 << 10
	})
	f, fs := h.followers[0], h.fs[0]
	units := h.units(t)
	stopReading(t, f, fs)
	const big = 256 << 10
	h.b.set(func(n *legNode) { n.bigResult = big })
	h.c.set(func(n *legNode) { n.bigResult = big })
	prefer(h.p, h.c.addr(), h.b.addr())
	want := map[int16]int{followerStreams[0]: 1}
	for i := range 8 {
		stream := int16(100 + i)
		f.write(stubQuery(stream, fmt.Sprintf("SELECT big FROM bench.kv WHERE k = %d", 1000+i)))
		want[stream] = 1
	}
	waitUntil(t, "the follower's writer to be full", fs.toClient.Full)
	reissued := metricValue(t, h.p.hotReads.reissued)
	released := make(chan struct{})
	go func() {
		h.c.release() // the hedge answers first
		close(released)
	}()
	h.lead.wantResult(leadStream)
	h.followers[1].wantResult(followerStreams[1])
	if got := metricValue(t, h.p.hotReads.reissued) - reissued; got != 1 {
		t.Errorf("%v reads forwarded on their own, want 1", got)
	}
	if !fs.toClient.Full() {
		t.Fatal("the follower read meanwhile: the test shows nothing")
	}
	h.b.release()
	got := map[int16]int{}
	for range want {
		stream, op, msg, err := f.nextOp()
		if err != nil || op != frame.OpResult {
			t.Fatalf("want a RESULT, got %s %q on stream %d, %v", op, msg, stream, err)
		}
		got[stream]++
	}
	for stream := range want {
		if got[stream] != 1 {
			t.Errorf("stream %d answered %d times", stream, got[stream])
		}
	}
	<-released
	waitUntil(t, "no copies awaited", func() bool { return h.ls.leftoversNow() == 0 })
	// The leader pays for its read, the follower that does not read for
	// its own, forwarded; the other follower for nothing.
	h.wantUnits(t, units, [3]float64{1, 1 + 8, 0})
	f.answered(readKV(followerStreams[0]+1, "bench.kv", 7), followerStreams[0]+1)
	h.end(t)
}

// A follower whose client leaves while its read waits on the leader's
// hedged read is charged nothing: its read reached no node, and the time
// it waited was the leader's. The leader and the other follower get the
// answer once, and the session of the follower that left ends.
func TestHedgedHotReadFollowerLeaves(t *testing.T) {
	t.Parallel()
	h := startHotHedged(t, "SELECT v FROM bench.kv WHERE k = 5", 0, func(cfg *config.Config) {
		cfg.RequestUnits.PerMs = 1
	})
	units := h.units(t)
	f, fs := h.followers[0], h.fs[0]
	f.c.Close()
	waitUntil(t, "the follower's session to end", func() bool {
		h.p.mu.Lock()
		defer h.p.mu.Unlock()
		_, ok := h.p.sessions[fs]
		return !ok
	})
	h.c.release()
	h.lead.wantResult(leadStream)
	h.followers[1].wantResult(followerStreams[1])
	h.b.release()
	waitUntil(t, "no copies awaited", func() bool { return h.ls.leftoversNow() == 0 })
	if got := h.units(t)[1] - units[1]; got != 0 {
		t.Errorf("the follower that left was charged %v units for a read no node ran", got)
	}
	if got := h.units(t)[2] - units[2]; got != 0 {
		t.Errorf("the other follower was charged %v units", got)
	}
	if got := h.units(t)[0] - units[0]; got < 1 {
		t.Errorf("the leader was charged %v units, want at least 1", got)
	}
	h.lead.answered(readKV(leadStream, "bench.kv", 7), leadStream)
	h.end(t)
}

// A follower whose own connection to its first node is lost while its
// read waits on the leader's hedged read is answered with an error, and
// charged nothing: its read reached no node. The leader and the other
// follower get the answer once.
func TestHedgedHotReadFollowerUpstreamLost(t *testing.T) {
	t.Parallel()
	h := startHotHedged(t, "SELECT v FROM bench.kv WHERE k = 5", 0, func(cfg *config.Config) {
		cfg.RequestUnits.PerMs = 1
	})
	units := h.units(t)
	f, fs := h.followers[0], h.fs[0]
	h.up.dropConn(t, fs.up.conn.LocalAddr())
	if stream, op, msg, err := f.nextOp(); err != nil || stream != followerStreams[0] || op != frame.OpError {
		t.Fatalf("want an ERROR on stream %d, got %s %q on stream %d, %v", followerStreams[0], op, msg, stream, err)
	}
	h.c.release()
	h.lead.wantResult(leadStream)
	h.followers[1].wantResult(followerStreams[1])
	h.b.release()
	waitUntil(t, "no copies awaited", func() bool { return h.ls.leftoversNow() == 0 })
	if got := h.units(t)[1] - units[1]; got != 0 {
		t.Errorf("the follower whose node was lost was charged %v units for a read no node ran", got)
	}
	if got := h.units(t)[2] - units[2]; got != 0 {
		t.Errorf("the other follower was charged %v units", got)
	}
	h.end(t)
}

// dropConn closes the node's end of its connection from addr, as a node
// that loses one connection does.
func (n *legNode) dropConn(t *testing.T, addr net.Addr) {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	for c := range n.conns {
		if c.c.RemoteAddr().String() == addr.String() {
			c.c.Close()
			return
		}
	}
	t.Fatalf("the node has no connection from %s", addr)
}

// stopReading shrinks the socket buffers between the proxy and c, whose
// session is s, so that answers c does not read soon wait in the proxy.
func stopReading(t *testing.T, c *stubClient, s *session) {
	t.Helper()
	if err := c.c.(*net.TCPConn).SetReadBuffer(16 << 10); err != nil {
		t.Fatal(err)
	}
	if err := s.client.(*net.TCPConn).SetWriteBuffer(16 << 10); err != nil {
		t.Fatal(err)
	}
}
