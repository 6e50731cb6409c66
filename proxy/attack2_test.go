package proxy

// More attacks where two features meet (see seams_test.go): a read that
// waited on another connection's flight and is then forwarded on its own,
// the user a login names, and the STARTUP options that shape an answer.
// Each test attacks from one connection and measures another, or the
// upstream node that the limits protect.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/hotread"
)

// seamNode is a CQL node (protocol v4, uncompressed) for these attacks. It
// holds every QUERY whose text contains "k = 1" until release (after
// stopHolding, it answers them at once), counting them as they arrive;
// when user is set it asks for a SASL PLAIN login, which it reads as
// ScyllaDB and Cassandra before 4.0 do; and a connection whose STARTUP set
// THROW_ON_OVERLOAD to 1 gets Overloaded where others get a RESULT, as an
// overloaded Cassandra answers it.
type seamNode struct {
	ln             net.Listener
	user, password string

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	held    []seamHeld
	reads   int  // QUERYs containing "k = 1" received
	answers bool // answer them at once rather than hold them
	wg      sync.WaitGroup
}

// seamHeld is a QUERY the node holds, and whether its connection asked for
// Overloaded errors.
type seamHeld struct {
	c     *seamConn
	h     frame.Header
	throw bool
}

type seamConn struct {
	c  net.Conn
	mu sync.Mutex // serializes writes: answers and released requests
}

func startSeamNode(t *testing.T, user, password string) *seamNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &seamNode{ln: ln, user: user, password: password, conns: map[net.Conn]struct{}{}}
	n.wg.Add(1)
	go n.accept()
	t.Cleanup(func() {
		ln.Close()
		n.mu.Lock()
		for c := range n.conns {
			c.Close()
		}
		n.mu.Unlock()
		n.wg.Wait()
	})
	return n
}

func (n *seamNode) addr() string { return n.ln.Addr().String() }

func (n *seamNode) accept() {
	defer n.wg.Done()
	for {
		c, err := n.ln.Accept()
		if err != nil {
			return
		}
		n.mu.Lock()
		n.conns[c] = struct{}{}
		n.mu.Unlock()
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.serve(&seamConn{c: c})
			c.Close()
			n.mu.Lock()
			delete(n.conns, c)
			n.mu.Unlock()
		}()
	}
}

func (n *seamNode) serve(c *seamConn) {
	r := frame.NewReader(bufio.NewReader(c.c), 1<<20)
	throw := false
	for {
		f, h, err := r.Next()
		if err != nil {
			return
		}
		body := f[frame.HeaderSize:]
		switch h.Opcode {
		case frame.OpOptions:
			c.reply(h, frame.OpSupported, []byte{0, 0})
		case frame.OpStartup:
			v, _, _ := frame.StartupOption(body, "THROW_ON_OVERLOAD")
			throw = string(v) == "1"
			if n.user == "" {
				c.reply(h, frame.OpReady, nil)
				continue
			}
			const class = "org.apache.cassandra.auth.PasswordAuthenticator"
			c.reply(h, frame.OpAuthenticate, append(binary.BigEndian.AppendUint16(nil, uint16(len(class))), class...))
		case frame.OpAuthResponse:
			if user, password, ok := plainAsTheNodeReadsIt(body); ok && user == n.user && password == n.password {
				c.reply(h, frame.OpAuthSuccess, []byte{0xff, 0xff, 0xff, 0xff})
				continue
			}
			c.reply(h, frame.OpError, frame.AppendError(nil, h.Version, h.Stream, 0x0100, "bad credentials")[frame.HeaderSize:])
		case frame.OpQuery:
			if q, _ := frame.QueryString(body); bytes.Contains(q, []byte("k = 1")) {
				n.mu.Lock()
				n.reads++
				hold := !n.answers
				if hold {
					n.held = append(n.held, seamHeld{c, h, throw})
				}
				n.mu.Unlock()
				if hold {
					continue
				}
				seamHeld{c, h, throw}.answer()
				continue
			}
			c.reply(h, frame.OpResult, []byte{0, 0, 0, 1})
		default:
			c.reply(h, frame.OpResult, []byte{0, 0, 0, 1})
		}
	}
}

