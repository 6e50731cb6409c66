package proxy

// Attacks where two features meet: what one connection sends, or fails to
// read, must not change what another connection gets, when, or what it is
// charged (docs/reliability.md, "What one client can do to others"). Each
// test attacks from one connection and, where the attack is on others,
// measures another.

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	pframe "github.com/datastax/go-cassandra-native-protocol/frame"
	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

var readOne = &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne}

// A client that fills its socket with answers it never reads, and leads a
// flight for a hot read, holds up no other client's identical read: the
// reads waiting on it are forwarded on their own connections as soon as
// its answers wait for room, and it leads no more flights. (Before, every
// other client's read joined its flight and waited hot_reads.max_wait.)
func TestHotReadLeaderThatStopsReadingStallsNobody(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{Keyspace: "ks", Table: "kv", RowBytes: 256 << 10, Rows: 4,
		SlowQuery: "k = 1", SlowFor: 200 * time.Millisecond})
	const maxWait = time.Minute
	p := hotProxy(t, node, config.HotReadsTable{Coalesce: true}, func(c *config.Config) {
		c.HotReads.MaxWait = config.Duration(maxWait)
		c.MaxBufferedBytes = 1 << 20
	})
	stalled := dialRaw(t, p.cfg.Listen, 4)
	stalled.startup(nil)
	// 16 answers of 1 MiB that the client never reads, then the hot read.
	for i := range 16 {
		stalled.send(int16(1+i), &message.Query{Query: fmt.Sprintf("SELECT * FROM ks.kv WHERE k = %d", 200+i), Options: readOne})
	}
	stalled.send(100, &message.Query{Query: "SELECT * FROM ks.kv WHERE k = 1", Options: readOne})
	waitUntil(t, "the stalled client's reads in flight", func() bool { return p.hotServed(t, "forwarded") == 17 })

	// Another client's identical reads, one after another: each is
	// answered, none waits max_wait.
	other := dialRaw(t, p.cfg.Listen, 4)
	other.startup(nil)
	other.c.SetDeadline(time.Now().Add(maxWait / 2))
	start := time.Now()
	for i := range 5 {
		other.read(int16(1+i), "SELECT * FROM ks.kv WHERE k = 1")
	}
	t.Logf("5 reads answered in %v behind a client that does not read (max_wait %v)", time.Since(start).Round(time.Millisecond), maxWait)
}

// A client that pipelines identical hot reads and never reads its answers
// holds no more of them than its own max_buffered_bytes allows, however
// many it sends: an answer it would be handed past that is forwarded on
// its own connection, where it waits for room. (Before, every answer was
// queued: 38 MiB for one connection under a 1 MiB bound.)
func TestHotReadAnswersCountAgainstTheirConnection(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{Keyspace: "ks", Table: "kv", RowBytes: 64 << 10,
		SlowQuery: "k = 1", SlowFor: 300 * time.Millisecond})
	const bound = 256 << 10
	p := hotProxy(t, node, config.HotReadsTable{Coalesce: true}, func(c *config.Config) {
		c.MaxBufferedBytes = bound
	})
	c := dialRaw(t, p.cfg.Listen, 4)
	c.startup(nil)
	const reads = 1000
	var pipeline bytes.Buffer
	for i := range reads {
		pipeline.Write(queryFrame(t, int16(1+i), "SELECT * FROM ks.kv WHERE k = 1"))
	}
	if _, err := c.c.Write(pipeline.Bytes()); err != nil {
		t.Fatal(err)
	}
	// Every read found a flight, or forwarded; the flights landed.
	waitUntil(t, "the flights landed", func() bool {
		return p.hotServed(t, "coalesced")+p.hotServed(t, "forwarded")+p.hotServed(t, "uncoalesced") >= reads &&
			p.hotReads.flights.Len() == 0
	})
	var held int64
	p.mu.Lock()
	for s := range p.sessions {
		held = max(held, s.toClient.Held())
	}
	p.mu.Unlock()
	// Past the bound by at most an answer being written, and one handed over.
	if answer := int64(70 << 10); held > bound+2*answer {
		t.Errorf("the client's writer holds %d bytes, bound %d", held, bound)
	}
	t.Logf("held %d bytes of answers for a client that does not read (bound %d)", held, bound)
}

