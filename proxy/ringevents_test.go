package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pframe "github.com/datastax/go-cassandra-native-protocol/frame"
	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

// The cluster's events reach routing: a topology change or a keyspace's
// schema change has the ring read again, a table's does not, and a node's
// status says whether it is avoided. An upstream that cannot be reached is
// passed over for the next, the follower logs in as the schema reader
// does, and the node's answers to its heartbeat are no events.
func TestRingEventsFollowed(t *testing.T) {
	t.Parallel()
	node, err := fakenode.Start("127.0.0.1:0", fakenode.Options{Username: "schema", Password: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Close)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := closed.Addr().String()
	closed.Close()

	var stale atomic.Int32
	ups, downs := make(chan string, 4), make(chan string, 4)
	e := &ringEvents{
		addrs: []string{gone, node.Addr()}, username: "schema", password: "secret", timeout: time.Second,
		stale:     func() { stale.Add(1) },
		up:        func(n string) { ups <- n },
		down:      func(n string) { downs <- n },
		heartbeat: 5 * time.Millisecond,
		retry:     10 * time.Millisecond,
		log:       testLogger(),
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.run(ctx)
	}()
	// Registered: the ring is read once for what was missed.
	waitUntil(t, "the events followed", func() bool { return stale.Load() == 1 })

	addr := &primitive.Inet{Addr: net.ParseIP("10.0.0.9").To4(), Port: 9042}
	for _, tc := range []struct {
		ev    message.Message
		stale int32
		up    string
		down  string
	}{
		{&message.TopologyChangeEvent{ChangeType: primitive.TopologyChangeTypeNewNode, Address: addr}, 2, "", ""},
		{&message.StatusChangeEvent{ChangeType: primitive.StatusChangeTypeDown, Address: addr}, 2, "", "10.0.0.9:9042"},
		{&message.StatusChangeEvent{ChangeType: primitive.StatusChangeTypeUp, Address: addr}, 2, "10.0.0.9:9042", ""},
		{&message.SchemaChangeEvent{ChangeType: primitive.SchemaChangeTypeUpdated, Target: primitive.SchemaChangeTargetTable, Keyspace: "bench", Object: "kv"}, 2, "", ""},
		{&message.SchemaChangeEvent{ChangeType: primitive.SchemaChangeTypeUpdated, Target: primitive.SchemaChangeTargetKeyspace, Keyspace: "bench"}, 3, "", ""},
		{&message.TopologyChangeEvent{ChangeType: primitive.TopologyChangeTypeRemovedNode, Address: addr}, 4, "", ""},
	} {
		node.PushEvent(tc.ev)
		switch {
		case tc.up != "":
			if got := <-ups; got != tc.up {
				t.Errorf("%v: up %s, want %s", tc.ev, got, tc.up)
			}
		case tc.down != "":
			if got := <-downs; got != tc.down {
				t.Errorf("%v: down %s, want %s", tc.ev, got, tc.down)
			}
		default:
			waitUntil(t, "the ring asked for", func() bool { return stale.Load() >= tc.stale })
		}
		if got := stale.Load(); got != tc.stale {
			t.Errorf("after %v: the ring asked for %d times, want %d", tc.ev, got, tc.stale)
		}
	}
	cancel()
	<-done
}

// notFollowing is the message of a connection to an upstream that ended or
// could not follow the events: a warning once an outage, debug after.
const notFollowing = "not following the cluster's events"

// count returns how many lines of level, or of any level if "", hold msg.
func (l *logLines) count(level, msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for line := range bytes.Lines(l.b.Bytes()) {
		var m map[string]any
		if json.Unmarshal(line, &m) == nil && (level == "" || m["level"] == level) && strings.Contains(fmt.Sprint(m["message"]), msg) {
			n++
		}
	}
	return n
}

// runEvents runs e until stop, and returns how many goroutines it has
// running: its own and those it started, told apart from the rest of the
// process's by a profiler label they inherit.
func runEvents(t *testing.T, e *ringEvents) (goroutines func() int, stop func()) {
	t.Helper()
	label := fmt.Sprintf("%s %p", t.Name(), e)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go pprof.Do(ctx, pprof.Labels("events", label), func(ctx context.Context) {
		defer close(done)
		e.run(ctx)
	})
	goroutines = func() int {
		var b bytes.Buffer
		if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
			t.Fatal(err)
		}
		// Groups of goroutines, each "N @ pcs" and then its labels, if any.
		n, group := 0, 0
		for line := range strings.Lines(b.String()) {
			if c, _, ok := strings.Cut(line, " @ "); ok {
				group, _ = strconv.Atoi(c)
			} else if strings.HasPrefix(line, "# labels: ") && strings.Contains(line, strconv.Quote(label)) {
				n += group
			}
		}
		return n
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return goroutines, stop
}

// newNodeAt starts a fake node on addr again, once the port is free.
func newNodeAt(t *testing.T, addr string) *fakenode.Node {
	t.Helper()
	var node *fakenode.Node
	waitUntil(t, "the node listening again on "+addr, func() bool {
		var err error
		node, err = fakenode.Start(addr, fakenode.Options{})
		return err == nil
	})
	return node
}

// The upstream followed goes away and comes back, twenty times: each time
// the events are followed again once it is back, the ring read again for
// what was missed, and a topology change after it has the ring read again.
// While it is gone it is dialed once a retry, not in a loop, and the outage
// is warned of once; the connections that ended leave no goroutine behind.
func TestRingEventsNodeReturns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// restart closes the node, its listener with its connections, and
		// starts it again; otherwise the node closes the connection and
		// goes on listening.
		restart bool
	}{
		{"the node restarts", true},
		{"the node closes the connection", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			node := newNodeAt(t, "127.0.0.1:0")
			t.Cleanup(func() { node.Close() })
			addr := node.Addr()
			var stale atomic.Int32
			var log logLines
			e := &ringEvents{
				addrs: []string{addr}, timeout: time.Second,
				stale:     func() { stale.Add(1) },
				up:        func(string) { t.Error("a node said up") },
				down:      func(string) { t.Error("a node said down") },
				heartbeat: 20 * time.Millisecond,
				retry:     10 * time.Millisecond,
				log:       zerolog.New(&log).Level(zerolog.DebugLevel),
			}
			goroutines, stop := runEvents(t, e)
			topology := &message.TopologyChangeEvent{ChangeType: primitive.TopologyChangeTypeNewNode,
				Address: &primitive.Inet{Addr: net.ParseIP("10.0.0.9").To4(), Port: 9042}}
			const cycles = 20
			want := int32(1)
			for i := range cycles {
				waitUntil(t, "the events followed", func() bool { return stale.Load() == want })
				// Its loop and the heartbeat's.
				waitUntil(t, "two goroutines following", func() bool { return goroutines() == 2 })
				node.PushEvent(topology)
				want++
				waitUntil(t, "the ring asked for", func() bool { return stale.Load() == want })

				start := time.Now()
				failed := log.count("", notFollowing)
				if !tc.restart {
					node.DropShard(0)
					waitUntil(t, "the connection's end noticed", func() bool { return log.count("warn", notFollowing) == i+1 })
				} else {
					node.Close()
					// Three dials refused after the loss, each a retry
					// after the last: the count of dials, read first,
					// bounds the time they took.
					waitUntil(t, "dials refused", func() bool { return log.count("", notFollowing) >= failed+4 })
					dials := log.count("", notFollowing) - failed - 1 // the loss's
					if took := time.Since(start); time.Duration(dials)*e.retry > took {
						t.Fatalf("%d dials in %v, more than one a retry (%v)", dials, took, e.retry)
					}
					node = newNodeAt(t, addr)
				}
				want++ // registered again
			}
			waitUntil(t, "the events followed", func() bool { return stale.Load() == want })
			waitUntil(t, "two goroutines following", func() bool { return goroutines() == 2 })
			if n := log.count("warn", notFollowing); n != cycles {
				t.Errorf("%d warnings of not following, want one an outage, %d", n, cycles)
			}
			if n := log.count("info", "following the cluster's events again"); n != cycles {
				t.Errorf("%d lines of following again, want one an outage, %d", n, cycles)
			}
			stop()
			waitUntil(t, "no goroutine following", func() bool { return goroutines() == 0 })
		})
	}
}

