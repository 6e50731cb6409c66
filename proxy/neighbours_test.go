package proxy

// A well-behaved connection among neighbours that misbehave: connections
// driven by fuzz input start and start again, log in as anyone, name
// other applications, switch keyspaces behind pipelined reads, pile
// identical hot reads on the partitions it reads, abandon pipelines,
// reset, and stop reading, through one proxy that couples connections
// every way it can (hot reads coalesced and cached, client classes with
// budgets in request units, partition limits). Whatever they do, the
// well-behaved connection gets the answers it gets alone, byte for byte,
// each within a bound; its class is counted its requests and no others,
// is charged a unit at most for each, and is never refused; no connection
// holds more answers than its own max_buffered_bytes allows; and every
// session ends once its client has gone (docs/reliability.md, "What one
// client can do to others").

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

// neighbourAnswerBound is how long the well-behaved connection waits for
// each answer: generous for a race build on busy cores (its answers take
// milliseconds), far under hot_reads.max_wait, so that a read stuck behind
// a neighbour shows as a timeout rather than as slowness (the proxy's
// clock stands still in these tests, so max_wait never releases a read
// anyway), and short enough that a run that fails takes less than the 10 s
// after which the fuzzing engine gives up on an input as hung.
const neighbourAnswerBound = 5 * time.Second

// neighbourSlowFor is how long the node holds a read whose text has
// "slow": long enough for reads of other connections to join it.
const neighbourSlowFor = 30 * time.Millisecond

// The modes of the node behind the proxy, the first bit of the input.
const (
	// nodeAnswers answers every read of ks.kv with 4 rows of 32 KiB, so
	// that a client that does not read fills its socket.
	nodeAnswers = iota
	// nodeRefuses refuses every request on ks.kv, with ScyllaDB's
	// rate-limit error for connections that opted in and Config_error
	// for the others.
	nodeRefuses
)

// neighbourNode starts a node of mode, which asks for user guest's
// password and holds reads whose text has "slow", until the test ends.
func neighbourNode(tb testing.TB, mode byte) *fakenode.Node {
	tb.Helper()
	opts := fakenode.Options{Keyspace: "ks", Table: "kv", Username: "guest", Password: "pw",
		RateLimitError: true, SlowQuery: "slow", SlowFor: neighbourSlowFor}
	if mode == nodeAnswers {
		opts.RowBytes, opts.Rows = 32<<10, 4
	} else {
		opts.RejectEvery = 1
	}
	n, err := fakenode.Start("127.0.0.1:0", opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(n.Close)
	return n
}

// neighbourMaxBuffered is max_buffered_bytes, and neighbourAnswer more
// than the largest answer, for the bound on what a connection holds.
const (
	neighbourMaxBuffered = 512 << 10
	neighbourAnswer      = 160 << 10
)

// neighbourConfig couples connections every way the proxy can: ks.kv's
// reads are coalesced and cached, ks.comp's coalesced and limited, ks.kv's
// writes limited; the application good has a class and a budget of its
// own, scanner a small one, and requests cost one unit each. (The
// limiter's table is the smallest: a race build takes hundreds of
// milliseconds to touch the default's 4 MiB.)
func neighbourConfig(upstream string) string {
	return `listen: 127.0.0.1:0
upstreams: [` + upstream + `]
admin: {listen: ""}
max_buffered_bytes: ` + fmt.Sprint(neighbourMaxBuffered) + `
hot_reads:
  max_wait: 1m
  memory: 256MiB
  keyspaces:
    ks:
      tables:
        kv: {coalesce: true, cache_ttl: 10s, hot_rate: 0}
        comp: {coalesce: true, hot_rate: 0}
limits:
  memory: 64KiB
  keyspaces:
    ks:
      tables:
        kv: {max_writes_per_second: 10}
        comp: {max_reads_per_second: 5}
clients:
  classes:
    - name: good
      match: {application_names: [good]}
      max_units_per_second: 1000
    - name: batch
      match: {application_names: [scanner]}
      max_units_per_second: 20
    - name: vip
      match: {application_names: [vip]}
      tier: 0
    - name: admins
      match: {users: [admin]}
      tier: 0
request_units: {fixed: 1, per_row: 0, per_kib: 0, per_ms: 0}
`
}

// neighbourProxy serves a proxy in front of node until the test ends, on
// a clock that stands still: budgets do not refill, cached answers do not
// expire and waiting reads are never released by max_wait.
func neighbourProxy(t *testing.T, node *fakenode.Node) (*Proxy, string) {
	t.Helper()
	cfg := parseConfig(t, neighbourConfig(node.Addr()))
	p, err := New(cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{testSnapshot(t)}))
	if err != nil {
		t.Fatal(err)
	}
	p.elapsed = func() int64 { return int64(time.Hour) }
	// New made the budgets on the real clock: make them again on the test's.
	if err := p.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	ln := listen(t, "127.0.0.1:0")
	go p.Serve(ln)
	// A session that outlives its connections would keep Shutdown
	// waiting: fail rather than hang.
	t.Cleanup(func() {
		done := make(chan struct{})
		go func() {
			defer close(done)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			p.Shutdown(ctx)
		}()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			t.Errorf("Shutdown has not returned after 2 s")
		}
	})
	return p, ln.Addr().String()
}