// Whether a driver opted in to the rate-limit error is part of what makes
// two reads identical: against a node that refuses with that error, a
// driver that did not opt in gets Config_error, never an answer made for
// one that did.
func TestHotReadOptInNotShared(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{Keyspace: "ks", Table: "kv", RateLimitError: true, RejectEvery: 1,
		SlowQuery: "k = 1", SlowFor: 300 * time.Millisecond})
	p := hotProxy(t, node, config.HotReadsTable{Coalesce: true}, nil)
	optedIn := dialRaw(t, p.cfg.Listen, 4)
	optedIn.startup(map[string]string{rateLimitKey: ""})
	plain := dialRaw(t, p.cfg.Listen, 4)
	plain.startup(nil)
	optedIn.send(1, &message.Query{Query: "SELECT * FROM ks.kv WHERE k = 1", Options: readOne})
	waitUntil(t, "the opted-in read in flight", func() bool { return node.SlowRequests() == 1 })
	plain.send(1, &message.Query{Query: "SELECT * FROM ks.kv WHERE k = 1", Options: readOne})
	for _, tc := range []struct {
		c    *rawClient
		want int32
	}{{optedIn, fakenode.RateLimitErrorCode}, {plain, frame.ErrCodeConfig}} {
		f, h, err := tc.c.r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if h.Opcode != frame.OpError {
			t.Errorf("answered %v, want error %#x", h.Opcode, tc.want)
			continue
		}
		if code, msg := errorOf(t, h, f[frame.HeaderSize:]); code != tc.want {
			t.Errorf("error %#x %q, want %#x", code, msg, tc.want)
		}
	}
}

// classesProxy serves, in front of a node that asks for the password of
// user guest, a class trusted of user admin and of application vip,
// without a budget, and a default class with a budget.
func classesProxy(t *testing.T) (*Proxy, string) {
	t.Helper()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{Keyspace: "ks", Table: "kv", Username: "guest", Password: "pw"})
	cfg := parseConfig(t, `listen: 127.0.0.1:0
upstreams: [`+node.Addr()+`]
admin: {listen: ""}
clients:
  classes:
    - name: admins
      match: {users: [admin]}
      tier: 0
    - name: vip
      match: {application_names: [vip]}
      tier: 0
  default:
    name: default
    max_units_per_second: 1000
`)
	p, addr := serveProxy(t, cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{testSnapshot(t)}))
	return p, addr
}

// login answers the node's AUTHENTICATE with user and password, and
// returns the opcode of the answer.
func (c *rawClient) login(stream int16, user, password string) primitive.OpCode {
	c.t.Helper()
	c.send(stream, &message.AuthResponse{Token: []byte("\x00" + user + "\x00" + password)})
	return c.recv().Header.OpCode
}

// classOf sends a read and returns the class it was counted in.
func classOf(t *testing.T, p *Proxy, c *rawClient, stream int16) string {
	t.Helper()
	before := map[string]float64{}
	for _, name := range []string{"admins", "vip", "default"} {
		before[name] = metricValue(t, p.clientMetrics.requests.WithLabelValues(name))
	}
	c.send(stream, &message.Query{Query: "SELECT * FROM ks.kv WHERE k = 1", Options: readOne})
	c.recv()
	for name, n := range before {
		if metricValue(t, p.clientMetrics.requests.WithLabelValues(name)) > n {
			return name
		}
	}
	return ""
}