// scriptedNode is an upstream that answers each request as its test says,
// or not at all, and lets the test write to its connections.
type scriptedNode struct {
	ln net.Listener
	// answer returns the answer to a request of op, nil for none.
	answer func(op frame.Opcode) message.Message
	conns  chan *scriptedConn // each connection accepted
}

// scriptedConn is a connection a scriptedNode accepted.
type scriptedConn struct {
	nc       net.Conn
	mu       sync.Mutex // guards writes
	accepted time.Time
	asked    chan frame.Opcode // each request's opcode
	closed   chan struct{}     // closed once the peer closed it
}

// startScripted starts a scriptedNode until the test ends.
func startScripted(t *testing.T, answer func(op frame.Opcode) message.Message) *scriptedNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &scriptedNode{ln: ln, answer: answer, conns: make(chan *scriptedConn, 16)}
	acceptEach(t, ln, func(_ *connTracker, nc net.Conn) {
		c := &scriptedConn{nc: nc, accepted: time.Now(), asked: make(chan frame.Opcode, 16), closed: make(chan struct{})}
		select {
		case n.conns <- c:
		default:
			t.Error("too many connections")
			nc.Close()
			return
		}
		n.serve(c)
	})
	return n
}

// connTracker is what acceptEach keeps: the connections to close, and the
// goroutines to wait for, once the test ends.
type connTracker struct {
	wg  sync.WaitGroup
	mu  sync.Mutex
	all []net.Conn
}