// goodScript is what the well-behaved connection sends, one request at a
// time: it starts as the application good and logs in, reads partitions
// that others read too (the slow ones keep the node busy for a while),
// writes one, and does it again in keyspace ks, unqualified. Request i
// goes on stream i.
var goodScript = []string{
	"STARTUP",
	"AUTH_RESPONSE",
	"SELECT slow FROM ks.kv WHERE k = 1",
	"SELECT * FROM ks.kv WHERE k = 1",
	"SELECT * FROM ks.kv WHERE k = 2",
	"UPDATE ks.kv SET v = 0x01 WHERE k = 2",
	"SELECT * FROM ks.kv WHERE k = 2",
	"SELECT slow FROM ks.kv WHERE k = 1",
	"SELECT * FROM ks.kv WHERE k = 1",
	"USE ks",
	"SELECT slow FROM kv WHERE k = 1",
	"SELECT * FROM kv WHERE k = 1",
	"SELECT * FROM ks.kv WHERE k = 2",
	"UPDATE ks.kv SET v = 0x02 WHERE k = 2",
	"SELECT slow FROM kv WHERE k = 1",
	"SELECT * FROM kv WHERE k = 1",
	"SELECT * FROM ks.kv WHERE k = 1",
}

// neverShared is how many of goodScript's requests are never served from
// another's answer, and so are each charged a unit: its writes and USE.
const neverShared = 3

// goodFrame is the frame of the good connection's request i.
func goodFrame(i int) []byte {
	switch text := goodScript[i]; text {
	case "STARTUP":
		return startupFrame(int16(i), [][2]string{{"CQL_VERSION", "3.0.0"}, {"APPLICATION_NAME", "good"}})
	case "AUTH_RESPONSE":
		return authFrame(int16(i), "\x00guest\x00pw")
	default:
		return stubQuery(int16(i), text)
	}
}

// startupFrame is a v4 STARTUP of opts on stream.
func startupFrame(stream int16, opts [][2]string) []byte {
	body := binary.BigEndian.AppendUint16(nil, uint16(len(opts)))
	for _, kv := range opts {
		for _, s := range kv {
			body = binary.BigEndian.AppendUint16(body, uint16(len(s)))
			body = append(body, s...)
		}
	}
	return append(frame.AppendHeader(nil, frame.Header{Version: 4, Stream: stream, Opcode: frame.OpStartup, Length: len(body)}), body...)
}

// authFrame is a v4 AUTH_RESPONSE of token on stream.
func authFrame(stream int16, token string) []byte {
	body := binary.BigEndian.AppendUint32(nil, uint32(len(token)))
	body = append(body, token...)
	return append(frame.AppendHeader(nil, frame.Header{Version: 4, Stream: stream, Opcode: frame.OpAuthResponse, Length: len(body)}), body...)
}

// goodRun is what the good connection got: each answer's opcode and body,
// and what its class was counted and charged.
type goodRun struct {
	answers                   [][]byte
	requests, units, refusals float64
}

// runGood runs goodScript on a new connection to addr. Before each
// request it calls before, after sending it sent; it stops at the first
// request not answered within neighbourAnswerBound.
func runGood(t *testing.T, addr string, before, sent func(step int)) [][]byte {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := frame.NewReader(bufio.NewReader(c), 16<<20)
	var answers [][]byte
	for i := range goodScript {
		before(i)
		c.SetDeadline(time.Now().Add(neighbourAnswerBound))
		_, err := c.Write(goodFrame(i))
		sent(i)
		if err != nil {
			t.Errorf("request %d (%s): %v", i, goodScript[i], err)
			return answers
		}
		start := time.Now()
		f, h, err := r.Next()
		if err != nil {
			t.Errorf("request %d (%s): no answer after %v: %v", i, goodScript[i], time.Since(start).Round(time.Millisecond), err)
			return answers
		}
		if h.Stream != int16(i) {
			t.Errorf("request %d (%s): answered on stream %d", i, goodScript[i], h.Stream)
			return answers
		}
		answers = append(answers, append([]byte{byte(h.Opcode)}, f[frame.HeaderSize:]...))
	}
	return answers
}