// Who a connection is comes from the exchanges the node accepted, once: a
// login the node refused names nobody, a connection that logged in cannot
// name another user after, and a second STARTUP changes nothing. (Before,
// each of these moved the connection into the class it named.)
func TestIdentityFromAcceptedExchanges(t *testing.T) {
	t.Parallel()
	p, addr := classesProxy(t)
	startup := func(app string) *rawClient {
		c := dialRaw(t, addr, 4)
		c.send(0, &message.Startup{Options: map[string]string{"CQL_VERSION": "3.0.0", "APPLICATION_NAME": app}})
		if op := c.recv().Header.OpCode; op != primitive.OpCodeAuthenticate {
			t.Fatalf("STARTUP answered %v", op)
		}
		return c
	}
	for _, tc := range []struct {
		name   string
		attack func(c *rawClient)
	}{
		{"refused login", func(c *rawClient) {
			if op := c.login(1, "admin", "guessed"); op != primitive.OpCodeError {
				t.Fatalf("a wrong password answered %v", op)
			}
		}},
		{"second login after AUTH_SUCCESS", func(c *rawClient) {
			if op := c.login(1, "guest", "pw"); op != primitive.OpCodeAuthSuccess {
				t.Fatalf("login answered %v", op)
			}
			c.login(2, "admin", "guessed")
		}},
		{"second STARTUP", func(c *rawClient) {
			if op := c.login(1, "guest", "pw"); op != primitive.OpCodeAuthSuccess {
				t.Fatalf("login answered %v", op)
			}
			c.send(2, &message.Startup{Options: map[string]string{"CQL_VERSION": "3.0.0", "APPLICATION_NAME": "vip"}})
			if op := c.recv().Header.OpCode; op != primitive.OpCodeError {
				t.Errorf("a second STARTUP answered %v, want a protocol error", op)
			}
		}},
	} {
		c := startup("web")
		tc.attack(c)
		if got := classOf(t, p, c, 10); got != "default" {
			t.Errorf("%s: the connection is of class %q, want default", tc.name, got)
		}
	}
	// What the node accepted does take effect.
	c := startup("vip")
	c.login(1, "guest", "pw")
	if got := classOf(t, p, c, 10); got != "vip" {
		t.Errorf("an accepted STARTUP with APPLICATION_NAME vip: class %q, want vip", got)
	}
}

// A class pays for what it has forwarded, answered or not: a client that
// pipelines requests and leaves before their answers, again and again,
// gets no more forwarded than its budget. (Before, requests were priced
// only when answered: 4,000 of a 50-unit class went through in 5 s.)
func TestBudgetNotEscapedByLeaving(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{Keyspace: "ks", Table: "kv", SlowQuery: "k = 1", SlowFor: 50 * time.Millisecond})
	cfg := parseConfig(t, `listen: 127.0.0.1:0
upstreams: [`+node.Addr()+`]
admin: {listen: ""}
clients:
  classes:
    - name: batch
      match: {application_names: [scanner]}
      max_units_per_second: 50
request_units: {fixed: 1, per_row: 0, per_kib: 0, per_ms: 0}
`)
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
	addr := servedOn(t, p)
	var pipeline bytes.Buffer
	for i := range 200 {
		pipeline.Write(queryFrame(t, int16(1+i), "SELECT * FROM ks.kv WHERE k = 1"))
	}
	refusals := p.clientMetrics.refusals.WithLabelValues("batch", "rejected")
	for round := range 20 {
		c := dialRaw(t, addr, 4)
		c.startup(map[string]string{"APPLICATION_NAME": "scanner"})
		if _, err := c.c.Write(pipeline.Bytes()); err != nil {
			t.Fatal(err)
		}
		// Every request decided, then gone before the answers.
		waitUntil(t, "the pipeline decided", func() bool {
			return metricValue(t, p.clientMetrics.requests.WithLabelValues("batch")) == float64(200*(round+1))
		})
		c.c.Close()
	}
	forwarded := 20*200 - metricValue(t, refusals)
	// A burst of 50 units, one each, into debt by one.
	if forwarded > 51 {
		t.Errorf("%v requests of a class of 50 units a second forwarded in no time", forwarded)
	}
	t.Logf("forwarded %v of 4000, units charged %v", forwarded, metricValue(t, p.clientMetrics.units.WithLabelValues("batch")))
}

// queryFrame is a v4 QUERY of text at ONE on stream.
func queryFrame(t *testing.T, stream int16, text string) []byte {
	t.Helper()
	return stubQuery(stream, text)
}