// plainAsTheNodeReadsIt reads a SASL PLAIN AUTH_RESPONSE body as ScyllaDB
// does (and Cassandra before 4.0): from the end, the password after the
// last zero byte, the user before it; whatever comes before the user is
// not looked at.
func plainAsTheNodeReadsIt(body []byte) (user, password string, ok bool) {
	if len(body) < 4 {
		return "", "", false
	}
	n := int(binary.BigEndian.Uint32(body))
	if n < 0 || n > len(body)-4 {
		return "", "", false
	}
	token := body[4 : 4+n]
	last := bytes.LastIndexByte(token, 0)
	if last < 0 {
		return "", "", false
	}
	password, token = string(token[last+1:]), token[:last]
	user = string(token[bytes.LastIndexByte(token, 0)+1:])
	return user, password, user != "" && password != ""
}

func (c *seamConn) reply(h frame.Header, op frame.Opcode, body []byte) {
	out := frame.AppendHeader(nil, frame.Header{Version: h.Version, Response: true, Stream: h.Stream, Opcode: op, Length: len(body)})
	c.mu.Lock()
	c.c.Write(append(out, body...))
	c.mu.Unlock()
}

// heldReads returns how many QUERYs containing "k = 1" the node has
// received.
func (n *seamNode) heldReads() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.reads
}

// release answers every held QUERY.
func (n *seamNode) release() {
	n.mu.Lock()
	held := n.held
	n.held = nil
	n.mu.Unlock()
	for _, r := range held {
		r.answer()
	}
}

// stopHolding answers the held QUERYs, and those that come after at once.
func (n *seamNode) stopHolding() {
	n.mu.Lock()
	n.answers = true
	n.mu.Unlock()
	n.release()
}

// answer answers r: Overloaded for a connection that asked for it, else a
// RESULT.
func (r seamHeld) answer() {
	if r.throw {
		r.c.reply(r.h, frame.OpError, frame.AppendError(nil, r.h.Version, r.h.Stream, frame.ErrCodeOverloaded, "overloaded")[frame.HeaderSize:])
		return
	}
	r.c.reply(r.h, frame.OpResult, []byte{0, 0, 0, 1})
}

// frozenProxy serves text, in front of node, on a clock that does not move:
// no budget or limit refills while the test runs.
func frozenProxy(t *testing.T, text string) *Proxy {
	t.Helper()
	cfg := parseConfig(t, text)
	var clock atomic.Int64
	clock.Store(int64(time.Hour))
	p, err := New(cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{testSnapshot(t)}))
	if err != nil {
		t.Fatal(err)
	}
	p.elapsed = clock.Load
	if err := p.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	p.cfg.Listen = servedOn(t, p)
	return p
}