// counted reads what p counted and charged the class good.
func (g *goodRun) counted(t *testing.T, p *Proxy) {
	m := p.clientMetrics
	g.requests = metricValue(t, m.requests.WithLabelValues("good"))
	g.units = metricValue(t, m.units.WithLabelValues("good"))
	g.refusals = metricValue(t, m.refusals.WithLabelValues("good", "rejected"))
}

// runAlone runs the good connection alone on a proxy of its own in front
// of node: what every other run must match.
func runAlone(t *testing.T, node *fakenode.Node) *goodRun {
	t.Helper()
	p, addr := neighbourProxy(t, node)
	g := &goodRun{answers: runGood(t, addr, func(int) {}, func(int) {})}
	g.counted(t, p)
	if len(g.answers) != len(goodScript) || g.refusals != 0 {
		t.Fatalf("alone: %d of %d requests answered, %v refused", len(g.answers), len(goodScript), g.refusals)
	}
	for i, a := range g.answers {
		if op := frame.Opcode(a[0]); goodScript[i] != "STARTUP" && goodScript[i] != "AUTH_RESPONSE" && op != frame.OpResult && op != frame.OpError {
			t.Fatalf("alone: request %d (%s) answered %v", i, goodScript[i], op)
		}
	}
	return g
}

// What the neighbours send, by index.
var (
	neighbourApps = []string{"", "web", "vip", "scanner", "good", "web", "good", "admin"}
	// neighbourCompressions: a name the proxy does not know makes a
	// STARTUP it refuses.
	neighbourCompressions = []string{"", "lz4", "snappy", "zip"}
	neighbourTokens       = []string{"\x00guest\x00pw", "\x00guest\x00guess", "\x00admin\x00pw", "\x00good\x00pw", "", "\x01\x02\x03"}
	// neighbourReads are the reads neighbours pile up: the good
	// connection's own (qualified, and unqualified for keyspace ks), and
	// reads of partitions it does not read; and, as readNext, the good
	// connection's first read at or after the request the neighbour's next
	// gate lets go (its last gate's, if none follows).
	neighbourReads = []string{
		"SELECT slow FROM ks.kv WHERE k = 1",
		"SELECT * FROM ks.kv WHERE k = 1",
		"SELECT * FROM ks.kv WHERE k = 2",
		"SELECT slow FROM kv WHERE k = 1",
		"SELECT * FROM kv WHERE k = 1",
		"SELECT slow FROM ks.kv WHERE k = 5",
		"SELECT * FROM ks.comp WHERE a = 1 AND b = 'x'",
		readNext: "",
	}
	neighbourCounts = []int{1, 2, 4, 8, 16, 32, 48, 64}
)

// readNext is the index in neighbourReads of the good connection's next
// read.
const readNext = 7

// goodReadFrom is the first read of goodScript at or after request i, or
// its last.
func goodReadFrom(i int) string {
	last := ""
	for j, text := range goodScript {
		if strings.HasPrefix(text, "SELECT") {
			if last = text; j >= i {
				break
			}
		}
	}
	return last
}

// attackKind is what a neighbour does, the low 4 bits of an op.
type attackKind uint8

const (
	attackStartup        attackKind = iota // STARTUP: APPLICATION_NAME, COMPRESSION, the rate-limit opt-in
	attackAuth                             // AUTH_RESPONSE: right or wrong, as one user or another
	attackUse                              // USE ks
	attackUseThenReads                     // a USE and unqualified reads behind it, in one write
	attackReads                            // identical reads, in one write
	attackReadsToo                         // the same, so that it is drawn twice as often
	attackBigReads                         // reads of partitions with large answers, in one write
	attackClose                            // close the connection, open another
	attackReset                            // reset the connection, open another
	attackStopReading                      // read nothing more on this connection
	attackPause                            // sleep a few milliseconds
	attackGate                             // once the node holds its slow reads, let the good connection send request n, then go on
	attackStall                            // stop reading, then reads of partitions with large answers
	attackOptions                          // OPTIONS
	attackReadsThenLeave                   // identical reads, then close or reset before their answers
	attackGateToo                          // attackGate, drawn twice as often
)