// acceptEach accepts connections on ln until the test ends, and serves each
// with serve on a goroutine of its own. Then it closes ln and every
// connection accepted or tracked, and waits for the goroutines.
func acceptEach(t *testing.T, ln net.Listener, serve func(tr *connTracker, nc net.Conn)) {
	tr := &connTracker{}
	t.Cleanup(func() {
		ln.Close()
		tr.mu.Lock()
		for _, c := range tr.all {
			c.Close()
		}
		tr.mu.Unlock()
		tr.wg.Wait()
	})
	tr.wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			tr.track(nc)
			tr.wg.Go(func() { serve(tr, nc) })
		}
	})
}

// track has c closed when the test ends.
func (tr *connTracker) track(c net.Conn) {
	tr.mu.Lock()
	tr.all = append(tr.all, c)
	tr.mu.Unlock()
}

func (n *scriptedNode) addr() string { return n.ln.Addr().String() }

func (n *scriptedNode) serve(c *scriptedConn) {
	defer close(c.closed)
	defer c.nc.Close()
	r := frame.NewReader(bufio.NewReader(c.nc), 1<<20)
	for {
		_, h, err := r.Next()
		if err != nil {
			return
		}
		select {
		case c.asked <- h.Opcode:
		default:
		}
		if a := n.answer(h.Opcode); a != nil {
			var b bytes.Buffer
			if err := pframe.NewCodec().EncodeFrame(pframe.NewFrame(primitive.ProtocolVersion(h.Version), h.Stream, a), &b); err != nil {
				panic(err)
			}
			c.write(b.Bytes())
		}
	}
}

// write writes b to the connection, ignoring whether it could.
func (c *scriptedConn) write(b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nc.Write(b)
}

// accepted returns the next connection n accepts, failing the test after
// 5 s.
func (n *scriptedNode) accepted(t *testing.T) *scriptedConn {
	t.Helper()
	select {
	case c := <-n.conns:
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("timed out waiting for a connection")
		return nil
	}
}

// requests returns the opcodes of the requests c received so far.
func (c *scriptedConn) requests() []frame.Opcode {
	var ops []frame.Opcode
	for {
		select {
		case op := <-c.asked:
			ops = append(ops, op)
		default:
			return ops
		}
	}
}

// An upstream that takes the connection and then does not answer, at
// STARTUP, at the login or at REGISTER, is given up on within the
// connection's timeout, its connection closed, and the next upstream
// followed.
func TestRingEventsNodeHangs(t *testing.T) {
	t.Parallel()
	authenticate := &message.Authenticate{Authenticator: "org.apache.cassandra.auth.PasswordAuthenticator"}
	for _, tc := range []struct {
		name   string
		answer func(op frame.Opcode) message.Message
		asked  []frame.Opcode
	}{
		{"no answer to STARTUP", func(frame.Opcode) message.Message { return nil }, []frame.Opcode{frame.OpStartup}},
		{"a login asked for, then no answer", func(op frame.Opcode) message.Message {
			if op == frame.OpStartup {
				return authenticate
			}
			return nil
		}, []frame.Opcode{frame.OpStartup, frame.OpAuthResponse}},
		{"no answer to REGISTER", func(op frame.Opcode) message.Message {
			if op == frame.OpStartup {
				return &message.Ready{}
			}
			return nil
		}, []frame.Opcode{frame.OpStartup, frame.OpRegister}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hung := startScripted(t, tc.answer)
			node := fakeNode(t, "127.0.0.1:0", fakenode.Options{Username: "schema", Password: "secret"})
			var stale atomic.Int32
			var log logLines
			e := &ringEvents{
				addrs: []string{hung.addr(), node.Addr()}, username: "schema", password: "secret",
				timeout:   200 * time.Millisecond,
				stale:     func() { stale.Add(1) },
				up:        func(string) {},
				down:      func(string) {},
				heartbeat: time.Minute,
				retry:     10 * time.Millisecond,
				log:       zerolog.New(&log).Level(zerolog.DebugLevel),
			}
			runEvents(t, e)
			c := hung.accepted(t)
			waitUntil(t, "the next upstream followed", func() bool { return stale.Load() == 1 })
			select {
			case <-c.closed:
			default:
				t.Fatal("the connection to the upstream that does not answer is left open")
			}
			if took := time.Since(c.accepted); took < e.timeout {
				t.Errorf("given up after %v, before the timeout, %v", took, e.timeout)
			}
			if got := c.requests(); !slices.Equal(got, tc.asked) {
				t.Errorf("asked %v, want %v", got, tc.asked)
			}
			if n := log.count("warn", notFollowing); n != 1 {
				t.Errorf("%d warnings of not following, want 1", n)
			}
		})
	}
}

