package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/schema"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

// Regression tests for what an attacker found in routing (legs.go): the
// session's connections to other nodes, opened, logged in, brought to the
// session's keyspace and statements, lost and drained.

// legNode is an upstream node for routing's tests, speaking protocol v4
// without compression. It answers OPTIONS with SUPPORTED, STARTUP with
// READY (AUTHENTICATE when it has a password), AUTH_RESPONSE by the
// password, USE with Set_keyspace, PREPARE with a RESULT Prepared whose id
// is, as Cassandra's, the MD5 of the connection's keyspace and the text,
// and every other request with a void RESULT. It records the QUERYs and
// EXECUTEs it runs with the keyspace of their connection, and can hold
// requests until released and drop its connections, as a slow or dying
// node would.
type legNode struct {
	ln net.Listener
	wg sync.WaitGroup

	mu    sync.Mutex
	conns map[*legConn]struct{}
	// startups counts the STARTUPs received; ran is each QUERY and
	// EXECUTE run, as "keyspace|text" ("keyspace|EXECUTE" for an EXECUTE).
	startups int
	ran      []string
	// password, when set, is the one the node asks for (user "app").
	// hold holds the QUERYs and PREPAREs whose text contains it, and
	// holdOptions and holdStartup every OPTIONS and STARTUP, until
	// release. preparePad pads the answers to PREPARE with that many
	// bytes.
	password                 string
	hold                     string
	holdOptions, holdStartup bool
	preparePad               int
	// bigResult pads the answers to the QUERYs whose text contains "big"
	// with that many bytes.
	bigResult int
	// strayOn, when not 0, is a stream the node also answers on, unasked,
	// when it runs a QUERY containing "stray", as a misbehaving node would.
	strayOn int16
	// unprepared is how many EXECUTEs and BATCHes the node answers
	// Unprepared next, as a node that forgot its statements does;
	// refusePrepare has it answer PREPAREs with an error. prepares counts
	// the PREPAREs received.
	unprepared    int
	refusePrepare bool
	prepares      int
	held          []func()
	heldCh        chan struct{}
	got           int // requests held so far
	// split has the node's next answer written half now and half at
	// finish, as a node stopped part way through a frame.
	split bool
	rest  []func()
}

type legConn struct {
	c        net.Conn
	mu       sync.Mutex // serializes writes
	keyspace string     // the connection's; its serve goroutine's
}

func startLegNode(t *testing.T) *legNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &legNode{ln: ln, conns: map[*legConn]struct{}{}, heldCh: make(chan struct{}, 1)}
	n.wg.Add(1)
	go n.accept()
	t.Cleanup(n.close)
	return n
}

func (n *legNode) addr() string { return n.ln.Addr().String() }

func (n *legNode) accept() {
	defer n.wg.Done()
	for {
		c, err := n.ln.Accept()
		if err != nil {
			return
		}
		lc := &legConn{c: c}
		n.mu.Lock()
		n.conns[lc] = struct{}{}
		n.mu.Unlock()
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.serve(lc)
			c.Close()
			n.mu.Lock()
			delete(n.conns, lc)
			n.mu.Unlock()
		}()
	}
}

func (n *legNode) serve(c *legConn) {
	r := frame.NewReader(bufio.NewReader(c.c), 64<<20)
	for {
		f, h, err := r.Next()
		if err != nil {
			return
		}
		body := f[frame.HeaderSize:]
		n.mu.Lock()
		hold := h.Opcode == frame.OpStartup && n.holdStartup || h.Opcode == frame.OpOptions && n.holdOptions
		if q, err := frame.QueryString(body); err == nil && n.hold != "" && (h.Opcode == frame.OpQuery || h.Opcode == frame.OpPrepare) {
			hold = bytes.Contains(q, []byte(n.hold))
		}
		n.mu.Unlock()
		answer := n.answer(c, body, h)
		if !hold {
			answer()
			continue
		}
		n.mu.Lock()
		n.held = append(n.held, answer)
		n.got++
		n.mu.Unlock()
		select {
		case n.heldCh <- struct{}{}:
		default:
		}
	}
}

