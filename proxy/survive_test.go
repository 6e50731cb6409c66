package proxy

import (
	"bufio"
	"bytes"
	"crypto/md5"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
)

// stubNode is a fake upstream node that speaks just enough of the protocol
// for the proxy, and keeps little per connection so that memory measured
// around it is mostly the proxy's: SUPPORTED for OPTIONS, READY for
// STARTUP (then v5 segments, plain or LZ4, after a v5 one), a RESULT
// Prepared for PREPARE, a void RESULT for every other
// request, except that a QUERY or PREPARE whose text contains "refuse" is
// answered Invalid, "USE ks" is answered Set_keyspace, and a QUERY whose text contains "hold" is held
// unanswered until release, or for ever.
type stubNode struct {
	ln net.Listener

	mu    sync.Mutex
	conns map[*stubConn]struct{}
	held  []heldRequest
	got   int // held requests received so far
	gotCh chan struct{}
	wg    sync.WaitGroup
	// statements are the texts of the QUERY and PREPARE requests received,
	// when record is set.
	statements []string
	record     bool
	// scylla makes the node advertise ScyllaDB's rate-limit error.
	scylla bool
}

type stubConn struct {
	c  net.Conn
	mu sync.Mutex // serializes writes: answers and released requests
	// segs frames answers in v5 segments once a v5 STARTUP is answered.
	// Guarded by mu.
	segs *frame.SegmentWriter
	// prepared is the body of the RESULT Prepared answering a PREPARE
	// (protocol v4, no variables or columns), with the statement's id the
	// MD5 of its text, set by serve before answering.
	prepared []byte
}

type heldRequest struct {
	c *stubConn
	h frame.Header
}

func startStubNode(t testing.TB, addr string) *stubNode {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("stub node %s: %v", addr, err)
	}
	n := &stubNode{ln: ln, conns: map[*stubConn]struct{}{}, gotCh: make(chan struct{}, 1)}
	n.wg.Add(1)
	go n.accept()
	t.Cleanup(n.close)
	return n
}

func (n *stubNode) accept() {
	defer n.wg.Done()
	for {
		c, err := n.ln.Accept()
		if err != nil {
			return
		}
		sc := &stubConn{c: c}
		n.mu.Lock()
		n.conns[sc] = struct{}{}
		n.mu.Unlock()
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.serve(sc)
			c.Close()
			n.mu.Lock()
			delete(n.conns, sc)
			n.mu.Unlock()
		}()
	}
}

