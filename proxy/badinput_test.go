package proxy

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

// logLines collects a proxy's log, one JSON object a line.
type logLines struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is the whole log so far.
func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// of returns the lines logged for the connection from client.
func (l *logLines) of(t *testing.T, client string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for line := range bytes.Lines(l.b.Bytes()) {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["client"] == client {
			out = append(out, m)
		}
	}
	return out
}

// badInputProxy is a proxy whose log and metrics a test reads.
type badInputProxy struct {
	p    *Proxy
	reg  *prometheus.Registry
	addr string
}

// startBadInputProxy runs a proxy on listen in front of upstream, with a
// small max_frame_bytes and a short frame_timeout, logging into log; edit,
// if not nil, changes its configuration further, and opts apply after a
// schema of no table.
func startBadInputProxy(t *testing.T, log *logLines, listen, upstream string, edit func(*config.Config), opts ...Option) *badInputProxy {
	t.Helper()
	cfg := config.Default()
	cfg.Admin.Listen = ""
	cfg.Listen, cfg.Upstreams = listen, []string{upstream}
	cfg.MaxFrameBytes = 1024
	cfg.FrameTimeout = config.Duration(200 * time.Millisecond)
	cfg.DialTimeout = config.Duration(time.Second)
	if edit != nil {
		edit(&cfg)
	}
	reg := prometheus.NewRegistry()
	p, addr := serveProxy(t, cfg, zerolog.New(log), reg, append([]Option{WithSchema(staticSchema{})}, opts...)...)
	return &badInputProxy{p: p, reg: reg, addr: addr}
}