// answer returns what answers the request body (h) on c.
func (n *legNode) answer(c *legConn, body []byte, h frame.Header) func() {
	n.mu.Lock()
	password, pad := n.password, n.preparePad
	n.mu.Unlock()
	reply := func(op frame.Opcode, b []byte) func() {
		out := frame.AppendHeader(nil, frame.Header{Version: h.Version, Response: true, Stream: h.Stream, Opcode: op, Length: len(b)})
		out = append(out, b...)
		return func() {
			now := out
			n.mu.Lock()
			if n.split {
				n.split = false
				now = out[:len(out)/2]
				n.rest = append(n.rest, func() {
					c.mu.Lock()
					c.c.Write(out[len(now):])
					c.mu.Unlock()
				})
			}
			n.mu.Unlock()
			c.mu.Lock()
			c.c.Write(now)
			c.mu.Unlock()
		}
	}
	void := []byte{0, 0, 0, frame.ResultKindVoid}
	switch h.Opcode {
	case frame.OpOptions:
		return reply(frame.OpSupported, []byte{0, 0})
	case frame.OpStartup:
		n.mu.Lock()
		n.startups++
		n.mu.Unlock()
		if password == "" {
			return reply(frame.OpReady, nil)
		}
		const auth = "org.apache.cassandra.auth.PasswordAuthenticator"
		return reply(frame.OpAuthenticate, append(binary.BigEndian.AppendUint16(nil, uint16(len(auth))), auth...))
	case frame.OpAuthResponse:
		if string(body) != string(binary.BigEndian.AppendUint32(nil, uint32(len(password)+5)))+"\x00app\x00"+password {
			return reply(frame.OpError, frame.AppendError(nil, h.Version, h.Stream, 0x0100, "bad credentials")[frame.HeaderSize:])
		}
		return reply(frame.OpAuthSuccess, []byte{0xff, 0xff, 0xff, 0xff})
	case frame.OpQuery:
		q, _ := frame.QueryString(body)
		if ks, ok := bytes.CutPrefix(q, []byte("USE ")); ok {
			c.keyspace = strings.Trim(string(ks), `"`)
			b := binary.BigEndian.AppendUint32(nil, frame.ResultKindSetKeyspace)
			b = binary.BigEndian.AppendUint16(b, uint16(len(c.keyspace)))
			return reply(frame.OpResult, append(b, c.keyspace...))
		}
		n.record(c.keyspace + "|" + string(q))
		n.mu.Lock()
		stray, big := n.strayOn, n.bigResult
		n.mu.Unlock()
		if big > 0 && bytes.Contains(q, []byte("big")) {
			return reply(frame.OpResult, append(void, make([]byte, big)...))
		}
		if stray != 0 && bytes.Contains(q, []byte("stray")) {
			answer := reply(frame.OpResult, void)
			unasked := frame.AppendHeader(nil, frame.Header{Version: h.Version, Response: true, Stream: stray, Opcode: frame.OpResult, Length: len(void)})
			unasked = append(unasked, void...)
			return func() {
				answer()
				c.mu.Lock()
				c.c.Write(unasked)
				c.mu.Unlock()
			}
		}
	case frame.OpExecute, frame.OpBatch:
		n.mu.Lock()
		forgot := n.unprepared > 0
		if forgot {
			n.unprepared--
		}
		n.mu.Unlock()
		if forgot {
			id, _ := frame.PreparedID(body)
			if h.Opcode == frame.OpBatch {
				id = make([]byte, 16)
			}
			return reply(frame.OpError, frame.AppendUnprepared(nil, h.Version, h.Stream, "unknown prepared statement", id)[frame.HeaderSize:])
		}
		if h.Opcode == frame.OpExecute {
			n.record(c.keyspace + "|EXECUTE")
		}
	case frame.OpPrepare:
		n.mu.Lock()
		n.prepares++
		refuse := n.refusePrepare
		n.mu.Unlock()
		if refuse {
			return reply(frame.OpError, frame.AppendError(nil, h.Version, h.Stream, 0x2200, "unconfigured table")[frame.HeaderSize:])
		}
		q, _ := frame.QueryString(body)
		id := md5.Sum([]byte(c.keyspace + string(q)))
		b := binary.BigEndian.AppendUint32(nil, frame.ResultKindPrepared)
		b = append(b, 0, 16)
		b = append(b, id[:]...)
		b = append(b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0) // no flags, columns or key
		b = append(b, 0, 0, 0, 4, 0, 0, 0, 0)             // result: no metadata
		return reply(frame.OpResult, append(b, make([]byte, pad)...))
	}
	return reply(frame.OpResult, void)
}

func (n *legNode) record(ran string) {
	n.mu.Lock()
	n.ran = append(n.ran, ran)
	n.mu.Unlock()
}

// set changes the node's behaviour.
func (n *legNode) set(fn func(n *legNode)) {
	n.mu.Lock()
	fn(n)
	n.mu.Unlock()
}

// waitHeld waits until the node has held want requests in all.
func (n *legNode) waitHeld(t *testing.T, want int) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		n.mu.Lock()
		got := n.got
		n.mu.Unlock()
		if got >= want {
			return
		}
		select {
		case <-n.heldCh:
		case <-deadline:
			t.Fatalf("the node held %d requests, want %d", got, want)
		}
	}
}

// release answers the requests held, and holds no more.
func (n *legNode) release() {
	n.mu.Lock()
	held := n.held
	n.held, n.hold, n.holdOptions, n.holdStartup = nil, "", false, false
	n.mu.Unlock()
	for _, answer := range held {
		answer()
	}
}

// finish writes the rest of the answers split.
func (n *legNode) finish() {
	n.mu.Lock()
	rest := n.rest
	n.rest = nil
	n.mu.Unlock()
	for _, write := range rest {
		write()
	}
}

// drop closes the node's connections, as a node that dies does; it goes
// on accepting new ones.
func (n *legNode) drop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for c := range n.conns {
		c.c.Close()
	}
}