func (n *stubNode) serve(c *stubConn) {
	r := frame.NewReader(bufio.NewReaderSize(c.c, 512), 4<<20)
	for {
		f, h, err := r.Next()
		if err != nil {
			return
		}
		n.mu.Lock()
		record, scylla := n.record, n.scylla
		n.mu.Unlock()
		if record && (h.Opcode == frame.OpQuery || h.Opcode == frame.OpPrepare) {
			q, _ := frame.QueryString(f[frame.HeaderSize:])
			n.mu.Lock()
			n.statements = append(n.statements, string(q))
			n.mu.Unlock()
		}
		if h.Opcode == frame.OpQuery || h.Opcode == frame.OpPrepare {
			q, _ := frame.QueryString(f[frame.HeaderSize:])
			if bytes.Contains(q, []byte("refuse")) {
				c.reply(h, frame.OpError, frame.AppendError(nil, h.Version, h.Stream, frame.ErrCodeInvalid, "stub: refused")[frame.HeaderSize:])
				continue
			}
			if ks, ok := bytes.CutPrefix(q, []byte("USE ")); ok && h.Opcode == frame.OpQuery {
				body := binary.BigEndian.AppendUint32(nil, frame.ResultKindSetKeyspace)
				body = binary.BigEndian.AppendUint16(body, uint16(len(ks)))
				c.reply(h, frame.OpResult, append(body, ks...))
				continue
			}
		}
		if h.Opcode == frame.OpPrepare {
			q, _ := frame.QueryString(f[frame.HeaderSize:])
			id := md5.Sum(q)
			c.prepared = append(binary.BigEndian.AppendUint32(c.prepared[:0], frame.ResultKindPrepared), 0, 16)
			c.prepared = append(c.prepared, id[:]...)
			c.prepared = append(c.prepared, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0) // no flags, columns or key
			c.prepared = append(c.prepared, 0, 0, 0, 4, 0, 0, 0, 0)             // result: no metadata
		}
		if h.Opcode == frame.OpOptions && scylla {
			c.supported(h, map[string]string{"SCYLLA_RATE_LIMIT_ERROR": "ERROR_CODE=61440"})
			continue
		}
		if h.Opcode == frame.OpQuery {
			if q, _ := frame.QueryString(f[frame.HeaderSize:]); bytes.Contains(q, []byte("badrows")) {
				c.badRows(h)
				continue
			} else if bytes.Contains(q, []byte("bigresult")) {
				c.bigResult(h)
				continue
			}
		}
		if h.Opcode == frame.OpQuery {
			if q, _ := frame.QueryString(f[frame.HeaderSize:]); bytes.Contains(q, []byte("hold")) {
				n.mu.Lock()
				n.held = append(n.held, heldRequest{c, h})
				n.got++
				n.mu.Unlock()
				select {
				case n.gotCh <- struct{}{}:
				default:
				}
				continue
			}
		}
		c.answer(h)
		if h.Opcode == frame.OpStartup && h.Version >= 5 {
			// READY was the last plain frame.
			comp, _, _ := frame.StartupOption(f[frame.HeaderSize:], "COMPRESSION")
			lz4 := strings.EqualFold(string(comp), "lz4")
			r.UseSegments(lz4)
			c.mu.Lock()
			c.segs = frame.NewSegmentWriter(lz4)
			c.mu.Unlock()
		}
	}
}

// answer writes the stub's answer to a request with header h.
func (c *stubConn) answer(h frame.Header) {
	switch h.Opcode {
	case frame.OpOptions:
		c.reply(h, frame.OpSupported, []byte{0, 0})
	case frame.OpStartup:
		c.reply(h, frame.OpReady, nil)
	case frame.OpPrepare:
		c.reply(h, frame.OpResult, c.prepared)
	default:
		c.reply(h, frame.OpResult, []byte{0, 0, 0, 1}) // Void
	}
}

// bigResult answers with a RESULT of about 100 KiB: Void, padded.
func (c *stubConn) bigResult(h frame.Header) {
	body := make([]byte, 100<<10)
	body[3] = 1
	c.reply(h, frame.OpResult, body)
}

// badRows answers with a RESULT that says Rows and then breaks off.
func (c *stubConn) badRows(h frame.Header) {
	c.reply(h, frame.OpResult, []byte{0, 0, 0, 2, 0, 0})
}

// supported answers OPTIONS with opts, one value each.
func (c *stubConn) supported(h frame.Header, opts map[string]string) {
	body := binary.BigEndian.AppendUint16(nil, uint16(len(opts)))
	for k, v := range opts {
		body = binary.BigEndian.AppendUint16(body, uint16(len(k)))
		body = append(body, k...)
		body = binary.BigEndian.AppendUint16(body, 1)
		body = binary.BigEndian.AppendUint16(body, uint16(len(v)))
		body = append(body, v...)
	}
	c.reply(h, frame.OpSupported, body)
}

// reply writes a response frame to the request with header h.
func (c *stubConn) reply(h frame.Header, op frame.Opcode, body []byte) {
	out := frame.AppendHeader(nil, frame.Header{Version: h.Version, Response: true, Stream: h.Stream, Opcode: op, Length: len(body)})
	out = append(out, body...)
	c.mu.Lock()
	if c.segs != nil {
		out = c.segs.AppendFrames(nil, out)
	}
	c.c.Write(out)
	c.mu.Unlock()
}

// waitHeld waits until the node has received n held requests in all.
func (n *stubNode) waitHeld(t *testing.T, want int) {
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
		case <-n.gotCh:
		case <-deadline:
			t.Fatalf("the node received %d held requests, want %d", got, want)
		}
	}
}

// heldNow returns how many requests the node holds unanswered.
func (n *stubNode) heldNow() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.held)
}

