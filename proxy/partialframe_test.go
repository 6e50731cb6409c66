package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
)

// Requests that arrived whole are forwarded while the frame read after
// them is still arriving: a client whose write ends part way through a
// frame does not hold back the requests before it, on the connection's own
// node or on another, over a plain socket or TLS (where the proxy cannot
// tell that a read will wait).
func TestRequestsBeforeAPartialFrameForwarded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		low  bool // the whole request's partition: on the first node, else on another
		tls  bool
	}{
		{"own node", true, false},
		{"other node", false, false},
		{"own node, TLS", true, true},
		{"other node, TLS", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up, b, c := startLegNode(t), startLegNode(t), startLegNode(t)
			ring := splitRing{low: b.addr(), high: c.addr()}
			if tc.low {
				ring.low = up.addr()
			}
			var dial func(addr string) net.Conn
			var edit func(*config.Config)
			if tc.tls {
				edit, dial = servedOverTLS(t)
			}
			_, addr, _ := startLegsProxy(t, up.addr(), ring, edit)
			var cl *stubClient
			if dial != nil {
				cl = stubOn(t, dial(addr))
			} else {
				cl = dialStub(t, addr)
			}
			cl.answered(readKV(1, "bench.kv", keyOn(true)), 1)
			cl.answered(readKV(2, "bench.kv", keyOn(false)), 2)
			rest := readKV(4, "bench.kv", keyOn(true))
			cl.write(append(readKV(3, "bench.kv", keyOn(tc.low)), rest[:len(rest)/2]...))
			// Well within frame_timeout, which would end the
			// connection instead of answering.
			cl.c.SetReadDeadline(time.Now().Add(5 * time.Second))
			cl.wantResult(3)
			cl.write(rest[len(rest)/2:])
			cl.wantResult(4)
		})
	}
}

// servedOverTLS returns an edit that has a proxy serve clients over TLS, and a
// dial of such a proxy.
func servedOverTLS(t testing.TB) (func(*config.Config), func(addr string) net.Conn) {
	t.Helper()
	ca := newTestCA(t)
	dir := t.TempDir()
	cfgTLS := config.TLSConfig{CertFile: filepath.Join(dir, "server.pem"), KeyFile: filepath.Join(dir, "server.key")}
	cert, key := ca.issue(t, "cqlguard", 2)
	writeFile(t, cfgTLS.CertFile, cert)
	writeFile(t, cfgTLS.KeyFile, key)
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	dial := func(addr string) net.Conn {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
		if err != nil {
			t.Fatalf("dial %s over TLS: %v", addr, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	return func(c *config.Config) { c.TLS = cfgTLS }, dial
}

// On v5, plain or LZ4, a client whose write ends part way through a
// segment does not hold back the requests of the segments before it: half
// a self-contained segment, or the first of the segments of a frame over
// 128 KiB, over a plain socket or TLS.
func TestRequestsBeforeAPartialSegmentForwarded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		lz4, tls, large bool
	}{
		{"half a segment", false, false, false},
		{"half a segment, LZ4", true, false, false},
		{"half a segment, TLS", false, true, false},
		{"half a segment, LZ4, TLS", true, true, false},
		{"a large frame's first segment", false, false, true},
		{"a large frame's first segment, LZ4", true, false, true},
		{"a large frame's first segment, TLS", false, true, true},
		{"a large frame's first segment, LZ4, TLS", true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			node := startStubNode(t, "127.0.0.1:0")
			var dial func(addr string) net.Conn
			var edit func(*config.Config)
			if tc.tls {
				edit, dial = servedOverTLS(t)
			}
			_, addr := startProxy(t, func(c *config.Config) {
				c.Listen, c.Upstreams = "127.0.0.1:0", []string{node.ln.Addr().String()}
				if edit != nil {
					edit(c)
				}
			})
			c := badOn(t, dialed(t, addr, dial), 5, compression(tc.lz4))
			text := "SELECT v FROM ks.t"
			if tc.large {
				text = "SELECT v FROM ks.t WHERE k = '" + strings.Repeat("x", 200<<10) + "'"
			}
			first, rest := cutSegments(c, queryIn(t, 5, 4, text), tc.large)
			c.write(append(c.wire(queryIn(t, 5, 3, "SELECT v FROM ks.t")), first...))
			c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
			c.wantResult(3)
			c.write(rest)
			c.wantResult(4)
		})
	}
}

// dialed returns a connection to the proxy at addr: dial's, or a plain one
// when dial is nil.
func dialed(t *testing.T, addr string, dial func(addr string) net.Conn) net.Conn {
	t.Helper()
	if dial != nil {
		return dial(addr)
	}
	return rawConn(t, addr)
}