// reasons returns cqlguard_protocol_errors_total by reason.
func (b *badInputProxy) reasons(t *testing.T) map[string]float64 {
	t.Helper()
	mfs, err := b.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "cqlguard_protocol_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// clientAnswer is an answer read from the proxy: for an ERROR, its code and
// message.
type clientAnswer struct {
	stream int16
	opcode frame.Opcode
	code   int32
	msg    string
}

func (r clientAnswer) String() string {
	if r.opcode == frame.OpError {
		return fmt.Sprintf("ERROR %#x %q on stream %d", r.code, r.msg, r.stream)
	}
	return fmt.Sprintf("%s on stream %d", r.opcode, r.stream)
}

// badClient is a raw connection to a proxy that writes whatever bytes a
// test gives it.
type badClient struct {
	t    *testing.T
	c    net.Conn
	br   *bufio.Reader
	r    *frame.Reader
	segs *frame.SegmentWriter // set once the connection uses v5 segments
}

// dialBad connects to addr and, unless v is 0, completes a STARTUP in
// protocol v with opts.
func dialBad(t *testing.T, addr string, v uint8, opts map[string]string) *badClient {
	t.Helper()
	return badOn(t, rawConn(t, addr), v, opts)
}

// badOn is dialBad on a connection the test has opened.
func badOn(t *testing.T, c net.Conn, v uint8, opts map[string]string) *badClient {
	t.Helper()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	br := bufio.NewReader(c)
	bc := &badClient{t: t, c: c, br: br, r: frame.NewReader(br, 1<<20)}
	if v == 0 {
		return bc
	}
	all := map[string]string{"CQL_VERSION": "3.0.0"}
	maps.Copy(all, opts)
	bc.write(msgFrame(t, v, 0, &message.Startup{Options: all}))
	if r, err := bc.next(); err != nil || r.opcode != frame.OpReady {
		t.Fatalf("STARTUP v%d: %v %v", v, r, err)
	}
	if v >= 5 {
		lz4 := strings.EqualFold(opts["COMPRESSION"], "lz4")
		bc.r.UseSegments(lz4)
		bc.segs = frame.NewSegmentWriter(lz4)
	}
	return bc
}

// msgFrame encodes msg as a frame of version v on stream.
func msgFrame(t testing.TB, v uint8, stream int16, msg message.Message) []byte {
	body := encodeBody(t, primitive.ProtocolVersion(v), msg)
	return append(frame.AppendHeader(nil, frame.Header{Version: v, Stream: stream, Opcode: frame.Opcode(msg.GetOpCode()), Length: len(body)}), body...)
}

// rawFrame is a frame of version v with a body given as it is; its length
// field says n.
func rawFrame(v uint8, stream int16, op frame.Opcode, n int, body ...byte) []byte {
	return append(frame.AppendHeader(nil, frame.Header{Version: v, Stream: stream, Opcode: op, Length: n}), body...)
}

func (c *badClient) write(b []byte) {
	c.t.Helper()
	if _, err := c.c.Write(b); err != nil {
		c.t.Fatalf("writing to the proxy: %v", err)
	}
}

// wire returns frames as the connection carries them: in segments once it
// uses them.
func (c *badClient) wire(frames []byte) []byte {
	if c.segs != nil {
		return c.segs.AppendFrames(nil, frames)
	}
	return frames
}

// next reads the next answer. It also reads the 8-byte header of versions
// 1 and 2, in which the proxy refuses them.
func (c *badClient) next() (clientAnswer, error) {
	f, h, err := c.r.Next()
	if version := (*frame.UnsupportedVersionError)(nil); errors.As(err, &version) && version.Version < 3 {
		var b [8]byte
		if _, err := io.ReadFull(c.br, b[:]); err != nil {
			return clientAnswer{}, err
		}
		body := make([]byte, binary.BigEndian.Uint32(b[4:]))
		if _, err := io.ReadFull(c.br, body); err != nil {
			return clientAnswer{}, err
		}
		r := clientAnswer{stream: int16(int8(b[2])), opcode: frame.Opcode(b[3])}
		if b[0]&0x80 == 0 {
			return r, fmt.Errorf("answer % x has no response bit", b)
		}
		r.code, r.msg = errorBody(body)
		return r, nil
	}
	if err != nil {
		return clientAnswer{}, err
	}
	if !h.Response {
		return clientAnswer{}, fmt.Errorf("answer %v has no response bit", h)
	}
	r := clientAnswer{stream: h.Stream, opcode: h.Opcode}
	if h.Opcode == frame.OpError {
		r.code, r.msg = errorBody(f[frame.HeaderSize:])
	}
	return r, nil
}

func errorBody(b []byte) (int32, string) {
	if len(b) < 6 || len(b) < 6+int(binary.BigEndian.Uint16(b[4:])) {
		return -1, fmt.Sprintf("short ERROR body % x", b)
	}
	return int32(binary.BigEndian.Uint32(b)), string(b[6 : 6+binary.BigEndian.Uint16(b[4:])])
}

// Every bad input a client can send gets an answer (a protocol error, the
// node's own answer, or the connection closed where no stream can be
// answered), one count under the reason it names, and a log line with the
// connection's id and the client's address; never a panic or a hang. The
// connection goes on where it can, and the node goes on serving others.
func TestBadInput(t *testing.T) {
	t.Parallel()
	var log logLines
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{})
	stub := startStubNode(t, "127.0.0.1:0")
	big := fakeNode(t, "127.0.0.1:0", fakenode.Options{Supported: map[string][]string{"X_PADDING": {strings.Repeat("x", 2000)}}})
	// Nothing listens on nowhere once its listener is closed.
	ln := listen(t, "127.0.0.1:0")
	nowhere := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	cert, key := newTestCA(t).issue(t, "cqlguard", 2)
	tlsFiles := config.TLSConfig{CertFile: filepath.Join(dir, "server.pem"), KeyFile: filepath.Join(dir, "server.key")}
	writeFile(t, tlsFiles.CertFile, cert)
	writeFile(t, tlsFiles.KeyFile, key)
	proxies := map[string]*badInputProxy{
		"fake": startBadInputProxy(t, &log, "127.0.0.1:0", node.Addr(), nil),
		"stub": startBadInputProxy(t, &log, "127.0.0.1:0", stub.ln.Addr().String(), nil),
		"big":  startBadInputProxy(t, &log, "127.0.0.1:0", big.Addr(), nil),
		"none": startBadInputProxy(t, &log, "127.0.0.1:0", nowhere, nil),
		"tls": startBadInputProxy(t, &log, "127.0.0.1:0", node.Addr(), func(c *config.Config) {
			c.TLS = tlsFiles
		}),
	}
	options := func(v uint8, stream int16) []byte { return rawFrame(v, stream, frame.OpOptions, 0) }
	// segment returns frames in one v5 segment, then edit applied to it.
	segment := func(frames []byte, edit func([]byte)) []byte {
		seg := frame.NewSegmentWriter(false).AppendFrames(nil, frames)
		edit(seg)
		return seg
	}
	const (
		protocolErr = frame.ErrCodeProtocol
		serverErr   = frame.ErrCodeServer
	)
	badVersion := func(v byte) []byte { return []byte{v, 0, 0, 1, byte(frame.OpOptions), 0, 0, 0, 0} }
	tests := []struct {
		name    string
		node    string            // which proxy: "fake" (default), "stub", "big", "none" or "tls"
		version uint8             // STARTUP in this version first; 0: none
		opts    map[string]string // STARTUP options
		input   func(c *badClient) []byte
		// want is the answer, nil for none; its msg is a substring.
		want *clientAnswer
		// closed: the connection is closed after the answer; stalled: after
		// frame_timeout. Otherwise a valid request is answered after it.
		closed, stalled bool
		reason          string // counted once; "" for none
		level, logged   string // the log line; "" for none at info or above
		logErr          string // substring of the log line's error
		dialErrors      float64
	}{
		{
			name: "v4 frame over max_frame_bytes", version: 4,
			input:  func(c *badClient) []byte { return rawFrame(4, 3, frame.OpQuery, 4096, make([]byte, 4096)...) },
			want:   &clientAnswer{3, frame.OpError, protocolErr, "frame body of 4096 bytes exceeds the maximum of 1024"},
			reason: "frame_too_large", level: "warn", logged: "request frame too large",
		},
		{
			name: "v5 frame over max_frame_bytes", version: 5,
			input:  func(c *badClient) []byte { return c.wire(rawFrame(5, 3, frame.OpQuery, 2000, make([]byte, 2000)...)) },
			want:   &clientAnswer{3, frame.OpError, protocolErr, "frame body of 2000 bytes exceeds the maximum of 1024"},
			reason: "frame_too_large", level: "warn", logged: "request frame too large",
		},
		{
			name:  "version 1",
			input: func(c *badClient) []byte { return badVersion(1) },
			want:  &clientAnswer{0, frame.OpError, protocolErr, "Invalid or unsupported protocol version (1)"}, closed: true,
			// Version negotiation, as drivers do it: no error.
		},
		{
			name:  "version 2",
			input: func(c *badClient) []byte { return badVersion(2) },
			want:  &clientAnswer{0, frame.OpError, protocolErr, "Invalid or unsupported protocol version (2)"}, closed: true,
			// Version negotiation, as drivers do it: no error.
		},
		{
			name:  "version 6",
			input: func(c *badClient) []byte { return badVersion(6) },
			want:  &clientAnswer{0, frame.OpError, protocolErr, "Invalid or unsupported protocol version (6)"}, closed: true,
			// Version negotiation, as drivers do it: no error.
		},
		{
			name:  "version 65 (DataStax Enterprise's, which cqlsh asks for first)",
			input: func(c *badClient) []byte { return badVersion(65) },
			want:  &clientAnswer{0, frame.OpError, protocolErr, "Invalid or unsupported protocol version (65)"}, closed: true,
			// Version negotiation, as drivers do it: no error.
		},
		{
			name:  "garbage first byte",
			input: func(c *badClient) []byte { return []byte("GET / HTTP/1.1\r\n\r\n") },
			want:  &clientAnswer{0, frame.OpError, protocolErr, "Invalid or unsupported protocol version (71)"}, closed: true,
			reason: "unsupported_version", level: "info", logged: "unsupported protocol version",
		},
		{
			name: "v4 length past what arrives, then nothing", version: 4,
			input:   func(c *badClient) []byte { return rawFrame(4, 5, frame.OpQuery, 100, make([]byte, 10)...) },
			stalled: true,
			reason:  "client_stalled", level: "info", logged: "connection ended", logErr: "frame_timeout",
		},
		{
			name: "half a header, then nothing", version: 4,
			input:   func(c *badClient) []byte { return []byte{4, 0, 0, 5} },
			stalled: true,
			reason:  "client_stalled", level: "info", logged: "connection ended", logErr: "frame_timeout",
		},
		{
			name: "v5 segment cut short, then nothing", version: 5,
			input: func(c *badClient) []byte {
				seg := c.wire(options(5, 5))
				return seg[:len(seg)-3]
			},
			stalled: true,
			reason:  "client_stalled", level: "info", logged: "connection ended", logErr: "frame_timeout",
		},
		{
			name: "v4 response bit set on a request", version: 4,
			input: func(c *badClient) []byte {
				return frame.AppendHeader(nil, frame.Header{Version: 4, Response: true, Stream: 9, Opcode: frame.OpOptions})
			},
			want:   &clientAnswer{9, frame.OpError, protocolErr, "response bit set"},
			reason: "response_from_client", level: "info", logged: "request frame with the response bit set",
		},
		{
			name: "v5 response bit set on a request", version: 5,
			input: func(c *badClient) []byte {
				return c.wire(frame.AppendHeader(nil, frame.Header{Version: 5, Response: true, Stream: 9, Opcode: frame.OpOptions}))
			},
			want:   &clientAnswer{9, frame.OpError, protocolErr, "response bit set"},
			reason: "response_from_client", level: "info", logged: "request frame with the response bit set",
		},
		{
			name: "v4 unknown opcode", version: 4,
			input:  func(c *badClient) []byte { return rawFrame(4, 11, 0x20, 0) },
			want:   &clientAnswer{11, frame.OpError, protocolErr, "fakenode: unexpected UNKNOWN"},
			reason: "unknown_opcode", level: "info", logged: "unknown opcode; forwarded",
		},
		{
			name: "v5 unknown opcode", version: 5,
			input:  func(c *badClient) []byte { return c.wire(rawFrame(5, 11, 0x04, 0)) },
			want:   &clientAnswer{11, frame.OpError, protocolErr, "fakenode: unexpected UNKNOWN"},
			reason: "unknown_opcode", level: "info", logged: "unknown opcode; forwarded",
		},
		{
			name:   "STARTUP that cannot be parsed",
			input:  func(c *badClient) []byte { return rawFrame(4, 1, frame.OpStartup, 2, 0, 5) },
			want:   &clientAnswer{1, frame.OpError, protocolErr, "reading STARTUP options"},
			reason: "bad_startup", level: "info", logged: "STARTUP refused",
		},
		{
			name: "REGISTER with a garbage body", version: 4,
			input: func(c *badClient) []byte { return rawFrame(4, 12, frame.OpRegister, 3, 0xff, 0xff, 0) },
			want:  &clientAnswer{12, frame.OpReady, 0, ""}, // the node's answer
		},
		{
			name: "QUERY with a garbage body", version: 4,
			input:  func(c *badClient) []byte { return rawFrame(4, 13, frame.OpQuery, 5, 0, 0, 0, 100, 'x') },
			want:   &clientAnswer{13, frame.OpError, protocolErr, "fakenode: bad QUERY"}, // the node's answer
			reason: "bad_request_body", level: "info", logged: "request body not understood; forwarded unclassified",
		},
		{
			name: "PREPARE with a garbage body", version: 4,
			input:  func(c *badClient) []byte { return rawFrame(4, 13, frame.OpPrepare, 3, 0, 0, 0) },
			want:   &clientAnswer{13, frame.OpError, protocolErr, "fakenode: bad PREPARE"}, // the node's answer
			reason: "bad_request_body", level: "info", logged: "request body not understood; forwarded unclassified",
		},
		{
			name: "EXECUTE with a garbage body", version: 5,
			input:  func(c *badClient) []byte { return c.wire(rawFrame(5, 13, frame.OpExecute, 1, 0xff)) },
			want:   &clientAnswer{13, frame.OpError, protocolErr, "fakenode: bad EXECUTE"}, // the node's answer
			reason: "bad_request_body", level: "info", logged: "request body not understood; forwarded unclassified",
		},
		{
			name: "BATCH with a garbage body", version: 4,
			input:  func(c *badClient) []byte { return rawFrame(4, 13, frame.OpBatch, 2, 9, 9) },
			want:   &clientAnswer{13, frame.OpError, 0x000A, "bad BATCH"}, // the node's answer
			reason: "bad_request_body", level: "info", logged: "request body not understood; forwarded unclassified",
		},
		{
			name: "v4 LZ4 body that does not decompress", node: "stub", version: 4, opts: map[string]string{"COMPRESSION": "lz4"},
			input: func(c *badClient) []byte {
				f := rawFrame(4, 14, frame.OpQuery, 12, 0, 0, 0, 50, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
				f[1] = frame.FlagCompression
				return f
			},
			want:   &clientAnswer{14, frame.OpResult, 0, ""}, // the node's answer
			reason: "bad_request_body", level: "info", logged: "request body not understood; forwarded unclassified", logErr: "does not decompress",
		},
		{
			name: "v5 segment with a bad header CRC", version: 5,
			input: func(c *badClient) []byte {
				return segment(options(5, 15), func(seg []byte) { seg[3] ^= 0xff })
			},
			closed: true,
			reason: "bad_request_frame", level: "info", logged: "connection ended", logErr: "checksum mismatch: header",
		},
		{
			name: "v5 segment with a bad payload CRC", version: 5,
			input: func(c *badClient) []byte {
				return segment(options(5, 15), func(seg []byte) { seg[len(seg)-1] ^= 0xff })
			},
			closed: true,
			reason: "bad_request_frame", level: "info", logged: "connection ended", logErr: "checksum mismatch: payload",
		},
		{
			name: "v5 frame that does not fit its segment", version: 5,
			input: func(c *badClient) []byte {
				return c.segs.AppendSegment(nil, rawFrame(5, 15, frame.OpQuery, 100, make([]byte, 10)...), true)
			},
			closed: true,
			reason: "bad_request_frame", level: "info", logged: "connection ended", logErr: "overruns its self-contained segment",
		},
		{
			name: "v4 EXECUTE of an unknown prepared id", version: 4,
			input: func(c *badClient) []byte {
				return msgFrame(c.t, 4, 16, &message.Execute{QueryId: []byte{1, 2, 3, 4}, Options: &message.QueryOptions{}})
			},
			want:   &clientAnswer{16, frame.OpError, frame.ErrCodeUnprepared, "prepare it again"},
			reason: "unprepared", level: "info", logged: "statement not prepared through the proxy",
		},
		{
			name: "v5 EXECUTE of an unknown prepared id", version: 5,
			input: func(c *badClient) []byte {
				return c.wire(msgFrame(c.t, 5, 16, &message.Execute{QueryId: []byte{1, 2, 3, 4}, ResultMetadataId: []byte{5}, Options: &message.QueryOptions{}}))
			},
			want:   &clientAnswer{16, frame.OpError, frame.ErrCodeUnprepared, "prepare it again"},
			reason: "unprepared", level: "info", logged: "statement not prepared through the proxy",
		},
		{
			name: "garbage CQL in a QUERY", version: 4,
			input: func(c *badClient) []byte {
				return msgFrame(c.t, 4, 17, &message.Query{Query: "SELEKT ,,, FROM ((( '", Options: &message.QueryOptions{}})
			},
			want: &clientAnswer{17, frame.OpResult, 0, ""}, // the node's answer
		},
		{
			name: "response over max_frame_bytes", node: "big", version: 4,
			input:  func(c *badClient) []byte { return options(4, 18) },
			want:   &clientAnswer{18, frame.OpError, serverErr, "cqlguard: response frame body of"},
			reason: "response_too_large", level: "warn", logged: "response frame too large",
		},
		{
			// The proxy rewrites system.local's rows: a body it cannot
			// read cannot be forwarded as it is.
			name: "system.local rows that cannot be read", node: "stub", version: 4,
			input: func(c *badClient) []byte {
				return msgFrame(t, 4, 20, &message.Query{Query: "SELECT * FROM system.local WHERE key = 'badrows'"})
			},
			want:   &clientAnswer{20, frame.OpError, serverErr, "cqlguard: "},
			reason: "bad_response", level: "warn", logged: "cannot rewrite response",
		},
		{
			name: "no upstream node reachable", node: "none",
			input: func(c *badClient) []byte { return options(4, 19) },
			want:  &clientAnswer{19, frame.OpError, serverErr, "no upstream node reachable: dialing upstream " + nowhere}, closed: true,
			level: "error", logged: "no upstream node reachable", logErr: nowhere,
			dialErrors: 1,
		},
		{
			name: "plain CQL to a TLS listener", node: "tls",
			input:  func(c *badClient) []byte { return options(4, 20) },
			closed: true,
			reason: "tls_handshake", level: "info", logged: "connection refused", logErr: "first record does not look like a TLS handshake",
		},
		{
			name: "TLS listener, no handshake", node: "tls",
			input:   func(c *badClient) []byte { return nil },
			stalled: true,
			reason:  "tls_handshake", level: "info", logged: "connection refused", logErr: "tls handshake: context deadline exceeded",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := cmp.Or(tt.node, "fake")
			p := proxies[node]
			// A valid request and its answer: the node with large SUPPORTED
			// options answers OPTIONS over max_frame_bytes.
			valid, validAnswer := options, frame.OpSupported
			if node == "big" {
				valid = func(v uint8, stream int16) []byte {
					return msgFrame(t, v, stream, &message.Query{Query: "SELECT v FROM ks.t", Options: &message.QueryOptions{}})
				}
				validAnswer = frame.OpResult
			}
			before, dials := p.reasons(t), testutil.ToFloat64(p.p.metrics.upstreamDialErr)

			c := dialBad(t, p.addr, tt.version, tt.opts)
			start := time.Now()
			c.write(tt.input(c))
			if tt.want != nil {
				r, err := c.next()
				if err != nil || r.stream != tt.want.stream || r.opcode != tt.want.opcode || r.code != tt.want.code || !strings.Contains(r.msg, tt.want.msg) {
					t.Fatalf("answered %v (%v), want %v", r, err, *tt.want)
				}
			}
			if tt.closed || tt.stalled || tt.want == nil {
				r, err := c.next()
				if ne := net.Error(nil); err == nil || errors.As(err, &ne) && ne.Timeout() {
					t.Fatalf("connection not closed: %v %v", r, err)
				}
				took := time.Since(start)
				if tt.stalled && (took < 200*time.Millisecond || took > 2*time.Second) {
					t.Errorf("closed after %v, frame_timeout is 200ms", took)
				}
			} else {
				c.write(c.wire(valid(cmp.Or(tt.version, 4), 100)))
				if r, err := c.next(); err != nil || r.stream != 100 || r.opcode != validAnswer {
					t.Fatalf("the connection does not go on: %v %v", r, err)
				}
			}

			// One count under the reason, none under any other.
			want := maps.Clone(before)
			if tt.reason != "" {
				want[tt.reason]++
			}
			var got map[string]float64
			for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				if got = p.reasons(t); maps.Equal(got, want) || time.Now().After(deadline) {
					break
				}
			}
			if !maps.Equal(got, want) {
				t.Errorf("cqlguard_protocol_errors_total went from %v to %v, want %v", before, got, want)
			}
			// The proxy's health checks dial too, every 2 s: with no node,
			// one of them may fail meanwhile.
			if n := testutil.ToFloat64(p.p.metrics.upstreamDialErr) - dials; n < tt.dialErrors || tt.dialErrors == 0 && n != 0 {
				t.Errorf("%v upstream dial errors counted, want %v", n, tt.dialErrors)
			}

			// The log line, with the connection's id and the client's address.
			client := c.c.LocalAddr().String()
			var line map[string]any
			for deadline := time.Now().Add(2 * time.Second); tt.logged != ""; time.Sleep(10 * time.Millisecond) {
				for _, l := range log.of(t, client) {
					if msg, _ := l["message"].(string); strings.Contains(msg, tt.logged) {
						line = l
					}
				}
				if line != nil || time.Now().After(deadline) {
					break
				}
			}
			switch {
			case tt.logged == "":
				for _, l := range log.of(t, client) {
					if l["level"] != "debug" {
						t.Errorf("logged %v, want nothing at info or above", l)
					}
				}
			case line == nil:
				t.Errorf("no log line %q for %s; logged %v", tt.logged, client, log.of(t, client))
			default:
				if errMsg, _ := line["error"].(string); line["level"] != tt.level || !strings.Contains(errMsg, tt.logErr) {
					t.Errorf("logged %v, want %s %q with error %q", line, tt.level, tt.logged, tt.logErr)
				}
				if id, ok := line["conn"].(float64); !ok || id < 1 {
					t.Errorf("log line %v has no connection id", line)
				}
			}

			// The node still serves other clients.
			if node == "none" || node == "tls" {
				return
			}
			other := dialBad(t, p.addr, 4, nil)
			other.write(valid(4, 1))
			if r, err := other.next(); err != nil || r.stream != 1 || r.opcode != validAnswer {
				t.Fatalf("another client: %v %v", r, err)
			}
			other.c.Close()
		})
	}
}