// A read that joined another connection's flight and is then forwarded on
// its own connection reaches the node like any other read, and pays like
// one: its class's budget and its partition's limit count it. The attack:
// one connection leads a hot read the node is slow to answer, a second
// pipelines 300 identical reads, which join it without being charged or
// counted, and the first leaves, which forwards the 300 on the second's
// connection. (Unfixed, the node gets all 301 reads of a partition limited
// to 10 a second, and of a class whose budget is 50 units, on a clock that
// does not move; the class is charged for the leader's read alone.)
func TestReissuedReadsPayTheirWay(t *testing.T) {
	t.Parallel()
	const joiners = 300
	for _, tc := range []struct {
		name, extra string
		allowed     int // reads of the partition the node may get
	}{
		{"class budget", `clients:
  default: {name: default, max_units_per_second: 50}
request_units: {fixed: 1, per_row: 0, per_kib: 0, per_ms: 0}
`, 51},
		{"partition limit", `limits:
  algorithm: token-bucket
  burst: 1
  keyspaces:
    ks:
      tables:
        kv: {max_reads_per_second: 10}
`, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			node := startSeamNode(t, "", "")
			p := frozenProxy(t, hotKvConfig(node.addr())+tc.extra)
			const read = "SELECT * FROM ks.kv WHERE k = 1"
			leader := dialStub(t, p.cfg.Listen)
			leader.write(stubQuery(1, read))
			waitUntil(t, "the leader's read at the node", func() bool { return node.heldReads() == 1 })
			joiner := dialStub(t, p.cfg.Listen)
			// The joiner's reads, then a read of another partition, which
			// the node answers at once: once its answer is back, every read
			// before it joined the leader's or was answered.
			const sentinel = 1000
			var pipeline []byte
			for i := range joiners {
				pipeline = append(pipeline, stubQuery(int16(1+i), read)...)
			}
			joiner.write(append(pipeline, stubQuery(sentinel, "SELECT * FROM ks.kv WHERE k = 2")...))
			answered, refused := 0, 0
			next := func() {
				t.Helper()
				stream, code, _, err := joiner.next()
				if err != nil {
					t.Fatalf("the joiner's answers: %v", err)
				}
				if stream == sentinel {
					return
				}
				answered++
				if code != 0 {
					refused++
				}
			}
			for answered < joiners {
				before := answered
				if next(); answered == before {
					break // the sentinel
				}
			}
			leader.c.Close()
			waitUntil(t, "the leader's connection ended", func() bool {
				p.mu.Lock()
				defer p.mu.Unlock()
				return len(p.sessions) == 1
			})
			// The reads that joined are now forwarded, and answered as the
			// node gets them, or refused by the proxy.
			node.stopHolding()
			for answered < joiners {
				next()
			}
			got := node.heldReads()
			t.Logf("the node got %d reads (allowed %d); %d refused; class units charged %v", got, tc.allowed, refused,
				metricValue(t, p.clientMetrics.units.WithLabelValues("default")))
			if got > tc.allowed {
				t.Errorf("the node got %d reads of one partition from one class, allowed %d", got, tc.allowed)
			}
		})
	}
}

// The user a SASL PLAIN login names, for client classes, is the one the
// node authenticated. ScyllaDB (and Cassandra before 4.0) reads the token
// from its end: the password after the last zero byte, the user before it,
// anything in front ignored. "\x00admin\x00guest\x00pw" logs in as guest,
// with guest's password; the proxy took the field after the first zero
// byte, admin, and put a connection of user guest in class admins, which
// has no budget.
func TestPlainLoginUserAsTheNodeReadsIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, token string }{
		{"token read from its end", "\x00admin\x00guest\x00pw"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			node := startSeamNode(t, "guest", "pw")
			cfg := parseConfig(t, `listen: 127.0.0.1:0
upstreams: [`+node.addr()+`]
admin: {listen: ""}
clients:
  classes:
    - name: admins
      match: {users: [admin]}
      tier: 0
  default:
    name: default
    max_units_per_second: 1000
`)
			p, addr := serveProxy(t, cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{testSnapshot(t)}))
			c := dialRaw(t, addr, 4)
			c.send(0, &message.Startup{Options: map[string]string{"CQL_VERSION": "3.0.0"}})
			if op := c.recv().Header.OpCode; op != primitive.OpCodeAuthenticate {
				t.Fatalf("STARTUP answered %v", op)
			}
			c.send(1, &message.AuthResponse{Token: []byte(tc.token)})
			if op := c.recv().Header.OpCode; op != primitive.OpCodeAuthSuccess {
				t.Fatalf("the node refused the login: %v", op)
			}
			admins := p.clientMetrics.requests.WithLabelValues("admins")
			before := metricValue(t, admins)
			c.send(2, &message.Query{Query: "SELECT * FROM ks.kv WHERE k = 2", Options: readOne})
			c.recv()
			if metricValue(t, admins) > before {
				t.Errorf("a connection the node did not log in as admin is of class admins")
			}
		})
	}
}