// release answers up to k of the held requests, oldest first.
func (n *stubNode) release(k int) {
	n.mu.Lock()
	k = min(k, len(n.held))
	out := append([]heldRequest(nil), n.held[:k]...)
	n.held = n.held[k:]
	n.mu.Unlock()
	for _, r := range out {
		r.c.answer(r.h)
	}
}

func (n *stubNode) close() {
	n.ln.Close()
	n.mu.Lock()
	for c := range n.conns {
		c.c.Close()
	}
	n.mu.Unlock()
	n.wg.Wait()
}

// stubQuery is a v4 QUERY frame for text on stream, consistency ONE and no
// values.
func stubQuery(stream int16, text string) []byte {
	body := binary.BigEndian.AppendUint32(nil, uint32(len(text)))
	body = append(body, text...)
	body = append(body, 0, 1, 0) // consistency ONE, no flags
	f := frame.AppendHeader(nil, frame.Header{Version: 4, Stream: stream, Opcode: frame.OpQuery, Length: len(body)})
	return append(f, body...)
}

// idleConn opens a connection to addr and completes STARTUP in protocol
// version v, asking for LZ4 when lz4 is set, reading the answer into a small
// array, so that the client's side costs little. On v5 the connection then
// carries segments, of which it sends none.
func idleConn(t *testing.T, addr string, v uint8, lz4 bool) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte{0, 0}
	if lz4 {
		body = binary.BigEndian.AppendUint16(nil, 1)
		body = binary.BigEndian.AppendUint16(body, uint16(len("COMPRESSION")))
		body = append(body, "COMPRESSION"...)
		body = binary.BigEndian.AppendUint16(body, uint16(len("lz4")))
		body = append(body, "lz4"...)
	}
	startup := frame.AppendHeader(nil, frame.Header{Version: v, Opcode: frame.OpStartup, Length: len(body)})
	startup = append(startup, body...)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(startup); err != nil {
		t.Fatal(err)
	}
	var ready [frame.HeaderSize]byte
	if _, err := io.ReadFull(c, ready[:]); err != nil || frame.Opcode(ready[4]) != frame.OpReady {
		t.Fatalf("STARTUP through %s: % x %v", addr, ready, err)
	}
	c.SetDeadline(time.Time{})
	return c
}

// memUse is the heap and goroutine stacks in use after garbage collection.
// Collecting three times empties sync.Pools, whose contents survive one
// collection.
func memUse() (heap, stack uint64) {
	var m runtime.MemStats
	for range 3 {
		runtime.GC()
	}
	runtime.ReadMemStats(&m)
	return m.HeapAlloc, m.StackInuse
}

// idleCost opens n connections to addr, each idle after STARTUP in
// protocol version v (with LZ4 if lz4 is set), and returns what they added
// to the heap and to goroutine stacks, per connection, and to the heap
// once p's watchdog has ticked twice (tickSessions).
func idleCost(t *testing.T, p *Proxy, addr string, n int, v uint8, lz4 bool) (heap, ticked, stack float64) {
	t.Helper()
	settle(t)
	heap0, stack0 := memUse()
	conns := make([]net.Conn, n)
	for i := range conns {
		conns[i] = idleConn(t, addr, v, lz4)
	}
	// The READY has been written to the client before the proxy's response
	// path goes back to waiting: let every session get there.
	time.Sleep(100 * time.Millisecond)
	heap1, stack1 := memUse()
	tickSessions(p)
	tickSessions(p)
	heap2, _ := memUse()
	for _, c := range conns {
		c.Close()
	}
	per := func(a, b uint64) float64 { return (float64(b) - float64(a)) / float64(n) }
	return per(heap0, heap1), per(heap0, heap2), per(stack0, stack1)
}

// tickSessions does for every session of p what the watchdog does on each
// tick (every 10 s by default): an idle session gives back what it keeps
// only between bursts.
func tickSessions(p *Proxy) {
	p.mu.Lock()
	for s := range p.sessions {
		s.tick(false, 0, nil)
	}
	p.mu.Unlock()
}