// count returns the STARTUPs the node received and what it ran.
func (n *legNode) count() (startups int, ran []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.startups, append([]string(nil), n.ran...)
}

func (n *legNode) close() {
	n.ln.Close()
	n.drop()
	n.wg.Wait()
}

// fixedRing puts every partition on one node.
type fixedRing struct{ node string }

func (r fixedRing) Replicas(dst []string, keyspace string, token int64) []string {
	return append(dst, r.node)
}

// legsSnapshot is the schema of two tables, bench.kv and other.kv, each
// with a bigint partition key k.
func legsSnapshot(t *testing.T) *schema.Snapshot {
	t.Helper()
	ty, err := schema.ParseType("bigint", nil, "bench")
	if err != nil {
		t.Fatal(err)
	}
	var tables []*schema.Table
	for _, ks := range []string{"bench", "other"} {
		tables = append(tables, &schema.Table{Keyspace: ks, Name: "kv", PartitionKey: []schema.Column{{Name: "k", Type: ty}}})
	}
	return schema.NewSnapshot(tables)
}

// startLegsProxy runs a proxy in front of up that routes by ring, until
// the test ends or it is shut down with shutdown.
func startLegsProxy(t *testing.T, up string, ring Ring, edit func(*config.Config)) (p *Proxy, addr string, shutdown func(context.Context) error) {
	t.Helper()
	cfg := config.Default()
	cfg.Admin.Listen = ""
	cfg.Listen, cfg.Upstreams = "127.0.0.1:0", []string{up}
	cfg.DialTimeout = config.Duration(2 * time.Second)
	if edit != nil {
		edit(&cfg)
	}
	p, err := New(cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{legsSnapshot(t)}), WithRing(ring))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	go p.Serve(ln)
	var once sync.Once
	shutdown = func(ctx context.Context) (err error) {
		once.Do(func() { err = p.Shutdown(ctx) })
		return err
	}
	t.Cleanup(func() {
		// Unless the test did.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return p, ln.Addr().String(), shutdown
}

// onlySession returns the proxy's one session.
func onlySession(t *testing.T, p *Proxy) *session {
	t.Helper()
	var s *session
	waitUntil(t, "one session", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for o := range p.sessions {
			s = o
		}
		return len(p.sessions) == 1
	})
	return s
}

// legs returns how many connections to other nodes s holds.
func (s *session) legsNow() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.legs)
}

// prepareFrame is a v4 PREPARE of text on stream.
func prepareFrame(stream int16, text string) []byte {
	body := binary.BigEndian.AppendUint32(nil, uint32(len(text)))
	body = append(body, text...)
	f := frame.AppendHeader(nil, frame.Header{Version: 4, Stream: stream, Opcode: frame.OpPrepare, Length: len(body)})
	return append(f, body...)
}

// executeFrame is a v4 EXECUTE of the statement id on stream, consistency
// ONE and no values.
func executeFrame(stream int16, id []byte) []byte {
	body := binary.BigEndian.AppendUint16(nil, uint16(len(id)))
	body = append(body, id...)
	body = append(body, 0, 1, 0)
	f := frame.AppendHeader(nil, frame.Header{Version: 4, Stream: stream, Opcode: frame.OpExecute, Length: len(body)})
	return append(f, body...)
}

// prepared prepares text through c on stream and returns its id.
func (c *stubClient) prepared(stream int16, text string) []byte {
	c.t.Helper()
	c.write(prepareFrame(stream, text))
	f, h, err := c.r.Next()
	if err != nil || h.Opcode != frame.OpResult || h.Stream != stream {
		c.t.Fatalf("PREPARE %q: %s on stream %d, %v", text, h.Opcode, h.Stream, err)
	}
	body := f[frame.HeaderSize+4:]
	n := binary.BigEndian.Uint16(body)
	return bytes.Clone(body[2 : 2+n])
}

// answered sends f and wants a RESULT on stream.
func (c *stubClient) answered(f []byte, stream int16) {
	c.t.Helper()
	c.write(f)
	c.wantResult(stream)
}

// wantResult reads the next answer and wants a RESULT on stream.
func (c *stubClient) wantResult(stream int16) {
	c.t.Helper()
	got, op, msg, err := c.nextOp()
	if err != nil || got != stream || op != frame.OpResult {
		c.t.Fatalf("want a RESULT on stream %d, got %s %q on stream %d, %v", stream, op, msg, got, err)
	}
}

// nextOp reads the next answer: its stream, its opcode and, for an ERROR,
// its message.
func (c *stubClient) nextOp() (int16, frame.Opcode, string, error) {
	f, h, err := c.r.Next()
	if err != nil {
		return 0, 0, "", err
	}
	if h.Opcode != frame.OpError {
		return h.Stream, h.Opcode, "", nil
	}
	code, msg := errorOf(c.t, h, f[frame.HeaderSize:])
	return h.Stream, h.Opcode, fmt.Sprintf("%#x %s", code, msg), nil
}