// attackOp is one thing a neighbour does.
type attackOp struct {
	kind  attackKind
	out   []byte // what it writes
	gate  int    // attackGate: the good connection's request it lets go first
	pause time.Duration
	slow  bool // out holds a read the node holds for neighbourSlowFor
	reset bool // leave with a reset
	what  string
	// next holds the streams of readNext reads, until the next gate says
	// which read they are.
	next []int16
}

// maxAttackOps bounds the ops an input makes, so that a run takes a few
// hundred milliseconds.
const maxAttackOps = 64

// neighbourPlan is what one neighbour does.
type neighbourPlan struct {
	// hello, when set, is written first on every connection it opens: a
	// STARTUP as the application web and a login as the good connection's
	// user, so that its reads are identical to the good connection's, and
	// perhaps the rate-limit opt-in and a USE ks.
	hello []byte
	ops   []attackOp
}

// neighbourHello is neighbourPlan.hello, on streams no op uses.
func neighbourHello(optIn, use bool) []byte {
	opts := [][2]string{{"CQL_VERSION", "3.0.0"}, {"APPLICATION_NAME", "web"}}
	if optIn {
		opts = append(opts, [2]string{rateLimitKey, ""})
	}
	b := append(startupFrame(30001, opts), authFrame(30002, "\x00guest\x00pw")...)
	if use {
		b = append(b, stubQuery(30003, "USE ks")...)
	}
	return b
}