// settle waits for goroutines of connections closed before to end, so that
// a measurement starts from what remains.
func settle(t *testing.T) {
	t.Helper()
	prev := -1
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		n := runtime.NumGoroutine()
		if n == prev {
			return
		}
		prev = n
	}
}

// An idle connection through the proxy, after STARTUP, costs the proxy
// little heap, in every protocol version and compression: read buffers are
// taken only while bytes arrive, a v5 connection holds no LZ4 state of its
// own, and once the watchdog has ticked the stream table is gone too. The
// figures are logged (go test -run IdleConnectionMemory -v); the bound
// catches a return of per-connection read buffers, or of an LZ4
// compressor in each v5 segment writer (a v5 connection cost 300 KB, LZ4
// or not).
func TestIdleConnectionMemory(t *testing.T) {
	stub := startStubNode(t, "127.0.0.1:0")
	p, addr := startProxy(t, func(c *config.Config) {
		c.Listen, c.Upstreams = "127.0.0.1:0", []string{stub.ln.Addr().String()}
	})
	const n = 200
	for _, tc := range []struct {
		name    string
		version uint8
		lz4     bool
	}{
		{"v4", 4, false},
		{"v5", 5, false},
		{"v5-lz4", 5, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			directHeap, directTicked, directStack := idleCost(t, p, stub.ln.Addr().String(), n, tc.version, tc.lz4)
			proxiedHeap, proxiedTicked, proxiedStack := idleCost(t, p, addr, n, tc.version, tc.lz4)
			heap, ticked, stack := proxiedHeap-directHeap, proxiedTicked-directTicked, proxiedStack-directStack
			t.Logf("%s, per idle connection: proxy heap %.0f B, %.0f B after a watchdog tick, proxy goroutine stacks %.0f B (direct to the node: heap %.0f B, stacks %.0f B; through the proxy: heap %.0f B, stacks %.0f B)",
				tc.name, heap, ticked, stack, directHeap, directStack, proxiedHeap, proxiedStack)
			// With two 16 KiB read buffers held per connection it was 45 KB.
			if heap > 24<<10 {
				t.Errorf("an idle %s connection costs the proxy %.0f B of heap, want under 24 KiB", tc.name, heap)
			}
			// The stream table STARTUP used is 3 KiB.
			if heap-ticked < 2<<10 {
				t.Errorf("a watchdog tick took %.0f B from an idle %s connection, want its stream table", heap-ticked, tc.name)
			}
		})
	}
}

// A connection that sent one large request and went idle does not keep
// that request alive: neither the frame reader nor the classifier, which
// parsed it, holds on to it.
func TestIdleAfterLargeRequest(t *testing.T) {
	stub := startStubNode(t, "127.0.0.1:0")
	_, addr := startProxy(t, func(c *config.Config) {
		c.Listen, c.Upstreams = "127.0.0.1:0", []string{stub.ln.Addr().String()}
	})
	const n, size = 20, 512 << 10
	// A statement the classifier recognizes, with a literal it keeps a
	// reference to while parsing.
	large := stubQuery(1, "SELECT * FROM ks.t WHERE k = '"+strings.Repeat("x", size)+"'")
	clients := make([]*stubClient, n)
	for i := range clients {
		clients[i] = dialStub(t, addr)
	}
	settle(t)
	before, _ := memUse()
	for _, c := range clients {
		c.write(large)
		if _, code, msg, err := c.next(); err != nil || code != 0 {
			t.Fatalf("large query: %d %q %v", code, msg, err)
		}
	}
	time.Sleep(100 * time.Millisecond) // every session back to waiting
	after, _ := memUse()
	per := (float64(after) - float64(before)) / n
	t.Logf("per connection idle after a %d KiB request: %.0f B more heap", size>>10, per)
	if per > 64<<10 {
		t.Errorf("a connection idle after a %d KiB request holds %.0f B more heap, want under 64 KiB", size>>10, per)
	}
	for _, c := range clients {
		c.c.Close()
	}
}

// stubClient is a raw connection to the proxy after STARTUP.
type stubClient struct {
	t *testing.T
	c net.Conn
	r *frame.Reader
}