// keyOn returns a key k of bench.kv whose token is below zero when low is
// set, at or above it otherwise.
func keyOn(low bool) int {
	for k := 0; ; k++ {
		if tokenOf(binary.BigEndian.AppendUint64(nil, uint64(k))) < 0 == low {
			return k
		}
	}
}

// readKV is a read of partition k of table (kv, or ks.kv).
func readKV(stream int16, table string, k int) []byte {
	return stubQuery(stream, fmt.Sprintf("SELECT v FROM %s WHERE k = %d", table, k))
}

// dialAuth opens a v4 connection to addr that logs in as user.
func dialAuth(t *testing.T, addr, user, password string) *stubClient {
	t.Helper()
	c := rawConn(t, addr)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	sc := &stubClient{t: t, c: c, r: frame.NewReader(bufio.NewReader(c), 1<<20)}
	startup := frame.AppendHeader(nil, frame.Header{Version: 4, Opcode: frame.OpStartup, Length: 2})
	sc.write(append(startup, 0, 0))
	if _, h, err := sc.r.Next(); err != nil || h.Opcode != frame.OpAuthenticate {
		t.Fatalf("STARTUP: %v %v", h.Opcode, err)
	}
	token := "\x00" + user + "\x00" + password
	body := binary.BigEndian.AppendUint32(nil, uint32(len(token)))
	body = append(body, token...)
	f := frame.AppendHeader(nil, frame.Header{Version: 4, Opcode: frame.OpAuthResponse, Length: len(body)})
	sc.write(append(f, body...))
	if _, h, err := sc.r.Next(); err != nil || h.Opcode != frame.OpAuthSuccess {
		t.Fatalf("AUTH_RESPONSE: %v %v", h.Opcode, err)
	}
	return sc
}

// A request routed to another node whose connection is lost while the
// request waits for a slot of max_in_flight, after it was chosen, is
// still answered: where the driver sent it.
func TestLegsLostWhileWaiting(t *testing.T) {
	t.Parallel()
	for _, use := range []bool{false, true} {
		t.Run(fmt.Sprintf("USE asked=%t", use), func(t *testing.T) {
			t.Parallel()
			up, leg := startLegNode(t), startLegNode(t)
			up.set(func(n *legNode) { n.hold = "hold" })
			p, addr, _ := startLegsProxy(t, up.addr(), fixedRing{leg.addr()}, func(c *config.Config) { c.MaxInFlight = 1 })
			c := dialStub(t, addr)
			c.c.SetDeadline(time.Now().Add(5 * time.Second))
			c.answered(readKV(1, "bench.kv", 1), 1)
			if use {
				c.answered(stubQuery(2, "USE bench"), 2)
			}
			s := onlySession(t, p)
			c.write(stubQuery(3, "SELECT hold FROM ks.t")) // not routed: the table is unknown
			up.waitHeld(t, 1)
			c.write(readKV(4, "bench.kv", 1))
			waitUntil(t, "a wait for max_in_flight", func() bool { return testutil.ToFloat64(p.metrics.proxyInFlightWaits) > 0 })
			leg.drop()
			waitUntil(t, "the leg lost", func() bool { return s.legsNow() == 0 })
			up.release()
			answered := map[int16]frame.Opcode{}
			for range 2 {
				stream, op, msg, err := c.nextOp()
				if err != nil {
					t.Fatalf("answers so far %v; then %v", answered, err)
				}
				if op != frame.OpResult {
					t.Errorf("stream %d: %s %q", stream, op, msg)
				}
				answered[stream] = op
			}
			if _, ok := answered[4]; !ok {
				t.Errorf("answered %v, want streams 3 and 4", answered)
			}
			waitUntil(t, "max_in_flight given back", func() bool { return p.inflight.Taken() == 0 })
		})
	}
}

// Each connection of a session is in the keyspace the session last took
// on it: a USE on one does not move another's idea of where it is, and a
// request runs in the keyspace its client had when it sent it.
func TestLegsKeyspacePerConnection(t *testing.T) {
	t.Parallel()
	up, low, high := startLegNode(t), startLegNode(t), startLegNode(t)
	_, addr, _ := startLegsProxy(t, up.addr(), splitRing{low: low.addr(), high: high.addr()}, nil)
	kLow, kHigh := keyOn(true), keyOn(false)
	c := dialStub(t, addr)
	c.answered(stubQuery(1, "USE bench"), 1)
	c.answered(readKV(2, "kv", kLow), 2)
	c.answered(readKV(3, "kv", kHigh), 3)
	c.answered(stubQuery(4, "USE other"), 4)
	c.answered(readKV(5, "kv", kLow), 5)
	c.answered(readKV(6, "kv", kHigh), 6)
	for _, n := range []struct {
		name string
		node *legNode
		k    int
	}{{"low", low, kLow}, {"high", high, kHigh}} {
		q := fmt.Sprintf("SELECT v FROM kv WHERE k = %d", n.k)
		want := []string{"bench|" + q, "other|" + q}
		if _, ran := n.node.count(); !slices.Equal(ran, want) {
			t.Errorf("the %s node ran %q, want %q", n.name, ran, want)
		}
	}
}