// A USE pipelined with the requests after it, in one write, changes the
// keyspace they are classified in only once the node answered it: they
// are read after its answer. (Before, they were classified against the
// keyspace the connection had: a limited table read unqualified from
// another keyspace went unlimited.)
func TestUsePipelinedWithItsRequests(t *testing.T) {
	t.Parallel()
	addr, pinnedToKs := kvInKsProxy(t)
	c := dialStub(t, addr)
	var pipeline []byte
	pipeline = append(pipeline, stubQuery(1, "USE ks")...)
	for i := range 10 {
		pipeline = append(pipeline, stubQuery(int16(2+i), "SELECT v FROM kv WHERE k = 1")...)
	}
	c.write(pipeline)
	for range 11 {
		if _, code, msg, err := c.next(); err != nil || code != 0 {
			t.Fatalf("%#x %q %v", code, msg, err)
		}
	}
	pinned := pinnedToKs()
	for i, ok := range pinned {
		if !ok {
			t.Errorf("read %d after a pipelined USE ks not classified in ks: %v", i, pinned)
			break
		}
	}
	if len(pinned) != 10 {
		t.Errorf("%d reads classified, want 10", len(pinned))
	}
}

// A client that stops reading makes its answers wait in the upstream's
// socket: they are not timed as the node's latency, which would shed other
// clients of its tier and page on a healthy node. (Before, a client that
// held its answers for half a second made its tier's latency half a
// second.)
func TestStalledClientIsNotTheNodeSlowing(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{Keyspace: "ks", Table: "kv", RowBytes: 256 << 10})
	cfg := parseConfig(t, `listen: 127.0.0.1:0
upstreams: [`+node.Addr()+`]
admin: {listen: ""}
max_buffered_bytes: 1048576
clients:
  classes:
    - {name: batch, tier: 5, match: {application_names: [batch]}}
shedding:
  enabled: true
  short_window: 100ms
  long_window: 2s
  min_samples: 10
`)
	p, err := New(cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{testSnapshot(t)}))
	if err != nil {
		t.Fatal(err)
	}
	addr := servedOn(t, p)
	c := dialRaw(t, addr, 4)
	c.startup(map[string]string{"APPLICATION_NAME": "batch"})
	const reads = 64 // 16 MiB of answers
	var pipeline bytes.Buffer
	for i := range reads {
		pipeline.Write(queryFrame(t, int16(1+i), fmt.Sprintf("SELECT * FROM ks.kv WHERE k = %d", i)))
	}
	if _, err := c.c.Write(pipeline.Bytes()); err != nil {
		t.Fatal(err)
	}
	var s *session
	waitUntil(t, "the client's answers waiting for it", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for x := range p.sessions {
			if x.clientWaits.Load() > 0 {
				s = x
			}
		}
		return s != nil
	})
	time.Sleep(500 * time.Millisecond) // how long the client holds its answers
	c.c.SetDeadline(time.Now().Add(10 * time.Second))
	for range reads {
		c.recv()
	}
	l := s.up.node.latency[5].Load()
	if l == nil {
		return // no answer timed at all
	}
	short, _, ok := l.Quantiles(p.elapsed())
	if short > 100*time.Millisecond {
		t.Errorf("the tier's latency is %v after a client held its answers for 500 ms", short)
	}
	t.Logf("tier 5 latency %v (trusted %v) after the client held its answers for 500 ms", short, ok)
}

// A client that pipelines USEs behind a request its upstream is lost on
// leaves nothing behind: the request path does not wait for the answer of
// an awaited request it forwards after the response path ended. (Before,
// the first such request took the verdict the ending response path left,
// and the next one waited for ever whenever it was forwarded before the
// session closed its upstream socket: the session and its goroutines
// stayed after the client left, and Shutdown never returned.)
func TestAwaitedRequestAfterUpstreamLost(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{Keyspace: "ks", Table: "kv", ResetQuery: "k = 666"})
	p, addr := startProxy(t, func(c *config.Config) { c.Listen, c.Upstreams = "127.0.0.1:0", []string{node.Addr()} })
	pipeline := msgFrame(t, 4, 0, &message.Startup{Options: map[string]string{"CQL_VERSION": "3.0.0"}})
	pipeline = append(pipeline, queryFrame(t, 1, "SELECT * FROM ks.kv WHERE k = 666")...)
	pipeline = append(pipeline, queryFrame(t, 2, "USE ks")...)
	pipeline = append(pipeline, queryFrame(t, 3, "USE ks")...)
	lost := p.metrics.protocolErrors.WithLabelValues("upstream_lost")
	// Whether the second USE is forwarded before the session closes its
	// upstream socket is a race: run it a few times.
	for i := range 30 {
		c := rawConn(t, addr)
		if _, err := c.Write(pipeline); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the upstream lost", func() bool { return metricValue(t, lost) > float64(i) })
		c.Close()
	}
	waitUntil(t, "every session to end", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.sessions) == 0
	})
}