// compression is the STARTUP options asking for LZ4, or none.
func compression(lz4 bool) map[string]string {
	if lz4 {
		return map[string]string{"COMPRESSION": "lz4"}
	}
	return nil
}

// queryIn is a QUERY of text on stream in protocol v, consistency ONE.
func queryIn(t *testing.T, v uint8, stream int16, text string) []byte {
	return msgFrame(t, v, stream, &message.Query{Query: text, Options: &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne}})
}

// cutSegments returns the frame f as c sends it, cut in two: in the middle
// of its one segment, or, spread (it must be over 128 KiB), after its
// first segment.
func cutSegments(c *badClient, f []byte, spread bool) (first, rest []byte) {
	if !spread {
		w := c.wire(f)
		return w[:len(w)/2], w[len(w)/2:]
	}
	first = c.segs.AppendSegment(nil, f[:frame.MaxSegmentPayload], false)
	for p := f[frame.MaxSegmentPayload:]; len(p) > 0; {
		k := min(len(p), frame.MaxSegmentPayload)
		rest = c.segs.AppendSegment(rest, p[:k], false)
		p = p[k:]
	}
	return first, rest
}

// wantResult reads the next answer and wants a RESULT on stream.
func (c *badClient) wantResult(stream int16) {
	c.t.Helper()
	if r, err := c.next(); err != nil || r.stream != stream || r.opcode != frame.OpResult {
		c.t.Fatalf("want a RESULT on stream %d, got %v, %v", stream, r, err)
	}
}

// The requests read before a frame that waits for room in
// max_frame_bytes_total, which another client's large frame holds, are
// answered meanwhile.
func TestRequestsBeforeALargeFrameForwarded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// compressed: the frame is small, its body compressed and large
		// once decompressed.
		compressed bool
	}{
		{"large frame", false},
		{"large compressed body", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			node := startStubNode(t, "127.0.0.1:0")
			p, addr := startProxy(t, func(c *config.Config) {
				c.Listen, c.Upstreams = "127.0.0.1:0", []string{node.ln.Addr().String()}
				c.MaxFrameBytesTotal = 256 << 10
				// Longer than the answer is waited for: the other client
				// holds its share until its frame_timeout.
				c.FrameTimeout = config.Duration(time.Minute)
			})
			large := func(stream int16, fill string) []byte {
				return stubQuery(stream, "SELECT v FROM ks.t WHERE k = '"+strings.Repeat(fill, 200<<10)+"'")
			}
			holder := dialStub(t, addr)
			held := large(9, "x")
			holder.write(held[:len(held)/2])
			waitUntil(t, "the other client's frame in max_frame_bytes_total", func() bool { return p.requestFrames.Taken() > 0 })

			c := badOn(t, rawConn(t, addr), 4, compression(tc.compressed))
			second := large(2, "y")
			if tc.compressed {
				var z frame.Compressor
				body := z.AppendBody(nil, frame.CompressionLZ4, second[frame.HeaderSize:])
				second = append(frame.AppendHeader(nil, frame.Header{Version: 4, Flags: frame.FlagCompression, Stream: 2, Opcode: frame.OpQuery, Length: len(body)}), body...)
			}
			c.write(append(stubQuery(1, "SELECT v FROM ks.t"), second...))
			c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
			c.wantResult(1)
			holder.c.Close()
			c.wantResult(2)
		})
	}
}

// A response path that read an answer and part of the next does not hold
// the first back while the rest comes, from a node over a plain socket or
// TLS (where the proxy cannot tell that a read will wait).
func TestAnswersBeforeAPartialAnswerForwarded(t *testing.T) {
	t.Parallel()
	for _, useTLS := range []bool{false, true} {
		t.Run(fmt.Sprint("TLS ", useTLS), func(t *testing.T) {
			t.Parallel()
			var nodeTLS *tls.Config
			edit := func(*config.Config) {}
			if useTLS {
				ca := newTestCA(t)
				pair, err := tls.X509KeyPair(ca.issue(t, "node", 5))
				if err != nil {
					t.Fatal(err)
				}
				nodeTLS = &tls.Config{Certificates: []tls.Certificate{pair}}
				caFile := filepath.Join(t.TempDir(), "ca.pem")
				writeFile(t, caFile, ca.pem)
				edit = func(c *config.Config) { c.UpstreamTLS = config.UpstreamTLSConfig{Enabled: true, CAFile: caFile} }
			}
			node := startSplitNode(t, nodeTLS)
			_, addr := startProxy(t, func(c *config.Config) {
				c.Listen, c.Upstreams = "127.0.0.1:0", []string{node.ln.Addr().String()}
				edit(c)
			})
			c := dialStub(t, addr)
			c.answered(stubQuery(1, "SELECT v FROM ks.t"), 1)
			c.write(append(stubQuery(2, "SELECT v FROM ks.t"), stubQuery(3, "SELECT split FROM ks.t")...))
			c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
			c.wantResult(2)
			node.release <- struct{}{}
			c.wantResult(3)
		})
	}
}