// A node lost with requests in flight on the session's connection to it,
// as it resets the connection or sends nothing for upstream_timeout, costs
// those requests alone: each is answered with a server error at once, not
// when something else is next written to the client; the session's other
// requests are answered by their nodes, and the next request for the lost
// node opens a connection to it again.
func TestLegsLostWithRequestsInFlight(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		timeout time.Duration // upstream_timeout
		lose    func(n *legNode)
		reason  string
	}{
		{"node resets", 0, (*legNode).drop, "upstream_lost"},
		{"node stalls", 200 * time.Millisecond, func(*legNode) {}, "upstream_stalled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up, low, high := startLegNode(t), startLegNode(t), startLegNode(t)
			low.set(func(n *legNode) { n.hold = "hold" })
			p, addr, _ := startLegsProxy(t, up.addr(), splitRing{low: low.addr(), high: high.addr()}, func(c *config.Config) {
				c.UpstreamTimeout = config.Duration(tt.timeout)
			})
			kLow, kHigh := keyOn(true), keyOn(false)
			c := dialStub(t, addr)
			c.c.SetDeadline(time.Now().Add(5 * time.Second))
			c.answered(readKV(1, "bench.kv", kHigh), 1)
			hold := fmt.Sprintf("SELECT hold FROM bench.kv WHERE k = %d", kLow)
			c.write(append(stubQuery(2, hold), stubQuery(3, hold)...))
			low.waitHeld(t, 2)
			tt.lose(low)
			for range 2 {
				stream, op, msg, err := c.nextOp()
				if err != nil || op != frame.OpError || (stream != 2 && stream != 3) || !strings.Contains(msg, "may or may not have been applied") {
					t.Fatalf("want a server error on streams 2 and 3, got %s %q on stream %d, %v", op, msg, stream, err)
				}
			}
			if n := testutil.ToFloat64(p.metrics.protocolErrors.WithLabelValues(tt.reason)); n != 2 {
				t.Errorf("%s counted %v times, want 2", tt.reason, n)
			}
			c.answered(readKV(4, "bench.kv", kHigh), 4)
			c.answered(stubQuery(5, "SELECT v FROM ks.t"), 5)
			c.answered(readKV(6, "bench.kv", kLow), 6)
			waitUntil(t, "max_in_flight given back", func() bool { return p.inflight.Taken() == 0 })
		})
	}
}

// Shutdown drains a session whose last request runs on another node, or
// is being made ready to: the request is answered before the connection
// closes, whatever answer comes last.
func TestLegsDrainAnswersLastRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// setup readies the session and returns the request to drain.
		setup func(c *stubClient) []byte
		hold  func(n *legNode)
	}{
		{
			name:  "answered on a leg",
			setup: func(*stubClient) []byte { return stubQuery(9, "SELECT hold FROM bench.kv WHERE k = 1") },
			hold:  func(n *legNode) { n.hold = "hold" },
		},
		{
			name:  "leg logging in",
			setup: func(*stubClient) []byte { return readKV(9, "bench.kv", 1) },
			hold:  func(n *legNode) { n.holdStartup = true },
		},
		{
			name: "USE asked on a leg",
			setup: func(c *stubClient) []byte {
				c.answered(readKV(1, "bench.kv", 1), 1)
				c.answered(stubQuery(2, "USE bench"), 2)
				return readKV(9, "bench.kv", 1)
			},
			hold: func(n *legNode) { n.hold = "USE" },
		},
		{
			name: "PREPARE asked on a leg",
			setup: func(c *stubClient) []byte {
				c.answered(readKV(1, "bench.kv", 1), 1)
				return executeFrame(9, c.prepared(2, "SELECT v FROM bench.kv WHERE k = 1"))
			},
			hold: func(n *legNode) { n.hold = "WHERE" },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up, leg := startLegNode(t), startLegNode(t)
			p, addr, shutdown := startLegsProxy(t, up.addr(), fixedRing{leg.addr()}, nil)
			c := dialStub(t, addr)
			req := tt.setup(c)
			leg.set(tt.hold)
			c.write(req)
			leg.waitHeld(t, 1)
			done := shutdownInBackground(t, p, shutdown)
			leg.release()
			c.wantResult(9)
			if stream, op, msg, err := c.nextOp(); err == nil {
				t.Errorf("after the last answer, %s %q on stream %d; want the connection closed", op, msg, stream)
			}
			if err := <-done; err != nil {
				t.Errorf("Shutdown: %v", err)
			}
		})
	}
}