// eventFrame returns an EVENT frame, v4, of the body made of parts.
func eventFrame(parts ...[]byte) []byte {
	f := frame.AppendHeader(nil, frame.Header{Version: eventsVersion, Response: true, Stream: -1, Opcode: frame.OpEvent})
	for _, p := range parts {
		f = append(f, p...)
	}
	frame.SetLength(f)
	return f
}

// cqlString is s as a [string].
func cqlString(s string) []byte {
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(s))), s...)
}

// inet is a node's [inet]: its address's length, the address, the port.
func inet(addr []byte, port uint32) []byte {
	return binary.BigEndian.AppendUint32(append([]byte{byte(len(addr))}, addr...), port)
}

// What a node sends on the events connection that is no event the proxy
// can act on is logged and dropped, with no panic: an EVENT that cannot be
// read has the ring read again in case it was a change, and the
// connection is kept; a frame that leaves the connection unreadable ends
// it, and the events are followed on a new one. Either way an event after
// it is followed.
func TestRingEventsBadEvent(t *testing.T) {
	t.Parallel()
	ip := []byte{10, 0, 0, 9}
	for _, tc := range []struct {
		name string
		sent []byte
		// stale is how many times the frame has the ring read.
		stale int32
		// reconnect: the connection ends and a new one follows.
		reconnect bool
		// logged is the message of the debug line the frame logs, if any.
		logged string
	}{
		{"an EVENT cut short", eventFrame(cqlString("TOPOLOGY_CHANGE")[:5]), 1, false, "an event that cannot be read"},
		{"an event of an unknown type", eventFrame(cqlString("WEATHER_CHANGE"), cqlString("RAIN")), 1, false, "an event that cannot be read"},
		{"an address of 5 bytes", eventFrame(cqlString("STATUS_CHANGE"), cqlString("DOWN"), inet([]byte{10, 0, 0, 9, 9}, 9042)), 1, false, "an event that cannot be read"},
		{"a status neither UP nor DOWN", eventFrame(cqlString("STATUS_CHANGE"), cqlString("SIDEWAYS"), inet(ip, 9042)), 0, false, "an event that says nothing known"},
		{"a port out of range", eventFrame(cqlString("STATUS_CHANGE"), cqlString("DOWN"), inet(ip, 70000)), 0, false, "an event that says nothing known"},
		{"an unknown schema target", eventFrame(cqlString("SCHEMA_CHANGE"), cqlString("UPDATED"), cqlString("VIEW"), cqlString("ks"), cqlString("v")), 1, false, "an event that cannot be read"},
		{"a keyspace unknown to the ring", eventFrame(cqlString("SCHEMA_CHANGE"), cqlString("CREATED"), cqlString("KEYSPACE"), cqlString("nosuch")), 1, false, ""},
		{"a table of a keyspace unknown to the ring", eventFrame(cqlString("SCHEMA_CHANGE"), cqlString("CREATED"), cqlString("TABLE"), cqlString("nosuch"), cqlString("t")), 0, false, ""},
		{"a RESULT on the event stream", frame.AppendHeader(nil, frame.Header{Version: eventsVersion, Response: true, Stream: -1, Opcode: frame.OpResult}), 0, false, ""},
		{"protocol version 2", []byte{0x82, 0, 0xff, byte(frame.OpEvent), 0, 0, 0, 0}, 0, true, ""},
		{"an EVENT of 1 MiB", append(frame.AppendHeader(nil, frame.Header{Version: eventsVersion, Response: true, Stream: -1, Opcode: frame.OpEvent, Length: 1 << 20}), make([]byte, 1<<20)...), 0, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			node := startScripted(t, func(op frame.Opcode) message.Message {
				switch op {
				case frame.OpStartup, frame.OpRegister:
					return &message.Ready{}
				case frame.OpOptions:
					return &message.Supported{}
				}
				return nil
			})
			var stale, said atomic.Int32
			var log logLines
			e := &ringEvents{
				addrs: []string{node.addr()}, timeout: time.Second,
				stale:     func() { stale.Add(1) },
				up:        func(string) { said.Add(1) },
				down:      func(string) { said.Add(1) },
				heartbeat: time.Minute,
				retry:     10 * time.Millisecond,
				log:       zerolog.New(&log).Level(zerolog.DebugLevel),
			}
			runEvents(t, e)
			c := node.accepted(t)
			waitUntil(t, "the events followed", func() bool { return stale.Load() == 1 })
			c.write(tc.sent)
			want := 1 + tc.stale
			if tc.reconnect {
				select {
				case <-c.closed:
				case <-time.After(5 * time.Second):
					t.Fatal("the connection kept")
				}
				c = node.accepted(t)
				want = 2 // registered again
				waitUntil(t, "the events followed again", func() bool { return stale.Load() == want })
			}
			// An event after it is followed.
			c.write(eventFrame(cqlString("TOPOLOGY_CHANGE"), cqlString("NEW_NODE"), inet(ip, 9042)))
			want++
			waitUntil(t, "the event after it followed", func() bool { return stale.Load() >= want })
			if got := stale.Load(); got != want {
				t.Errorf("the ring asked for %d times, want %d", got, want)
			}
			if n := said.Load(); n != 0 {
				t.Errorf("%d nodes said up or down", n)
			}
			select {
			case <-c.closed:
				t.Error("the connection ended")
			case <-node.conns:
				t.Error("another connection made")
			default:
			}
			if tc.logged != "" && log.count("debug", tc.logged) != 1 {
				t.Errorf("%q not logged once: %s", tc.logged, log.String())
			}
		})
	}
}