// decodeNeighbours turns data into the node's mode and each neighbour's
// plan. The first byte picks the mode (bit 0), the number of neighbours
// (1 to 3, bits 1 and 2) and which of them say hello on each connection
// (bits 3 to 5); the second which of those opt in to the rate-limit error
// (bits 0 to 2) and use keyspace ks (bits 3 to 5) as they do. Each op is
// two bytes: the neighbour (high 4 bits) and the kind (low 4 bits), then
// an argument.
//
// A neighbour never names the application good in the first STARTUP of a
// connection that the node accepts: that would make it of good's class by
// right. It may in any later one, which must change nothing. It never
// writes: a write moves on the generation of what it wrote, and whether
// that invalidates the good connection's cached reads depends on a salted
// hash; nothing else it does may change what the good connection is
// served, or how.
func decodeNeighbours(data []byte) (mode byte, neighbours []neighbourPlan) {
	if len(data) < 2 {
		return nodeAnswers, nil
	}
	mode = data[0] & 1
	n := 1 + int(data[0]>>1&3)%3
	neighbours = make([]neighbourPlan, n)
	type state struct {
		stream  int16
		started bool // sent a STARTUP the node accepts on this connection
		gate    int
	}
	st := make([]state, n)
	for a := range neighbours {
		if data[0]>>(3+a)&1 != 0 {
			neighbours[a].hello = neighbourHello(data[1]>>a&1 != 0, data[1]>>(3+a)&1 != 0)
			st[a].started = true
		}
	}
	data = data[2:]
	// resolve makes neighbour a's readNext reads since its last gate the
	// good connection's read at or after request gate.
	resolve := func(a, gate int) {
		text := goodReadFrom(gate)
		for i := range neighbours[a].ops {
			op := &neighbours[a].ops[i]
			for _, stream := range op.next {
				op.out = append(op.out, stubQuery(stream, text)...)
			}
			if op.next != nil {
				op.slow = strings.Contains(text, "slow")
				op.what = fmt.Sprintf("%d × %q%s", len(op.next), text, op.what)
				op.next = nil
			}
		}
	}
	defer func() {
		for a := range neighbours {
			resolve(a, st[a].gate)
		}
	}()
	for ops := 0; len(data) >= 2 && ops < maxAttackOps; ops++ {
		a, kind, arg := int(data[0]>>4)%n, attackKind(data[0]&15), data[1]
		data = data[2:]
		s := &st[a]
		next := func() int16 {
			s.stream = s.stream%30000 + 1
			return s.stream
		}
		reads := func(text string, count int) []byte {
			var b []byte
			for range count {
				b = append(b, stubQuery(next(), text)...)
			}
			return b
		}
		op := attackOp{kind: kind}
		switch kind {
		case attackStartup:
			app, comp, optIn := neighbourApps[arg&7], neighbourCompressions[arg>>3&3], arg&0x20 != 0
			if app == "good" && !s.started {
				app = "web"
			}
			opts := [][2]string{{"CQL_VERSION", "3.0.0"}}
			if app != "" {
				opts = append(opts, [2]string{"APPLICATION_NAME", app})
			}
			if comp != "" {
				opts = append(opts, [2]string{"COMPRESSION", comp})
			}
			if optIn {
				opts = append(opts, [2]string{rateLimitKey, ""})
			}
			op.out = startupFrame(next(), opts)
			op.what = fmt.Sprintf("STARTUP %q", opts[1:])
			s.started = s.started || comp != "zip"
		case attackAuth:
			token := neighbourTokens[int(arg)%len(neighbourTokens)]
			op.out = authFrame(next(), token)
			op.what = fmt.Sprintf("AUTH_RESPONSE %q", token)
		case attackUse:
			op.out = stubQuery(next(), "USE ks")
			op.what = "USE ks"
		case attackUseThenReads:
			keyspace, text := "other", neighbourReads[3+arg>>4&1]
			if arg&4 != 0 {
				keyspace = "ks"
			}
			if arg&8 != 0 { // a read before the USE too
				op.out = stubQuery(next(), text)
			}
			op.out = append(op.out, stubQuery(next(), "USE "+keyspace)...)
			op.out = append(op.out, reads(text, 1+int(arg&3))...)
			op.slow = strings.Contains(text, "slow")
			op.what = fmt.Sprintf("USE %s, then %d × %q", keyspace, 1+arg&3, text)
		case attackReads, attackReadsToo, attackReadsThenLeave:
			text, count := neighbourReads[arg&7], neighbourCounts[arg>>5]
			if arg&7 == readNext {
				for range count {
					op.next = append(op.next, next())
				}
			} else {
				op.out = reads(text, count)
				op.slow = strings.Contains(text, "slow")
				op.what = fmt.Sprintf("%d × %q", count, text)
			}
			op.reset = arg&0x10 != 0
			if kind == attackReadsThenLeave {
				op.what += map[bool]string{false: ", then close", true: ", then reset"}[op.reset]
				s.started = neighbours[a].hello != nil
			}
		case attackBigReads, attackStall:
			count := 8 + int(arg)%57
			for i := range count {
				op.out = append(op.out, stubQuery(next(), fmt.Sprintf("SELECT * FROM ks.kv WHERE k = %d", 100+i))...)
			}
			op.what = fmt.Sprintf("%d reads of 128 KiB answers", count)
			if kind == attackStall {
				op.what = "stop reading, then " + op.what
			}
		case attackClose, attackReset:
			op.reset = kind == attackReset
			op.what = map[bool]string{false: "close", true: "reset"}[op.reset]
			s.started = neighbours[a].hello != nil
		case attackStopReading:
			op.what = "stop reading"
		case attackPause:
			op.pause = time.Duration(arg%16) * time.Millisecond
			op.what = fmt.Sprintf("pause %v", op.pause)
		case attackGate, attackGateToo:
			op.kind = attackGate
			s.gate = max(s.gate, int(arg)%len(goodScript))
			op.gate = s.gate
			op.what = fmt.Sprintf("let the good connection send %d (%s) first", op.gate, goodScript[op.gate])
			resolve(a, s.gate)
		case attackOptions:
			op.out = frame.AppendHeader(nil, frame.Header{Version: 4, Stream: next(), Opcode: frame.OpOptions})
			op.what = "OPTIONS"
		}
		neighbours[a].ops = append(neighbours[a].ops, op)
	}
	return mode, neighbours
}

// neighbour runs one neighbour's plan against the proxy.
type neighbour struct {
	neighbourPlan
	addr string
	node *fakenode.Node
	// reached is closed as it reaches each of its gates, finished once it
	// has done all its ops.
	reached  []chan struct{}
	finished chan struct{}

	mu      sync.Mutex
	conns   []net.Conn // every connection it opened
	readers sync.WaitGroup
}

func newNeighbour(plan neighbourPlan, addr string, node *fakenode.Node) *neighbour {
	nb := &neighbour{neighbourPlan: plan, addr: addr, node: node, finished: make(chan struct{})}
	for _, op := range plan.ops {
		if op.kind == attackGate {
			nb.reached = append(nb.reached, make(chan struct{}))
		}
	}
	return nb
}

// dial opens a connection that reads and drops what it is sent, into a
// small receive buffer, until it stops reading, and says hello on it if
// nb does; nil if it cannot.
func (nb *neighbour) dial() net.Conn {
	c, err := net.DialTimeout("tcp", nb.addr, 5*time.Second)
	if err != nil {
		return nil
	}
	c.(*net.TCPConn).SetReadBuffer(16 << 10)
	nb.mu.Lock()
	nb.conns = append(nb.conns, c)
	nb.mu.Unlock()
	nb.readers.Go(func() { io.Copy(io.Discard, c) })
	return nb.write(c, nb.hello)
}