// The requests read before one routed to a node the session has no
// connection to yet are answered while that node is dialled and logged in
// to, rather than wait up to dial_timeout with it.
func TestRequestsBeforeALegOpensForwarded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		hold func(n *legNode)
	}{
		{"dialling", func(n *legNode) { n.holdOptions = true }},
		{"logging in", func(n *legNode) { n.holdStartup = true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up, leg := startLegNode(t), startLegNode(t)
			leg.set(tt.hold)
			_, addr, _ := startLegsProxy(t, up.addr(), splitRing{low: up.addr(), high: leg.addr()}, func(c *config.Config) {
				c.DialTimeout = config.Duration(time.Minute)
			})
			c := dialStub(t, addr)
			c.write(append(readKV(1, "bench.kv", keyOn(true)), readKV(2, "bench.kv", keyOn(false))...))
			c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
			c.wantResult(1)
			leg.waitHeld(t, 1)
			leg.release()
			c.wantResult(2)
		})
	}
}

// A node that stops reading holds back only what is sent to it: the
// request read before one that waits for room in the node's writer, or
// queued while that writer waits for room in its socket, reaches the
// first node meanwhile, rather than wait with it up to upstream_timeout.
func TestRequestsBeforeADeafNodeForwarded(t *testing.T) {
	t.Parallel()
	up, deaf := startLegNode(t), startDeafNode(t)
	p, addr, _ := startLegsProxy(t, up.addr(), splitRing{low: up.addr(), high: deaf.addr()}, func(c *config.Config) {
		c.MaxBufferedBytes = 64 << 10
		c.UpstreamTimeout = config.Duration(time.Minute)
	})
	// Its connections lost, the session's requests on it are answered
	// and the proxy drains.
	t.Cleanup(deaf.drop)
	c := dialStub(t, addr)
	c.c.SetDeadline(time.Now().Add(time.Minute))
	c.answered(readKV(1, "bench.kv", keyOn(false)), 1) // the deaf node's connection opened
	s := onlySession(t, p)
	c.write(stubQuery(2, fmt.Sprintf("SELECT v FROM bench.kv WHERE k = %d AND deaf = 1", keyOn(false))))
	large := func(stream int16) []byte {
		return stubQuery(stream, fmt.Sprintf("SELECT v FROM bench.kv WHERE k = %d AND p = '%s'", keyOn(false), strings.Repeat("p", 60<<10)))
	}
	// Rounds of a request for the first node between two of 60 KiB for
	// the deaf one, until the deaf node's writer is stuck.
	for i := range int16(200) {
		c.write(slices.Concat(large(100+2*i), readKV(1000+i, "bench.kv", keyOn(true)), large(101+2*i)))
		c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		c.wantResult(1000 + i)
		s.mu.Lock()
		w := s.legs[0].to
		s.mu.Unlock()
		// A writer that can write empties at once; a stuck one holds
		// what it is writing.
		stuck := true
		for deadline := time.Now().Add(200 * time.Millisecond); stuck && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			stuck = w.Held() > 0
		}
		if stuck {
			t.Logf("stuck at round %d", i)
			return
		}
	}
	t.Fatal("the deaf node's writer never filled")
}

// deafNode is a node that answers until it reads a QUERY whose text
// contains "deaf", and then reads nothing more on that connection.
type deafNode struct {
	ln   net.Listener
	stop chan struct{}
}

func startDeafNode(t *testing.T) *deafNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &deafNode{ln: ln, stop: make(chan struct{})}
	acceptEach(t, ln, func(_ *connTracker, c net.Conn) {
		defer c.Close()
		r := frame.NewReader(bufio.NewReader(c), 1<<20)
		for {
			f, h, err := r.Next()
			if err != nil {
				return
			}
			if q, _ := frame.QueryString(f[frame.HeaderSize:]); bytes.Contains(q, []byte("deaf")) {
				<-n.stop
				return
			}
			op, body := frame.OpResult, []byte{0, 0, 0, frame.ResultKindVoid}
			switch h.Opcode {
			case frame.OpOptions:
				op, body = frame.OpSupported, []byte{0, 0}
			case frame.OpStartup:
				op, body = frame.OpReady, nil
			}
			c.Write(append(frame.AppendHeader(nil, frame.Header{Version: h.Version, Response: true, Stream: h.Stream, Opcode: op, Length: len(body)}), body...))
		}
	})
	return n
}

func (n *deafNode) addr() string { return n.ln.Addr().String() }

// drop closes the node's connections, which then read and answer nothing.
func (n *deafNode) drop() {
	close(n.stop)
	n.ln.Close()
}

// A session closed while it opens a connection to another node (Shutdown
// past its deadline) gives up on it at once, rather than wait out
// dial_timeout for a node that does not answer.
func TestLegsClosedWhileOpening(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		hold func(n *legNode)
	}{
		{"dialling", func(n *legNode) { n.holdOptions = true }},
		{"logging in", func(n *legNode) { n.holdStartup = true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			const dialTimeout = 10 * time.Second
			up, leg := startLegNode(t), startLegNode(t)
			leg.set(tt.hold)
			_, addr, shutdown := startLegsProxy(t, up.addr(), fixedRing{leg.addr()}, func(c *config.Config) {
				c.DialTimeout = config.Duration(dialTimeout)
			})
			c := dialStub(t, addr)
			c.write(readKV(1, "bench.kv", 1))
			leg.waitHeld(t, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			start := time.Now()
			shutdown(ctx)
			if took := time.Since(start); took > dialTimeout/2 {
				t.Errorf("Shutdown with a deadline of 50ms took %v", took)
			}
		})
	}
}