// holdEvents serves node's connections through a relay, but holds each
// connection that starts as an events connection does, unanswered, and
// sends it on held.
func holdEvents(t *testing.T, node string) (addr string, held <-chan *scriptedConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	startup := frame.AppendStartupRequest(nil, eventsVersion, 0)
	out := make(chan *scriptedConn, 16)
	acceptEach(t, ln, func(tr *connTracker, nc net.Conn) {
		br := bufio.NewReader(nc)
		first, _, err := frame.NewReader(br, 1<<20).Next()
		if err != nil {
			return
		}
		if bytes.Equal(first, startup) {
			c := &scriptedConn{nc: nc, accepted: time.Now(), closed: make(chan struct{})}
			out <- c
			io.Copy(io.Discard, nc)
			close(c.closed)
			return
		}
		up, err := net.Dial("tcp", node)
		if err != nil {
			nc.Close()
			return
		}
		tr.track(up)
		up.Write(first)
		tr.wg.Go(func() {
			io.Copy(nc, up)
			nc.Close()
		})
		io.Copy(up, br)
		up.Close()
	})
	return ln.Addr().String(), out
}

// An events connection that hangs holds up nothing else: while it waits
// on its upstream, a client's session through the proxy is served.
func TestRingEventsHangDelaysNoSession(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{})
	relay, held := holdEvents(t, node.Addr())
	cfg := config.Default()
	cfg.Admin.Listen, cfg.Listen, cfg.Upstreams = "", "127.0.0.1:0", []string{relay}
	// The events connection's timeout: it is held this long at least.
	cfg.DialTimeout = config.Duration(time.Minute)
	_, addr := serveProxy(t, cfg, testLogger(), prometheus.NewRegistry())
	var c *scriptedConn
	select {
	case c = <-held:
	case <-time.After(5 * time.Second):
		t.Fatal("no events connection")
	}
	client := dialRaw(t, addr, 4)
	client.startup(map[string]string{"DRIVER_NAME": "test"})
	client.send(1, &message.Query{Query: "SELECT v FROM bench.kv WHERE k = 1", Options: &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne}})
	if f := client.recv(); f.Header.OpCode != primitive.OpCodeResult {
		t.Fatalf("answered with %v", f.Body.Message)
	}
	select {
	case <-c.closed:
		t.Fatal("the events connection given up before the session was served: the test shows nothing")
	default:
	}
}