func dialStub(t *testing.T, addr string) *stubClient {
	t.Helper()
	return stubOn(t, rawConn(t, addr))
}

// stubOn is dialStub on a connection the test has opened: STARTUP on c.
func stubOn(t *testing.T, c net.Conn) *stubClient {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	sc := &stubClient{t: t, c: c, r: frame.NewReader(bufio.NewReader(c), 1<<20)}
	startup := frame.AppendHeader(nil, frame.Header{Version: 4, Opcode: frame.OpStartup, Length: 2})
	sc.write(append(startup, 0, 0))
	if _, h, err := sc.r.Next(); err != nil || h.Opcode != frame.OpReady {
		t.Fatalf("STARTUP: %v %v", h.Opcode, err)
	}
	return sc
}

func (c *stubClient) write(f []byte) {
	c.t.Helper()
	if _, err := c.c.Write(f); err != nil {
		c.t.Fatal(err)
	}
}

// next reads the next answer: its stream, and for an ERROR its code and
// message (code 0 for a RESULT).
func (c *stubClient) next() (int16, int32, string, error) {
	f, h, err := c.r.Next()
	if err != nil {
		return 0, 0, "", err
	}
	if h.Opcode == frame.OpResult {
		return h.Stream, 0, "", nil
	}
	code, msg := errorOf(c.t, h, f[frame.HeaderSize:])
	return h.Stream, code, msg, nil
}

// An upstream that takes requests and never answers: after upstream_timeout
// each waiting request is answered with a server error on its stream, the
// client connection is closed, and other sessions go on, including idle
// ones and one that waits longer than the timeout before its request.
func TestUpstreamTimeout(t *testing.T) {
	const timeout = 200 * time.Millisecond
	node := startStubNode(t, "127.0.0.1:0")
	p, addr := startProxy(t, func(c *config.Config) {
		c.Listen, c.Upstreams = "127.0.0.1:0", []string{node.ln.Addr().String()}
		c.UpstreamTimeout = config.Duration(timeout)
	})
	idle := dialStub(t, addr)
	busy := dialStub(t, addr)
	stalled := dialStub(t, addr)

	start := time.Now()
	stalled.write(append(stubQuery(5, "SELECT hold FROM ks.t"), stubQuery(6, "SELECT hold FROM ks.t")...))
	// Meanwhile another session's requests are answered, for longer than
	// the timeout.
	for i := range 20 {
		busy.write(stubQuery(int16(i), "SELECT v FROM ks.t"))
		if stream, code, msg, err := busy.next(); err != nil || code != 0 || stream != int16(i) {
			t.Fatalf("busy session, request %d: stream %d %#x %q %v", i, stream, code, msg, err)
		}
		time.Sleep(timeout / 10)
	}
	answered := map[int16]bool{}
	for {
		stream, code, msg, err := stalled.next()
		if err != nil {
			break // the connection is closed after the answers
		}
		if code != frame.ErrCodeServer || !strings.Contains(msg, "upstream_timeout") || !strings.Contains(msg, "may or may not have been applied") {
			t.Errorf("stream %d: %#x %q", stream, code, msg)
		}
		answered[stream] = true
	}
	took := time.Since(start)
	if !answered[5] || !answered[6] || len(answered) != 2 {
		t.Errorf("answered %v, want streams 5 and 6 with a server error", answered)
	}
	if took < timeout || took > timeout+timeout/4+2*time.Second {
		t.Errorf("answered after %v; upstream_timeout is %v", took, timeout)
	}
	if n := testutil.ToFloat64(p.metrics.protocolErrors.WithLabelValues("upstream_stalled")); n != 2 {
		t.Errorf(`reason="upstream_stalled" counted %v times, want 2`, n)
	}
	if n := testutil.ToFloat64(p.metrics.protocolErrors.WithLabelValues("upstream_lost")); n != 0 {
		t.Errorf(`reason="upstream_lost" counted %v times, want 0`, n)
	}

	// The idle session, silent for longer than the timeout, is still
	// served, and its silence before a request does not count against the
	// upstream: a held request is answered after a whole timeout.
	idle.write(stubQuery(1, "SELECT v FROM ks.t"))
	if stream, code, msg, err := idle.next(); err != nil || code != 0 || stream != 1 {
		t.Fatalf("idle session: stream %d %#x %q %v", stream, code, msg, err)
	}
	start = time.Now()
	idle.write(stubQuery(2, "SELECT hold FROM ks.t"))
	if stream, code, _, err := idle.next(); err != nil || code != frame.ErrCodeServer || stream != 2 {
		t.Fatalf("idle session's held request: stream %d %#x %v", stream, code, err)
	}
	if took := time.Since(start); took < timeout {
		t.Errorf("held request answered after %v, before upstream_timeout %v", took, timeout)
	}
	if node.heldNow() != 3 {
		t.Errorf("the node holds %d requests, want 3", node.heldNow())
	}
}