// A client that leaves as soon as it has sent a hot read leaves no flight
// behind: a read its request path leads after its response path found it
// gone (here, writing the answer to its USE) is orphaned when its session
// ends. (Before, the flight stayed for ever, and every identical read of
// another client joined it and waited hot_reads.max_wait: a minute here,
// 1 s by default, and again for each read.)
func TestHotReadLeaderThatLeftAtOnce(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{Keyspace: "ks", Table: "kv"})
	p := hotProxy(t, node, config.HotReadsTable{Coalesce: true}, func(c *config.Config) {
		c.HotReads.MaxWait = config.Duration(time.Minute)
	})
	pipeline := msgFrame(t, 4, 0, &message.Startup{Options: map[string]string{"CQL_VERSION": "3.0.0"}})
	pipeline = append(pipeline, queryFrame(t, 1, "USE ks")...)
	for i := range 4 {
		pipeline = append(pipeline, queryFrame(t, int16(2+i), "SELECT * FROM ks.kv WHERE k = 1")...)
	}
	for range 5 {
		c := rawConn(t, p.cfg.Listen)
		if _, err := c.Write(pipeline); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	waitUntil(t, "every session to end", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.sessions) == 0
	})
	if n := p.hotReads.flights.Len(); n != 0 {
		t.Errorf("%d flights left after every client left", n)
	}
	other := dialRaw(t, p.cfg.Listen, 4)
	other.startup(nil)
	other.read(1, "USE ks")
	other.c.SetDeadline(time.Now().Add(5 * time.Second))
	other.read(2, "SELECT * FROM ks.kv WHERE k = 1")
}

// A read that joined another connection's flight and is handed on runs
// where the node is when it is forwarded: a USE the same client pipelined
// behind it must not reach the node first. Its client sends an unqualified
// hot read in ks, which joins another's, then USE other; the other client
// leaves once the USE is answered. (Before, the read was handed on after
// the USE and answered from other.kv: no rows.)
func TestHandedOnReadBeforeItsClientsUse(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{Keyspace: "ks", Table: "kv", SlowQuery: "k = 1", SlowFor: 300 * time.Millisecond})
	p := hotProxy(t, node, config.HotReadsTable{Coalesce: true}, nil)
	use := func(c *rawClient, stream int16, ks string) {
		c.send(stream, &message.Query{Query: "USE " + ks, Options: readOne})
		if fr := c.recv(); fr.Header.OpCode != primitive.OpCodeResult {
			t.Fatalf("USE %s answered %v", ks, fr.Body.Message)
		}
	}
	const read = "SELECT * FROM kv WHERE k = 1"
	want := func() []byte {
		c := dialRaw(t, p.cfg.Listen, 4)
		c.startup(nil)
		use(c, 1, "ks")
		return c.read(2, read)
	}()

	leader := dialRaw(t, p.cfg.Listen, 4)
	leader.startup(nil)
	use(leader, 1, "ks")
	leader.send(2, &message.Query{Query: read, Options: readOne})
	waitUntil(t, "the leader's read in flight", func() bool { return node.SlowRequests() == 2 })

	c := dialRaw(t, p.cfg.Listen, 4)
	c.startup(nil)
	use(c, 1, "ks")
	coalesced := p.hotServed(t, "coalesced")
	c.send(2, &message.Query{Query: read, Options: readOne})
	waitUntil(t, "the read joined the leader's", func() bool { return p.hotServed(t, "coalesced") > coalesced })
	c.send(3, &message.Query{Query: "USE other", Options: readOne})
	c.c.SetDeadline(time.Now().Add(10 * time.Second))
	var got []byte
	for got == nil {
		fr := c.recv()
		switch fr.Header.StreamId {
		case 3:
			leader.c.Close() // its flight ends unanswered: the read is handed on
		case 2:
			var b bytes.Buffer
			if err := pframe.NewCodec().EncodeFrame(fr, &b); err != nil {
				t.Fatal(err)
			}
			got = b.Bytes()[9:]
		}
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the read answered %x, want %x (its rows in ks)", got, want)
	}
}