// write writes b to c, and returns c, or nil once c failed. A proxy that
// stopped reading this client (its answers wait) may never take all of
// it: the rest is dropped with the connection.
func (nb *neighbour) write(c net.Conn, b []byte) net.Conn {
	if c == nil || len(b) == 0 {
		return c
	}
	c.SetWriteDeadline(time.Now().Add(250 * time.Millisecond))
	if _, err := c.Write(b); err != nil {
		leave(c, true)
		return nil
	}
	return c
}

// leave closes c, with a reset if asked to.
func leave(c net.Conn, reset bool) {
	if c == nil {
		return
	}
	if reset {
		c.(*net.TCPConn).SetLinger(0)
	}
	c.Close()
}

// run does nb's ops; the good connection closes sent[i] once it sent its
// request i, and stop ends the run.
func (nb *neighbour) run(sent []chan struct{}, stop <-chan struct{}) {
	defer close(nb.finished)
	c := nb.dial()
	// A gate waits for the node to hold the slow reads written since the
	// last one, if any: what the neighbour did has taken effect.
	var slowMark uint64
	slowSent := false
	gates := 0
	for _, op := range nb.ops {
		select {
		case <-stop:
			return
		default:
		}
		switch op.kind {
		case attackClose, attackReset:
			leave(c, op.reset)
			c = nb.dial()
		case attackStopReading:
			if c != nil {
				c.SetReadDeadline(time.Now())
			}
		case attackPause:
			select {
			case <-time.After(op.pause):
			case <-stop:
				return
			}
		case attackGate:
			for deadline := time.Now().Add(300 * time.Millisecond); slowSent && nb.node.SlowRequests() <= slowMark && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			slowSent = false
			close(nb.reached[gates])
			gates++
			select {
			case <-sent[op.gate]:
			case <-stop:
				return
			}
		default:
			if op.kind == attackStall && c != nil {
				c.SetReadDeadline(time.Now())
			}
			if op.slow {
				slowMark, slowSent = nb.node.SlowRequests(), true
			}
			c = nb.write(c, op.out)
			if op.kind == attackReadsThenLeave {
				leave(c, op.reset)
				c = nb.dial()
			}
		}
	}
}

// end resets every connection nb opened, once its run is over.
func (nb *neighbour) end() {
	<-nb.finished
	nb.mu.Lock()
	for _, c := range nb.conns {
		leave(c, true)
	}
	nb.mu.Unlock()
	nb.readers.Wait()
}

// gatesBefore is how many of nb's gates it reaches before the good
// connection sends its request step: those that let go an earlier
// request, and the first that lets go this one (a second one comes after
// the first lets go).
func (nb *neighbour) gatesBefore(step int) int {
	n := 0
	for _, op := range nb.ops {
		if op.kind == attackGate && op.gate <= step {
			n++
			if op.gate == step {
				break
			}
		}
	}
	return n
}