// At max_in_flight over all connections, the proxy forwards nothing more
// and reads nothing more from any client until a request is answered;
// clients held back resume when room frees, and every request is answered
// once, on its own stream.
func TestMaxInFlight(t *testing.T) {
	tests := []struct {
		name                 string
		max, perConn         int
		clients, perClient   int
		port                 string
		wantFirst, releaseBy int // requests the node gets before any answer; answered at a time
	}{
		{name: "one connection", max: 3, clients: 1, perClient: 7, port: "19081", wantFirst: 3, releaseBy: 1},
		{name: "over connections", max: 4, clients: 3, perClient: 3, port: "19082", wantFirst: 4, releaseBy: 2},
		{name: "per connection bound first", max: 5, perConn: 2, clients: 2, perClient: 4, port: "19083", wantFirst: 4, releaseBy: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := startStubNode(t, "127.0.0.9:"+tt.port)
			p, _ := startProxy(t, func(c *config.Config) {
				c.Listen, c.Upstreams = "127.0.0.10:"+tt.port, []string{"127.0.0.9:" + tt.port}
				c.MaxInFlight, c.MaxInFlightPerConnection = tt.max, tt.perConn
			})
			// STARTUP is a request in flight too: every client starts
			// before any fills the bound.
			clients := make([]*stubClient, tt.clients)
			for i := range clients {
				clients[i] = dialStub(t, "127.0.0.10:"+tt.port)
			}
			for i := range clients {
				for j := range tt.perClient {
					clients[i].write(stubQuery(int16(100+j), "SELECT hold FROM ks.t"))
				}
			}
			total := tt.clients * tt.perClient
			node.waitHeld(t, tt.wantFirst)
			// Nothing more reaches the node while nothing is answered.
			time.Sleep(100 * time.Millisecond)
			if got := node.heldNow(); got != tt.wantFirst {
				t.Fatalf("the node got %d requests before any answer, want %d", got, tt.wantFirst)
			}
			if n := p.inflight.Taken(); n != int64(tt.wantFirst) {
				t.Errorf("%d requests in flight, want %d", n, tt.wantFirst)
			}
			if tt.wantFirst == tt.max && testutil.ToFloat64(p.metrics.proxyInFlightWaits) < 1 {
				t.Error("no wait counted at max_in_flight")
			}
			// Answers free room, and the clients held back go on.
			for released := 0; released < total; released += tt.releaseBy {
				node.release(tt.releaseBy)
				node.waitHeld(t, min(total, released+tt.releaseBy+tt.wantFirst))
			}
			node.release(total)
			for i, c := range clients {
				seen := map[int16]bool{}
				for range tt.perClient {
					stream, code, msg, err := c.next()
					if err != nil || code != 0 || seen[stream] {
						t.Fatalf("client %d: stream %d %#x %q %v (seen before: %v)", i, stream, code, msg, err, seen[stream])
					}
					seen[stream] = true
				}
			}
			if n := p.inflight.Taken(); n != 0 {
				t.Errorf("%d requests in flight after all were answered", n)
			}
		})
	}
}