// splitNode is a node that answers what one read of its socket gave in one
// write, except that it writes the answer to a QUERY whose text contains
// "split" half with the answers before it, and the rest once released.
type splitNode struct {
	ln      net.Listener
	release chan struct{}
}

func startSplitNode(t *testing.T, conf *tls.Config) *splitNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if conf != nil {
		ln = tls.NewListener(ln, conf)
	}
	n := &splitNode{ln: ln, release: make(chan struct{})}
	stop := make(chan struct{})
	acceptEach(t, ln, func(_ *connTracker, c net.Conn) { n.serve(c, stop) })
	// Before acceptEach's cleanup waits for serve.
	t.Cleanup(func() { close(stop) })
	return n
}

func (n *splitNode) serve(c net.Conn, stop <-chan struct{}) {
	br := bufio.NewReader(c)
	r := frame.NewReader(br, 1<<20)
	var out []byte
	for {
		f, h, err := r.Next()
		if err != nil {
			return
		}
		op, body := frame.OpResult, []byte{0, 0, 0, frame.ResultKindVoid}
		switch h.Opcode {
		case frame.OpOptions:
			op, body = frame.OpSupported, []byte{0, 0}
		case frame.OpStartup:
			op, body = frame.OpReady, nil
		}
		a := frame.AppendHeader(nil, frame.Header{Version: h.Version, Response: true, Stream: h.Stream, Opcode: op, Length: len(body)})
		a = append(a, body...)
		if q, _ := frame.QueryString(f[frame.HeaderSize:]); h.Opcode == frame.OpQuery && bytes.Contains(q, []byte("split")) {
			c.Write(append(out, a[:len(a)/2]...))
			out = out[:0]
			select {
			case <-n.release:
			case <-stop:
				return
			}
			c.Write(a[len(a)/2:])
			continue
		}
		if out = append(out, a...); br.Buffered() == 0 {
			c.Write(out)
			out = out[:0]
		}
	}
}

// A client that leaves part way through a frame, or stops sending, after
// a whole request: the request is forwarded (and answered, while the
// client reads), the session ends with a count under its reason, and
// nothing of the proxy's bounds stays held, in v4 or v5 LZ4 segments,
// over a plain socket or TLS, the frame small or large.
func TestClientLeavesPartWayThroughAFrame(t *testing.T) {
	t.Parallel()
	type leaves int
	const (
		closes leaves = iota
		halfCloses
		stalls
	)
	for _, tc := range []struct {
		name            string
		v               uint8
		tls, large      bool
		leaves          leaves
		reason, summary string
	}{
		{name: "v4 closes", v: 4, leaves: closes},
		{name: "v4 closes its side", v: 4, leaves: halfCloses},
		{name: "v4 stalls", v: 4, leaves: stalls},
		{name: "v4 large closes", v: 4, large: true, leaves: closes},
		{name: "v4 large stalls", v: 4, large: true, leaves: stalls},
		{name: "v4 TLS closes", v: 4, tls: true, leaves: closes},
		{name: "v4 TLS closes its side", v: 4, tls: true, leaves: halfCloses},
		{name: "v4 TLS large stalls", v: 4, tls: true, large: true, leaves: stalls},
		{name: "v5 LZ4 closes", v: 5, leaves: closes},
		{name: "v5 LZ4 closes its side", v: 5, leaves: halfCloses},
		{name: "v5 LZ4 large stalls", v: 5, large: true, leaves: stalls},
		{name: "v5 LZ4 TLS large closes its side", v: 5, tls: true, large: true, leaves: halfCloses},
		{name: "v5 LZ4 TLS stalls", v: 5, tls: true, leaves: stalls},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			node := startStubNode(t, "127.0.0.1:0")
			node.mu.Lock()
			node.record = true
			node.mu.Unlock()
			var dial func(addr string) net.Conn
			var edit func(*config.Config)
			if tc.tls {
				edit, dial = servedOverTLS(t)
			}
			p, addr := startProxy(t, func(c *config.Config) {
				c.Listen, c.Upstreams = "127.0.0.1:0", []string{node.ln.Addr().String()}
				c.FrameTimeout = config.Duration(300 * time.Millisecond)
				if edit != nil {
					edit(c)
				}
			})
			c := badOn(t, dialed(t, addr, dial), tc.v, compression(tc.v == 5))
			text := "SELECT v FROM ks.t"
			if tc.large {
				text = "SELECT v FROM ks.t WHERE k = '" + strings.Repeat("x", 200<<10) + "'"
			}
			first, _ := cutSegments(c, queryIn(t, tc.v, 4, text), tc.v == 5 && tc.large)
			c.write(append(c.wire(queryIn(t, tc.v, 3, "SELECT third FROM ks.t")), first...))
			c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
			reason := "truncated_frame"
			switch tc.leaves {
			case closes:
				waitUntil(t, "the whole request at the node", func() bool {
					node.mu.Lock()
					defer node.mu.Unlock()
					return slices.Contains(node.statements, "SELECT third FROM ks.t")
				})
				c.c.Close()
			case halfCloses:
				c.wantResult(3)
				c.c.(interface{ CloseWrite() error }).CloseWrite()
			case stalls:
				c.wantResult(3)
				reason = "client_stalled"
			}
			if tc.leaves != closes {
				if r, err := c.next(); err == nil {
					t.Fatalf("after the answer, %v; want the connection closed", r)
				}
			}
			waitUntil(t, "the session ended", func() bool {
				p.mu.Lock()
				defer p.mu.Unlock()
				return len(p.sessions) == 0
			})
			if n := p.inflight.Taken(); n != 0 {
				t.Errorf("max_in_flight holds %d", n)
			}
			if n := p.requestFrames.Taken(); n != 0 {
				t.Errorf("max_frame_bytes_total holds %d", n)
			}
			if n := p.buffered.Taken(); n != 0 {
				t.Errorf("max_buffered_bytes_total holds %d", n)
			}
			if n := testutil.ToFloat64(p.metrics.protocolErrors.WithLabelValues(reason)); n != 1 {
				t.Errorf("%s counted %v times, want 1", reason, n)
			}
		})
	}
}