// neighboursOne runs the good connection next to the neighbours data
// makes, on a new proxy in front of node (of the mode data names), and
// checks it against alone.
func neighboursOne(t *testing.T, node *fakenode.Node, alone *goodRun, data []byte) {
	_, plans := decodeNeighbours(data)
	p, addr := neighbourProxy(t, node)
	stop := make(chan struct{})
	sent := make([]chan struct{}, len(goodScript))
	for i := range sent {
		sent[i] = make(chan struct{})
	}
	var nbs []*neighbour
	var wg sync.WaitGroup
	for _, plan := range plans {
		nb := newNeighbour(plan, addr, node)
		nbs = append(nbs, nb)
		wg.Go(func() { nb.run(sent, stop) })
	}
	ended := false
	endNeighbours := func() {
		if ended {
			return
		}
		ended = true
		close(stop)
		wg.Wait()
		for _, nb := range nbs {
			nb.end()
		}
	}
	t.Cleanup(endNeighbours)
	defer func() {
		if t.Failed() {
			for i, plan := range plans {
				if plan.hello != nil {
					t.Logf("neighbour %d: on each connection, %s", i, helloWhat(plan.hello))
				}
				for _, op := range plan.ops {
					t.Logf("neighbour %d: %s", i, op.what)
				}
			}
		}
	}()

	// Before its request i, the good connection lets each neighbour reach
	// the gates that let i go (a neighbour that writes to a proxy that no
	// longer reads it may take its write deadline).
	before := func(i int) {
		timeout := time.After(2 * time.Second)
		for _, nb := range nbs {
			if n := nb.gatesBefore(i); n > 0 {
				select {
				case <-nb.reached[n-1]:
				case <-nb.finished:
				case <-timeout:
				}
			}
		}
	}
	got := goodRun{answers: runGood(t, addr, before, func(i int) { close(sent[i]) })}
	for i := range min(len(got.answers), len(alone.answers)) {
		if !bytes.Equal(got.answers[i], alone.answers[i]) {
			t.Errorf("request %d (%s): answered %v %q, alone %v %q", i, goodScript[i],
				frame.Opcode(got.answers[i][0]), clip(got.answers[i][1:]), frame.Opcode(alone.answers[i][0]), clip(alone.answers[i][1:]))
		}
	}

	// What a connection holds of answers is its own max_buffered_bytes
	// twice (a batch being written, the next queued), past it by at most
	// an answer being written and one handed over by each connection whose
	// read it waited on.
	waitAWhile(500*time.Millisecond, func() bool { return p.hotReads.flights.Len() == 0 })
	limit := int64(2*neighbourMaxBuffered + (len(nbs)+2)*neighbourAnswer)
	p.mu.Lock()
	for s := range p.sessions {
		if c, u := s.toClient.Held(), s.up.to.Held(); c > limit || u > limit {
			t.Errorf("a connection holds %d bytes for its client and %d for its upstream, over %d", c, u, limit)
		}
	}
	p.mu.Unlock()

	// Charges once the neighbours are gone: a neighbour's requests are
	// counted by the time its session ends.
	endNeighbours()
	sessions := func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.sessions)
	}
	if !waitAWhile(2*time.Second, func() bool { return sessions() == 0 }) {
		t.Errorf("%d sessions left 2 s after every client left", sessions())
	}
	got.counted(t, p)
	// The class is counted the good connection's requests, and none of
	// anyone else's; it is never refused. Each request costs one unit
	// once, or nothing: a read served from another connection's answer
	// costs nothing, one handed on to be forwarded on its own connection
	// (its leader left or stalled) costs what any forwarded read does, and
	// its answer is not cached. So neighbours may make the charges lower
	// than alone or higher, but never more than a unit a request, nor less
	// than a unit for each request never served from another's answer.
	if got.requests != alone.requests || got.refusals != 0 || got.units > got.requests || got.units < neverShared {
		t.Errorf("class good: %v requests, %v units, %v refused; alone %v requests, %v units; at least %v units",
			got.requests, got.units, got.refusals, alone.requests, alone.units, neverShared)
	}
}