// A node that cannot be logged in to is not asked again for every
// request routed to it: the session leaves it for a while, and its
// requests run where the driver sent them.
func TestLegsLoginFailureNotRepeated(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		leg  func(n *legNode)
	}{
		{"credentials refused", func(n *legNode) { n.password = "other" }},
		{"login never answered", func(n *legNode) { n.password, n.holdStartup = "secret", true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up, leg := startLegNode(t), startLegNode(t)
			up.set(func(n *legNode) { n.password = "secret" })
			leg.set(tt.leg)
			_, addr, _ := startLegsProxy(t, up.addr(), fixedRing{leg.addr()}, func(c *config.Config) {
				c.DialTimeout = config.Duration(300 * time.Millisecond)
			})
			c := dialAuth(t, addr, "app", "secret")
			const requests = 4
			for i := range requests {
				c.answered(readKV(int16(i), "bench.kv", i), int16(i))
			}
			if startups, _ := leg.count(); startups != 1 {
				t.Errorf("the node was sent %d STARTUPs for %d requests, want 1", startups, requests)
			}
			if _, ran := up.count(); len(ran) != requests {
				t.Errorf("the driver's node ran %v, want the %d requests", ran, requests)
			}
		})
	}
}

// The session's upstream (up) lost while the proxy's own USE waits on
// another connection: the wait ends, and the USE, answered later or lost
// with its connection, is neither answered to nobody (a panic, ending the
// process) nor left holding the client's stream and its slot of
// max_in_flight. The test holds the response paths back (respMu) while
// both connections are lost, so that the request path moves on first.
func TestLegsAskOutlivesUpstream(t *testing.T) {
	t.Parallel()
	up, leg := startLegNode(t), startLegNode(t)
	p, addr, _ := startLegsProxy(t, up.addr(), fixedRing{leg.addr()}, nil)
	c := dialStub(t, addr)
	c.answered(readKV(1, "bench.kv", 1), 1)
	c.answered(stubQuery(2, "USE bench"), 2)
	s := onlySession(t, p)
	leg.set(func(n *legNode) { n.hold = "USE" })
	c.write(readKV(3, "bench.kv", 1))
	leg.waitHeld(t, 1)

	s.respMu.Lock()
	leg.drop()
	waitUntil(t, "the leg lost", func() bool { return s.legsNow() == 0 })
	up.drop()
	// The request path gives up waiting and sends the request on up.
	waitUntil(t, "the request sent on up", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.up.inflight.Load() > 0
	})
	s.respMu.Unlock()

	if stream, op, msg, err := c.nextOp(); err != nil || stream != 3 || op != frame.OpError || !strings.Contains(msg, "may or may not have been applied") {
		t.Errorf("want a server error on stream 3, got %s %q on stream %d, %v", op, msg, stream, err)
	}
	waitUntil(t, "the session ended", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.sessions) == 0
	})
	if n := p.inflight.Taken(); n != 0 {
		t.Errorf("%d slots of max_in_flight taken after the session ended", n)
	}
}

// What a session remembers of the statements it prepared on its other
// connections is bounded as the proxy's registry is: a client preparing
// ever more statements does not grow it for ever.
func TestLegsPreparedBounded(t *testing.T) {
	t.Parallel()
	up, leg := startLegNode(t), startLegNode(t)
	const max = 4
	p, addr, _ := startLegsProxy(t, up.addr(), fixedRing{leg.addr()}, func(c *config.Config) { c.MaxPreparedStatements = max })
	c := dialStub(t, addr)
	s := onlySession(t, p)
	const statements = 3 * max
	for i := range statements {
		id := c.prepared(1, fmt.Sprintf("SELECT v FROM bench.kv WHERE k = %d", i))
		c.answered(executeFrame(2, id), 2)
	}
	if _, ran := leg.count(); len(ran) != statements {
		t.Fatalf("the other node ran %d requests, want the %d EXECUTEs", len(ran), statements)
	}
	s.mu.Lock()
	n := len(s.legs[0].prepared)
	s.mu.Unlock()
	if n > max {
		t.Errorf("the session remembers %d statements prepared on its other connection; max_prepared_statements is %d", n, max)
	}
}

// An answer to the proxy's own PREPARE too large to read is not the
// client's: the client gets one answer, its request's.
func TestLegsAskedAnswerTooLarge(t *testing.T) {
	t.Parallel()
	up, leg := startLegNode(t), startLegNode(t)
	leg.set(func(n *legNode) { n.preparePad = 8 << 10 })
	_, addr, _ := startLegsProxy(t, up.addr(), fixedRing{leg.addr()}, func(c *config.Config) { c.MaxFrameBytes = 4 << 10 })
	c := dialStub(t, addr)
	c.answered(executeFrame(2, c.prepared(1, "SELECT v FROM bench.kv WHERE k = 1")), 2)
	c.answered(stubQuery(3, "SELECT v FROM ks.t"), 3)
}