// Frames are forwarded in the order the client sent them, to each node,
// however its writes cut them: a burst of reads routed at random to two
// nodes, written in pieces of random length with pauses between some, so
// that many reads end part way through a frame and find the socket empty.
func TestRequestsInOrderWhateverTheCuts(t *testing.T) {
	t.Parallel()
	for _, useTLS := range []bool{false, true} {
		t.Run(fmt.Sprint("TLS ", useTLS), func(t *testing.T) {
			t.Parallel()
			up, b := startLegNode(t), startLegNode(t)
			var dial func(addr string) net.Conn
			var edit func(*config.Config)
			if useTLS {
				edit, dial = servedOverTLS(t)
			}
			_, addr, _ := startLegsProxy(t, up.addr(), splitRing{low: up.addr(), high: b.addr()}, edit)
			var c *stubClient
			if dial != nil {
				c = stubOn(t, dial(addr))
			} else {
				c = dialStub(t, addr)
			}
			c.c.SetDeadline(time.Now().Add(30 * time.Second))
			c.answered(readKV(1, "bench.kv", keyOn(false)), 1) // b's connection opened
			const n = 600
			rng := rand.New(rand.NewPCG(1, 2))
			var want [2][]string // up's and b's
			var burst []byte
			k := 0
			for i := range n {
				// The next key on a node chosen at random.
				node := rng.IntN(2)
				for k++; tokenOf(binary.BigEndian.AppendUint64(nil, uint64(k))) < 0 != (node == 0); k++ {
				}
				want[node] = append(want[node], fmt.Sprintf("|SELECT v FROM bench.kv WHERE k = %d", k))
				burst = append(burst, readKV(int16(10+i), "bench.kv", k)...)
			}
			answered := make(chan error, 1)
			go func() {
				seen := map[int16]bool{}
				for range n {
					stream, op, msg, err := c.nextOp()
					if err == nil && (op != frame.OpResult || seen[stream]) {
						err = fmt.Errorf("%s %q on stream %d, answered before: %v", op, msg, stream, seen[stream])
					}
					if err != nil {
						answered <- err
						return
					}
					seen[stream] = true
				}
				answered <- nil
			}()
			for len(burst) > 0 {
				cut := min(len(burst), 1+rng.IntN(120))
				if _, err := c.c.Write(burst[:cut]); err != nil {
					t.Fatal(err)
				}
				burst = burst[cut:]
				if rng.IntN(8) == 0 {
					time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
				}
			}
			if err := <-answered; err != nil {
				t.Fatal(err)
			}
			_, ranUp := up.count()
			_, ranB := b.count()
			if got := ranUp; !slices.Equal(got, want[0]) {
				t.Errorf("the first node ran %d requests, want %d in order; first difference at %d", len(got), len(want[0]), firstDifference(got, want[0]))
			}
			if got := ranB[1:]; !slices.Equal(got, want[1]) { // after the read that opened it
				t.Errorf("the other node ran %d requests, want %d in order; first difference at %d", len(got), len(want[1]), firstDifference(got, want[1]))
			}
		})
	}
}

// firstDifference returns the first index at which a and b differ.
func firstDifference(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