// A client that leaves with requests in flight gives their max_in_flight
// slots back when its session ends.
func TestMaxInFlightClientLeaves(t *testing.T) {
	node := startStubNode(t, "127.0.0.1:0")
	p, addr := startProxy(t, func(c *config.Config) {
		c.Listen, c.Upstreams = "127.0.0.1:0", []string{node.ln.Addr().String()}
		c.MaxInFlight = 3
	})
	c := dialStub(t, addr)
	c.write(append(stubQuery(1, "SELECT hold FROM ks.t"), stubQuery(2, "SELECT hold FROM ks.t")...))
	node.waitHeld(t, 2)
	c.c.Close()
	// All three slots are free again: another client gets three requests
	// to the node.
	other := dialStub(t, addr)
	for i := range 3 {
		other.write(stubQuery(int16(i), "SELECT hold FROM ks.t"))
	}
	node.waitHeld(t, 5)
	node.release(5)
	for range 3 {
		if stream, code, msg, err := other.next(); err != nil || code != 0 {
			t.Fatalf("after the client left: stream %d %#x %q %v", stream, code, msg, err)
		}
	}
	if n := p.inflight.Taken(); n != 0 {
		t.Errorf("%d requests in flight, want 0", n)
	}
}

// max_frame_bytes_total: a large frame that would pass it waits, with its
// connection, until another connection's large frame is done with, and then
// goes through; so does the frame whose connection ends mid-frame.
func TestFrameBytesTotal(t *testing.T) {
	stub := startStubNode(t, "127.0.0.1:0")
	p, addr := startProxy(t, func(c *config.Config) {
		c.Listen, c.Upstreams = "127.0.0.1:0", []string{stub.ln.Addr().String()}
		c.MaxFrameBytes = 1 << 20
		c.MaxFrameBytesTotal = 300 << 10
		c.FrameTimeout = config.Duration(time.Second)
	})
	large := func(stream int16) []byte {
		return stubQuery(stream, "SELECT * FROM ks.t WHERE k = '"+strings.Repeat("x", 200<<10)+"'")
	}
	// quiet checks that c gets no answer for a while.
	quiet := func(c *stubClient, what string) {
		t.Helper()
		c.c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, _, _, err := c.next(); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s: answered (%v) while another connection's large frame held the budget", what, err)
		}
		c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	}
	answered := func(c *stubClient, want int16, what string) {
		t.Helper()
		if stream, code, msg, err := c.next(); err != nil || stream != want || code != 0 {
			t.Fatalf("%s: stream %d, %d %q, %v", what, stream, code, msg, err)
		}
	}
	for _, tt := range []struct {
		name   string
		finish func(a *stubClient, rest []byte) // what the first client does after stalling
	}{
		{"first frame completes", func(a *stubClient, rest []byte) {
			a.write(rest)
			answered(a, 1, "the first large frame")
		}},
		{"first client leaves mid-frame", func(a *stubClient, rest []byte) { a.c.Close() }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			waits := testutil.ToFloat64(p.metrics.frameWaits)
			a, b := dialStub(t, addr), dialStub(t, addr)
			defer a.c.Close()
			defer b.c.Close()
			// a sends half of a large frame: its reader holds 200 KiB.
			fa := large(1)
			a.write(fa[:len(fa)/2])
			waitUntil(t, "a's reader holding its frame", func() bool { return p.requestFrames.Taken() > 0 })
			// b's large frame would pass 300 KiB: it waits.
			b.write(large(2))
			quiet(b, "the second large frame")
			if n := testutil.ToFloat64(p.metrics.frameWaits) - waits; n != 1 {
				t.Errorf("%v waits counted, want 1", n)
			}
			tt.finish(a, fa[len(fa)/2:])
			answered(b, 2, "the second large frame, once the first was done with")
			// b's request path gives its frame back before it waits for
			// b again, which may be just after b has its answer.
			for deadline := time.Now().Add(2 * time.Second); p.requestFrames.Taken()+p.responseFrames.Taken() != 0 && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
			if n := p.requestFrames.Taken() + p.responseFrames.Taken(); n != 0 {
				t.Errorf("%d bytes of large frames held with both connections idle, want 0", n)
			}
		})
	}
}