// waitAWhile waits up to d for cond, and says whether it held.
func waitAWhile(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// clip shortens b for a message.
func clip(b []byte) []byte {
	if len(b) > 80 {
		return b[:80]
	}
	return b
}

// helloWhat says what hello holds.
func helloWhat(hello []byte) string {
	what := "STARTUP as web, log in as guest"
	if bytes.Contains(hello, []byte(rateLimitKey)) {
		what = "STARTUP as web with the rate-limit opt-in, log in as guest"
	}
	if bytes.Contains(hello, []byte("USE ks")) {
		what += ", USE ks"
	}
	return what
}

// neighbourInput makes an input of mode, with attackers neighbours (1 to
// 3), doing ops.
func neighbourInput(mode byte, attackers int, ops ...[]byte) []byte {
	b := []byte{mode | byte(attackers-1)<<1, 0}
	for _, op := range ops {
		b = append(b, op...)
	}
	return b
}

// nop is neighbour a's op of kind with arg.
func nop(a int, kind attackKind, arg byte) []byte { return []byte{byte(a)<<4 | byte(kind), arg} }

// neighbourSeeds are, as inputs, the attacks that worked before each was
// fixed, two that did not, and inputs drawn at random from fixed seeds.
func neighbourSeeds() []struct {
	name string
	data []byte
} {
	const (
		web      = 1
		rightPw  = 0
		optIn    = 0x20
		commonK1 = 1
		k5       = 5
	)
	hello := func(a int) byte { return 1 << (3 + a) }
	many := func(n int) byte { // the index of n in neighbourCounts, shifted
		for i, c := range neighbourCounts {
			if c == n {
				return byte(i) << 5
			}
		}
		panic(n)
	}
	seeds := []struct {
		name string
		data []byte
	}{
		// It leads a flight for the good connection's read while its
		// socket is full of answers it does not read.
		{"leader stops reading", neighbourInput(nodeAnswers, 1,
			nop(0, attackStartup, web), nop(0, attackAuth, rightPw), nop(0, attackStall, 56),
			nop(0, attackReads, readNext|many(1)), nop(0, attackGate, 2))},
		// 64 identical slow reads it never reads: 63 answers handed over.
		{"identical reads not read", neighbourInput(nodeAnswers, 1,
			nop(0, attackStartup, web), nop(0, attackStopReading, 0), nop(0, attackReads, k5|many(64)),
			nop(0, attackGate, 3))},
		// It opted in to the rate-limit error; the good connection did not.
		{"opt-in", neighbourInput(nodeRefuses, 1,
			nop(0, attackStartup, web|optIn), nop(0, attackAuth, rightPw), nop(0, attackReads, readNext|many(1)),
			nop(0, attackGate, 2))},
		// A second STARTUP names the application good.
		{"second STARTUP", neighbourInput(nodeAnswers, 1,
			nop(0, attackStartup, web), nop(0, attackAuth, rightPw), nop(0, attackStartup, 4),
			nop(0, attackReads, commonK1|many(8)))},
		// USE ks (answered by the time the node holds the slow read
		// after it), then a USE other pipelined with the good connection's
		// unqualified slow read: the node reads it in other.
		{"USE pipelined", neighbourInput(nodeAnswers, 1,
			nop(0, attackStartup, web), nop(0, attackAuth, rightPw), nop(0, attackUse, 0),
			nop(0, attackReads, k5|many(1)), nop(0, attackGate, 0), nop(0, attackPause, 15),
			nop(0, attackUseThenReads, 0), nop(0, attackGate, 10))},
		// It leads the good connection's read, then leaves; another
		// leaves reads of the good connection's in flight.
		{"leader leaves", neighbourInput(nodeAnswers|hello(0)|hello(1), 2,
			nop(0, attackReads, readNext|many(4)), nop(0, attackGate, 2), nop(0, attackReset, 0),
			nop(1, attackGate, 9), nop(1, attackUse, 0), nop(1, attackReadsThenLeave, readNext|many(16)))},
		// A class with a small budget pipelines and leaves, again and
		// again (what that escaped was the class's own budget).
		{"budget escape", neighbourInput(nodeRefuses, 1,
			nop(0, attackStartup, 3), nop(0, attackReadsThenLeave, 6|many(48)),
			nop(0, attackStartup, 3), nop(0, attackReadsThenLeave, 6|many(48)|0x10),
			nop(0, attackStartup, 3), nop(0, attackReadsThenLeave, 1|many(48)))},
	}
	for _, seed := range []uint64{1, 2, 3, 4} {
		r := rand.New(rand.NewPCG(seed, 0x6e656967))
		data := make([]byte, 2+2*24)
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		seeds = append(seeds, struct {
			name string
			data []byte
		}{fmt.Sprintf("random %d", seed), data})
	}
	return seeds
}

// TestNeighbours runs the good connection next to each seed's neighbours.
func TestNeighbours(t *testing.T) {
	t.Parallel()
	var nodes [2]*fakenode.Node
	var alone [2]*goodRun
	for mode := range nodes {
		nodes[mode] = neighbourNode(t, byte(mode))
		alone[mode] = runAlone(t, nodes[mode])
		// Alone again, on another proxy: the reference holds still.
		if again := runAlone(t, nodes[mode]); fmt.Sprint(again) != fmt.Sprint(alone[mode]) {
			t.Fatalf("mode %d: two runs alone differ:\n%v\n%v", mode, again, alone[mode])
		}
	}
	for _, seed := range neighbourSeeds() {
		t.Run(seed.name, func(t *testing.T) {
			t.Parallel()
			mode, _ := decodeNeighbours(seed.data)
			neighboursOne(t, nodes[mode], alone[mode], seed.data)
		})
	}
}

// FuzzNeighbours runs the good connection next to neighbours the input
// makes (decodeNeighbours), each input on a proxy of its own.
func FuzzNeighbours(f *testing.F) {
	for _, seed := range neighbourSeeds() {
		f.Add(seed.data)
	}
	var nodes [2]*fakenode.Node
	for mode := range nodes {
		nodes[mode] = neighbourNode(f, byte(mode))
	}
	var mu sync.Mutex
	var alone [2]*goodRun
	f.Fuzz(func(t *testing.T, data []byte) {
		mode, _ := decodeNeighbours(data)
		mu.Lock()
		if alone[mode] == nil {
			alone[mode] = runAlone(t, nodes[mode])
		}
		ref := alone[mode]
		mu.Unlock()
		neighboursOne(t, nodes[mode], ref, data)
	})
}