// A replica that answers on a stream it was sent nothing on, one the client
// has a request in flight on elsewhere, changes nothing: the frame is
// dropped, and the request gets its own answer, once.
func TestLegsStrayFrameDropped(t *testing.T) {
	t.Parallel()
	up, leg := startLegNode(t), startLegNode(t)
	up.set(func(n *legNode) { n.hold = "system.local" })
	leg.set(func(n *legNode) { n.strayOn = 9 })
	_, addr, _ := startLegsProxy(t, up.addr(), fixedRing{leg.addr()}, nil)
	c := dialStub(t, addr)
	c.write(stubQuery(9, "SELECT * FROM system.local"))
	up.waitHeld(t, 1)
	c.write(stubQuery(5, "SELECT v FROM bench.kv WHERE k = 1 -- stray"))
	if stream, code, msg, err := c.next(); err != nil || stream != 5 || code != 0 {
		t.Fatalf("first answer: stream %d, %#x %s, %v; want the read's on stream 5", stream, code, msg, err)
	}
	up.release()
	if stream, code, msg, err := c.next(); err != nil || stream != 9 || code != 0 {
		t.Fatalf("next answer: stream %d, %#x %s, %v; want the held request's on stream 9", stream, code, msg, err)
	}
	// Nothing more: a second answer on stream 9 would come before this one.
	c.write(stubQuery(10, "SELECT v FROM bench.kv WHERE k = 2"))
	if stream, _, _, err := c.next(); err != nil || stream != 10 {
		t.Fatalf("then stream %d, %v; want 10", stream, err)
	}
}

// A client that leaves with requests in flight, on its connection's node or
// on another, leaves no trace in those nodes' loads, which every session
// ranks replicas by: its requests are counted in flight no longer.
func TestLegsLoadGivenBackWhenClientLeaves(t *testing.T) {
	t.Parallel()
	for _, onUp := range []bool{false, true} {
		t.Run(fmt.Sprintf("on up %t", onUp), func(t *testing.T) {
			t.Parallel()
			up, leg := startLegNode(t), startLegNode(t)
			held := leg
			if onUp {
				held = up
			}
			held.set(func(n *legNode) { n.hold = "hold" })
			p, addr, _ := startLegsProxy(t, up.addr(), fixedRing{held.addr()}, nil)
			c := dialStub(t, addr)
			c.c.SetDeadline(time.Now().Add(5 * time.Second))
			c.write(append(stubQuery(1, "SELECT hold FROM bench.kv WHERE k = 1"), stubQuery(2, "SELECT hold FROM bench.kv WHERE k = 2")...))
			held.waitHeld(t, 2)
			load := p.loads.of(held.addr())
			if n := load.inflight.Load(); n != 2 {
				t.Fatalf("%d requests counted in flight on the node, want 2", n)
			}
			c.c.Close()
			waitUntil(t, "the session to end", func() bool {
				p.mu.Lock()
				defer p.mu.Unlock()
				return len(p.sessions) == 0
			})
			if n := load.inflight.Load(); n != 0 {
				t.Errorf("%d requests of a client that left still counted in flight on the node", n)
			}
			held.release()
		})
	}
}

// A client that stops reading, with answers from a replica piling up for
// it, does not make that replica look busy to other sessions: what it has
// in flight there leaves the node's load once its writes wait, and what it
// sends after is not counted.
func TestLegsLoadOfClientNotReading(t *testing.T) {
	t.Parallel()
	up, err := fakenode.Start("127.0.0.1:0", fakenode.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(up.Close)
	replica, err := fakenode.Start("127.0.0.1:0", fakenode.Options{RowBytes: 32 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(replica.Close)
	p, addr, _ := startLegsProxy(t, up.Addr(), fixedRing{replica.Addr()}, func(c *config.Config) {
		c.MaxBufferedBytes = 64 << 10
	})
	c := dialStub(t, addr)
	var reads []byte
	for i := range 200 {
		reads = append(reads, readKV(int16(i+1), "bench.kv", i)...)
	}
	c.write(reads) // and read nothing
	s := onlySession(t, p)
	load := p.loads.of(replica.Addr())
	waitUntil(t, "the client's writes to wait", s.clientWaiting)
	waitUntil(t, "the replica's load to count none of them", func() bool { return load.inflight.Load() == 0 })
	s.mu.Lock()
	inflight := s.streams.inflight
	s.mu.Unlock()
	if inflight == 0 {
		t.Fatal("no request in flight: the test shows nothing")
	}
	t.Logf("%d requests in flight for a client not reading, none counted in the replica's load", inflight)
}

// shutdownInBackground shuts p down with shutdown, giving it 5 s, on
// another goroutine, and returns once p is draining; the channel gets what
// shutdown returns.
func shutdownInBackground(t *testing.T, p *Proxy, shutdown func(context.Context) error) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- shutdown(ctx)
	}()
	waitUntil(t, "draining", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.draining
	})
	return done
}