// A large request whose answer is large too is answered although
// max_frame_bytes_total holds only one of them: the request gives its share
// back once forwarded, and answers have a bound of their own, so they never
// wait behind requests that wait for them.
func TestLargeRequestLargeAnswer(t *testing.T) {
	stub := startStubNode(t, "127.0.0.1:0")
	p, addr := startProxy(t, func(c *config.Config) {
		c.Listen, c.Upstreams = "127.0.0.1:0", []string{stub.ln.Addr().String()}
		c.MaxFrameBytes = 1 << 20
		c.MaxFrameBytesTotal = 128 << 10
		c.MaxInFlightPerConnection = 1
	})
	a := dialStub(t, addr)
	defer a.c.Close()
	for stream := range int16(3) {
		a.write(stubQuery(stream+1, "SELECT bigresult FROM ks.t WHERE k = '"+strings.Repeat("x", 100<<10)+"'"))
		a.c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if got, code, msg, err := a.next(); err != nil || got != stream+1 || code != 0 {
			t.Fatalf("large request %d: stream %d, %d %q, %v; frames held: %d of requests, %d of answers",
				stream+1, got, code, msg, err, p.requestFrames.Taken(), p.responseFrames.Taken())
		}
	}
}

// A pipelining client held back by back-pressure for longer than
// frame_timeout, with its next frame already sent, keeps its connection:
// each frame gets a frame_timeout of its own.
func TestFrameTimeoutAfterBackPressure(t *testing.T) {
	node := startStubNode(t, "127.0.0.1:0")
	_, addr := startProxy(t, func(c *config.Config) {
		c.Listen, c.Upstreams = "127.0.0.1:0", []string{node.ln.Addr().String()}
		c.MaxInFlightPerConnection = 1
		c.FrameTimeout = config.Duration(300 * time.Millisecond)
	})
	a := dialStub(t, addr)
	defer a.c.Close()
	q1 := stubQuery(1, "SELECT hold FROM ks.t WHERE k = '"+strings.Repeat("x", 2000)+"'")
	q2 := stubQuery(2, "SELECT v FROM ks.t WHERE k = '"+strings.Repeat("y", 2000)+"'")
	// q1 in two writes, so that the proxy reads its rest with a deadline
	// set, then half of q2, and its rest soon after.
	a.write(q1[:100])
	time.Sleep(20 * time.Millisecond)
	a.write(q1[100:])
	a.write(q2[:len(q2)/2])
	node.waitHeld(t, 1)
	time.Sleep(50 * time.Millisecond)
	a.write(q2[len(q2)/2:])
	// The proxy holds q2 (max_in_flight_per_connection) for twice
	// frame_timeout.
	time.Sleep(600 * time.Millisecond)
	node.release(1)
	for range 2 {
		if _, code, msg, err := a.next(); err != nil || code != 0 {
			t.Fatalf("a client that sent whole frames promptly: %d %q, %v", code, msg, err)
		}
	}
}

// A response path held back by a client that does not read is not the
// upstream falling silent: upstream_timeout does not fire while answers
// wait for the client, and every answer arrives once it reads.
func TestUpstreamTimeoutSlowClient(t *testing.T) {
	stub := startStubNode(t, "127.0.0.1:0")
	p, addr := startProxy(t, func(c *config.Config) {
		c.Listen, c.Upstreams = "127.0.0.1:0", []string{stub.ln.Addr().String()}
		c.UpstreamTimeout = config.Duration(200 * time.Millisecond)
		c.MaxBufferedBytes = 64 << 10
	})
	a := dialStub(t, addr)
	defer a.c.Close()
	// 200 answers of 100 KiB: far more than the sockets and the proxy's
	// queue hold while the client reads nothing.
	const n = 200
	for i := range int16(n) {
		a.write(stubQuery(i+1, "SELECT bigresult FROM ks.t"))
	}
	time.Sleep(time.Second) // five upstream_timeouts without reading
	a.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for i := range n {
		if _, code, msg, err := a.next(); err != nil || code != 0 {
			t.Fatalf("answer %d: %d %q, %v", i+1, code, msg, err)
		}
	}
	if got := testutil.ToFloat64(p.metrics.protocolErrors.WithLabelValues("upstream_stalled")); got != 0 {
		t.Errorf("upstream_stalled counted %v times for a client that read slowly", got)
	}
}