// Reads are shared only between connections whose STARTUP options shape
// their answers alike. A driver that sets THROW_ON_OVERLOAD to 1 is
// answered Overloaded by a busy Cassandra where another driver's request
// waits its turn and is answered; the second must not be handed the
// first's Overloaded. (Unfixed, it is: the read's identity carries
// the rate-limit opt-in but no other option, so the plain connection's
// read joins the opted-in one's flight and gets its error.)
func TestHotReadStartupOptionsNotShared(t *testing.T) {
	t.Parallel()
	node := startSeamNode(t, "", "")
	cfg := parseConfig(t, hotKvConfig(node.addr()))
	p, addr := serveProxy(t, cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{testSnapshot(t)}))
	throws := dialRaw(t, addr, 4)
	throws.startup(map[string]string{"THROW_ON_OVERLOAD": "1"})
	plain := dialRaw(t, addr, 4)
	plain.startup(nil)
	throws.send(1, &message.Query{Query: "SELECT * FROM ks.kv WHERE k = 1", Options: readOne})
	waitUntil(t, "the first read at the node", func() bool { return node.heldReads() == 1 })
	plain.send(1, &message.Query{Query: "SELECT * FROM ks.kv WHERE k = 1", Options: readOne})
	waitUntil(t, "the second read joined or forwarded", func() bool {
		return node.heldReads() == 2 || metricValue(t, p.hotReads.served.WithLabelValues("ks", "kv", "coalesced")) == 1
	})
	node.release()
	if op := throws.recv().Header.OpCode; op != primitive.OpCodeError {
		t.Fatalf("the connection that asked for Overloaded got %v", op)
	}
	if f := plain.recv(); f.Header.OpCode != primitive.OpCodeResult {
		t.Errorf("a connection that did not ask for Overloaded got %v: %v", f.Header.OpCode, f.Body.Message)
	}
}

// A connection whose client left orphans the flights it led once: the
// reads that waited on them are forwarded on their own connections, and
// the flights are released. They must then be gone from its stream table,
// where the client writer's stall hook looks for flights to orphan: a write
// to the client that waits for room after abandonInFlight (the flush loop
// of toClient.Close on a client that does not read, or an answer another
// connection's flight hands it) would land a released flight again, and
// Flights.Land on a released flight dereferences its nil shard, or, once
// the pool gave the flight to another read, takes that read's waiters and
// releases it under its leader. (Unfixed, abandonInFlight releases the
// flights but leaves them in the table, and clientStall panics.)
func TestAbandonedFlightsLeaveTheStreamTable(t *testing.T) {
	t.Parallel()
	s := handlerSession(t, nil)
	hr := s.p.hotReads
	read := &hotread.Read{Version: 4, Opcode: uint8(frame.OpQuery), Body: []byte("SELECT * FROM ks.kv WHERE k = 1"), Table: 1}
	fl, joined := hr.flights.Join(read, hr.gens.At(read.Table, read.Token), waiter{s: s, stream: 1})
	if fl == nil || joined {
		t.Fatalf("the read leads no flight (joined %v)", joined)
	}
	s.streams.begin(1, request{start: s.now(), version: 4, flight: fl})
	s.clientGone.Store(true)
	s.abandonInFlight()
	s.streams.each(func(id int16, r request) {
		if r.flight != nil {
			t.Errorf("stream %d still names the flight it led, released", id)
		}
	})
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("the stall hook, after the client left, panics: %v", r)
		}
	}()
	s.clientStall(true)
}

// hotKvConfig is the configuration of a proxy in front of upstream that
// coalesces every read of ks.kv.
func hotKvConfig(upstream string) string {
	return `listen: 127.0.0.1:0
upstreams: [` + upstream + `]
admin: {listen: ""}
hot_reads:
  keyspaces:
    ks:
      tables:
        kv: {coalesce: true, hot_rate: 0}
`
}
