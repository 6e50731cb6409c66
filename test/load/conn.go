package load

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/datastax/go-cassandra-native-protocol/primitive"

	"github.com/cqlguard/cqlguard/frame"
)

// Error codes a loader counts as rejections rather than failures: the
// rate-limit error (ScyllaDB's code, or whatever code the server
// advertised) and Config_error, which cqlguard sends drivers that did not
// opt in.
const (
	codeRateLimit = 0xF000
	codeConfig    = 0x2300
)

// maxPending is how many bytes of requests a connection gathers before it
// writes them even though more streams are free.
const maxPending = 64 << 10

// connStats are one connection's counts since the reporter last took them.
type connStats struct {
	attempted atomic.Uint64

	mu                          sync.Mutex
	succeeded, rejected, failed uint64
	// lat holds every answer's latency, okLat the succeeded requests'
	// alone, which refusals answered at once would otherwise hide.
	lat, okLat *Latencies
}

func newConnStats() *connStats { return &connStats{lat: NewLatencies(), okLat: NewLatencies()} }

// outcome of one request.
type outcome uint8

const (
	succeeded outcome = iota
	rejected
	failed
)

func (s *connStats) record(o outcome, d time.Duration) {
	s.mu.Lock()
	switch o {
	case succeeded:
		s.succeeded++
		s.okLat.Record(d)
	case rejected:
		s.rejected++
	default:
		s.failed++
	}
	s.lat.Record(d)
	s.mu.Unlock()
}

// addFailed counts n requests that will never be answered.
func (s *connStats) addFailed(n uint64) {
	s.mu.Lock()
	s.failed += n
	s.mu.Unlock()
}

// conn is one connection of a loader. One writer goroutine sends requests
// on the free stream ids, gathering them into one write while more ids are
// free; one reader goroutine takes the answers and frees their ids.
type conn struct {
	spec  *Spec
	stats *connStats
	nc    net.Conn
	r     *frame.Reader
	segs  *frame.SegmentWriter // v5, after the handshake
	comp  frame.Compression
	z     frame.Compressor
	dec   frame.Decompressor
	out   []byte // requests not yet written, as frames
	seg   []byte // out as segments
	// scratch holds a body before compression.
	scratch []byte
	epoch   time.Time

	rateLimitCode int32 // the rate-limit error code the server advertised

	// The request: an EXECUTE body with the key at keyAt, or a QUERY's
	// text around the key and the parameters after the text.
	op          frame.Opcode
	body        []byte
	keyAt       int
	text, after []byte
	textTail    []byte

	sent  []atomic.Int64 // by stream: when the request was sent (or due), 0 when free
	free  chan int16
	keys  keyGen
	timer *time.Timer
}

// dial connects, performs the handshake and prepares the statement.
func dial(spec *Spec, stats *connStats, seed uint64) (*conn, error) {
	c, err := connect(spec, stats, seed)
	if err != nil {
		return nil, err
	}
	c.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := c.prepareRequest(); err != nil {
		c.nc.Close()
		return nil, fmt.Errorf("%s: %w", spec.Addr, err)
	}
	c.nc.SetDeadline(time.Time{})
	return c, nil
}

// connect connects and performs the handshake.
func connect(spec *Spec, stats *connStats, seed uint64) (*conn, error) {
	nc, err := net.DialTimeout("tcp", spec.Addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c := &conn{
		spec:          spec,
		stats:         stats,
		nc:            nc,
		r:             frame.NewReader(bufio.NewReaderSize(nc, 64<<10), frame.MaxBodySize),
		epoch:         time.Now(),
		rateLimitCode: codeRateLimit,
		sent:          make([]atomic.Int64, spec.Concurrency),
		free:          make(chan int16, spec.Concurrency),
		keys:          newKeyGen(spec, seed),
	}
	for i := range spec.Concurrency {
		c.free <- int16(i)
	}
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := c.handshake(); err != nil {
		nc.Close()
		return nil, fmt.Errorf("%s: %w", spec.Addr, err)
	}
	nc.SetDeadline(time.Time{})
	return c, nil
}

// roundTrip sends one request on stream 0 and returns the answer's body,
// decompressed and past any tracing id, warnings and custom payload.
func (c *conn) roundTrip(op frame.Opcode, body []byte) (frame.Header, []byte, error) {
	c.out = frame.AppendHeader(c.out[:0], frame.Header{Version: c.spec.Version, Opcode: op, Length: len(body)})
	c.out = append(c.out, body...)
	if err := c.flush(); err != nil {
		return frame.Header{}, nil, err
	}
	for {
		f, h, err := c.r.Next()
		if err != nil {
			return h, nil, err
		}
		if h.Stream != 0 {
			continue // an event
		}
		b, err := c.responseBody(f, h)
		if err != nil {
			return h, nil, err
		}
		if h.Opcode == frame.OpError {
			return h, b, serverError(b)
		}
		return h, b, nil
	}
}

// query runs one CQL statement on stream 0, for set-up.
func (c *conn) query(q string) error {
	body := binary.BigEndian.AppendUint32(nil, uint32(len(q)))
	body = append(body, q...)
	body = binary.BigEndian.AppendUint16(body, c.spec.Consistency)
	body = appendFlags(body, c.spec.Version, 0)
	if _, _, err := c.roundTrip(frame.OpQuery, body); err != nil {
		return fmt.Errorf("%s: %w", q, err)
	}
	return nil
}

// CreateSchema creates the keyspace (SimpleStrategy, the replication
// factor given) and the table (k bigint PRIMARY KEY, v blob) that spec's
// workload uses, unless they exist.
func CreateSchema(spec Spec, replication int) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	c, err := connect(&spec, newConnStats(), 1)
	if err != nil {
		return err
	}
	defer c.nc.Close()
	c.nc.SetDeadline(time.Now().Add(time.Minute))
	ks := fmt.Sprintf("CREATE KEYSPACE IF NOT EXISTS %s WITH replication = {'class': 'SimpleStrategy', 'replication_factor': %d}",
		spec.Keyspace, replication)
	table := fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s.%s (k bigint PRIMARY KEY, v blob)", spec.Keyspace, spec.Table)
	if err := c.query(ks); err != nil {
		return err
	}
	return c.query(table)
}

// serverError describes an ERROR body.
func serverError(b []byte) error {
	if len(b) < 6 {
		return errors.New("server error (short body)")
	}
	code := binary.BigEndian.Uint32(b)
	n := int(binary.BigEndian.Uint16(b[4:]))
	msg := b[6:min(len(b), 6+n)]
	return fmt.Errorf("server error %#x: %s", code, msg)
}

var errShortBody = errors.New("response body ends inside its warnings")

func (c *conn) responseBody(f []byte, h frame.Header) ([]byte, error) {
	b := f[frame.HeaderSize:]
	if h.Compressed() {
		var err error
		if b, err = c.dec.Body(c.comp, b, frame.MaxBodySize); err != nil {
			return nil, err
		}
	}
	if h.Flags&frame.FlagTracing != 0 && len(b) >= 16 {
		b = b[16:]
	}
	if h.Flags&frame.FlagWarning != 0 {
		if len(b) < 2 {
			return nil, errShortBody
		}
		n := int(binary.BigEndian.Uint16(b))
		b = b[2:]
		for range n {
			if len(b) < 2 || len(b) < 2+int(binary.BigEndian.Uint16(b)) {
				return nil, errShortBody
			}
			b = b[2+int(binary.BigEndian.Uint16(b)):]
		}
	}
	if h.Flags&frame.FlagCustomPayload != 0 {
		if n, ok := frame.BytesMapLen(b); ok {
			b = b[n:]
		}
	}
	return b, nil
}

func (c *conn) handshake() error {
	v := c.spec.Version
	h, b, err := c.roundTrip(frame.OpOptions, nil)
	if err != nil {
		return fmt.Errorf("OPTIONS in v%d: %w", v, err)
	}
	if h.Opcode != frame.OpSupported {
		return fmt.Errorf("OPTIONS answered with %s", h.Opcode)
	}
	supported, err := primitive.ReadStringMultiMap(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("SUPPORTED: %w", err)
	}
	opts := map[string]string{"CQL_VERSION": "3.0.0", "DRIVER_NAME": "cqlguard-bench"}
	if c.spec.App != "" {
		opts["APPLICATION_NAME"] = c.spec.App
	}
	switch c.spec.Compression {
	case frame.CompressionLZ4:
		opts["COMPRESSION"] = "lz4"
	case frame.CompressionSnappy:
		opts["COMPRESSION"] = "snappy"
	}
	if vals, ok := supported["SCYLLA_RATE_LIMIT_ERROR"]; ok && c.spec.OptIn {
		opts["SCYLLA_RATE_LIMIT_ERROR"] = ""
		for _, val := range vals {
			if code, ok := strings.CutPrefix(val, "ERROR_CODE="); ok {
				if n, err := strconv.ParseInt(code, 10, 32); err == nil {
					c.rateLimitCode = int32(n)
				}
			}
		}
	}
	var sb bytes.Buffer
	primitive.WriteStringMap(opts, &sb)
	h, _, err = c.roundTrip(frame.OpStartup, sb.Bytes())
	if err != nil {
		return fmt.Errorf("STARTUP: %w", err)
	}
	c.comp = c.spec.Compression
	if v >= 5 {
		lz4 := c.comp == frame.CompressionLZ4
		c.r.UseSegments(lz4)
		c.segs = frame.NewSegmentWriter(lz4)
	}
	switch h.Opcode {
	case frame.OpReady:
	case frame.OpAuthenticate:
		token := "\x00" + c.spec.Username + "\x00" + c.spec.Password
		body := binary.BigEndian.AppendUint32(nil, uint32(len(token)))
		body = append(body, token...)
		if h, _, err = c.roundTrip(frame.OpAuthResponse, body); err != nil {
			return fmt.Errorf("authentication: %w", err)
		}
		if h.Opcode != frame.OpAuthSuccess {
			return fmt.Errorf("authentication answered with %s", h.Opcode)
		}
	default:
		return fmt.Errorf("STARTUP answered with %s", h.Opcode)
	}
	return nil
}

// prepareRequest builds the request template, preparing the statement in
// Execute mode.
func (c *conn) prepareRequest() error {
	s := c.spec
	v := s.Version
	value := make([]byte, s.ValueBytes)
	fillText(value, c.keys.rng)
	if s.Mode == Query {
		c.op = frame.OpQuery
		stmt := s.statement()
		i := strings.IndexByte(stmt, '?')
		c.text = []byte(stmt[:i])
		tail := stmt[i+1:]
		if s.Op == Write {
			// (k, v) VALUES (?, ?): the key, then the value as a blob literal.
			tail = ", 0x" + hex.EncodeToString(value) + ")"
		}
		c.textTail = []byte(tail)
		c.after = binary.BigEndian.AppendUint16(nil, s.Consistency)
		c.after = appendFlags(c.after, v, 0)
		return nil
	}
	q := s.statement()
	body := binary.BigEndian.AppendUint32(nil, uint32(len(q)))
	body = append(body, q...)
	if v >= 5 {
		body = binary.BigEndian.AppendUint32(body, 0) // PREPARE flags
	}
	h, b, err := c.roundTrip(frame.OpPrepare, body)
	if err != nil {
		return fmt.Errorf("PREPARE %s: %w", q, err)
	}
	if h.Opcode != frame.OpResult {
		return fmt.Errorf("PREPARE answered with %s", h.Opcode)
	}
	p, err := frame.ParsePrepared(b, v)
	if err != nil {
		return fmt.Errorf("PREPARE %s: %w", q, err)
	}
	c.op = frame.OpExecute
	c.body = binary.BigEndian.AppendUint16(nil, uint16(len(p.ID)))
	c.body = append(c.body, p.ID...)
	if v >= 5 {
		c.body = binary.BigEndian.AppendUint16(c.body, uint16(len(p.ResultMetadataID)))
		c.body = append(c.body, p.ResultMetadataID...)
	}
	c.body = binary.BigEndian.AppendUint16(c.body, s.Consistency)
	// Values, and skip_metadata as drivers do once they hold the result
	// metadata from the PREPARE.
	c.body = appendFlags(c.body, v, 0x01|0x02)
	n := uint16(1)
	if s.Op == Write {
		n = 2
	}
	c.body = binary.BigEndian.AppendUint16(c.body, n)
	c.body = binary.BigEndian.AppendUint32(c.body, 8)
	c.keyAt = len(c.body)
	c.body = binary.BigEndian.AppendUint64(c.body, 0)
	if s.Op == Write {
		c.body = binary.BigEndian.AppendUint32(c.body, uint32(len(value)))
		c.body = append(c.body, value...)
	}
	return nil
}

// appendFlags appends query flags: a byte before v5, an int from v5 on.
func appendFlags(b []byte, v uint8, flags uint32) []byte {
	if v >= 5 {
		return binary.BigEndian.AppendUint32(b, flags)
	}
	return append(b, byte(flags))
}

// fillText fills b with random hexadecimal text, which compresses by
// about half, like much real data.
func fillText(b []byte, rng *rand.Rand) {
	const digits = "0123456789abcdef"
	for i := range b {
		b[i] = digits[rng.IntN(16)]
	}
}

// appendBody appends the request body for key.
func (c *conn) appendBody(dst []byte, key int64) []byte {
	if c.op == frame.OpExecute {
		n := len(dst)
		dst = append(dst, c.body...)
		binary.BigEndian.PutUint64(dst[n+c.keyAt:], uint64(key))
		return dst
	}
	n := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = append(dst, c.text...)
	dst = strconv.AppendInt(dst, key, 10)
	dst = append(dst, c.textTail...)
	binary.BigEndian.PutUint32(dst[n:], uint32(len(dst)-n-4))
	return append(dst, c.after...)
}

// appendRequest appends the whole request frame for key on stream.
func (c *conn) appendRequest(stream int16, key int64) {
	start := len(c.out)
	h := frame.Header{Version: c.spec.Version, Stream: stream, Opcode: c.op}
	if c.comp == frame.CompressionNone || c.spec.Version >= 5 {
		c.out = frame.AppendHeader(c.out, h)
		c.out = c.appendBody(c.out, key)
	} else {
		h.Flags = frame.FlagCompression
		c.out = frame.AppendHeader(c.out, h)
		c.scratch = c.appendBody(c.scratch[:0], key)
		c.out = c.z.AppendBody(c.out, c.comp, c.scratch)
	}
	frame.SetLength(c.out[start:])
}

// flush writes the gathered requests.
func (c *conn) flush() error {
	if len(c.out) == 0 {
		return nil
	}
	b := c.out
	if c.segs != nil {
		c.seg = c.segs.AppendFrames(c.seg[:0], c.out)
		b = c.seg
	}
	_, err := c.nc.Write(b)
	c.out = c.out[:0]
	return err
}

// now is the time since the connection opened, in nanoseconds, never 0
// (0 marks a free stream).
func (c *conn) now() int64 { return int64(time.Since(c.epoch)) + 1 }

// errReaderDone ends a writer whose connection's reader has stopped.
var errReaderDone = errors.New("connection closed")

// writeLoop sends requests until stop is closed, the reader ends (dead is
// closed) or a write fails. With an interval, the connection's i-th
// request is due at first + i*interval whether or not earlier ones were
// late; a request that waited for a free stream has its latency counted
// from when it was due, so that a server stall is not hidden by the
// requests it kept from being sent.
func (c *conn) writeLoop(stop, dead <-chan struct{}, first time.Time, interval time.Duration) error {
	paced := interval > 0
	next := int64(first.Sub(c.epoch)) + 1
	for {
		var s int16
		waited := false // for a free stream: the server was behind
		select {
		case s = <-c.free:
		default:
			if err := c.flush(); err != nil {
				return err
			}
			select {
			case s = <-c.free:
				waited = true
			case <-stop:
				return nil
			case <-dead:
				return errReaderDone
			}
		}
		at := c.now()
		if paced {
			if next > at {
				if err := c.flush(); err != nil {
					return err
				}
				if err := c.sleep(time.Duration(next-at), stop, dead); err != nil {
					c.free <- s
					if err == errStopped {
						return nil
					}
					return err
				}
				at = c.now()
			} else if waited {
				// Due while every stream was busy: the wait is the
				// server's, and counts in the request's latency.
				at = next
			}
			// Otherwise the request is sent when the writer gets to it:
			// lateness of the writer's own timer (a millisecond or so) is
			// not the server's.
			next += int64(interval)
		} else {
			select {
			case <-stop:
				c.free <- s
				return c.flush()
			default:
			}
		}
		c.sent[s].Store(at)
		c.appendRequest(s, c.keys.next())
		c.stats.attempted.Add(1)
		if len(c.out) >= maxPending {
			if err := c.flush(); err != nil {
				return err
			}
		}
	}
}

var errStopped = errors.New("stopped")

// sleep waits d, or until stop (errStopped) or dead (errReaderDone).
func (c *conn) sleep(d time.Duration, stop, dead <-chan struct{}) error {
	if c.timer == nil {
		c.timer = time.NewTimer(d)
	} else {
		c.timer.Reset(d)
	}
	select {
	case <-c.timer.C:
		return nil
	case <-stop:
		c.timer.Stop()
		return errStopped
	case <-dead:
		c.timer.Stop()
		return errReaderDone
	}
}

// readLoop takes answers until the connection fails or closes.
func (c *conn) readLoop() error {
	for {
		f, h, err := c.r.Next()
		if err != nil {
			return err
		}
		if h.Stream < 0 || int(h.Stream) >= len(c.sent) {
			continue // an event, or not ours
		}
		at := c.sent[h.Stream].Swap(0)
		if at == 0 {
			continue // not in flight
		}
		o := succeeded
		if h.Opcode != frame.OpResult {
			o = c.classifyError(f, h)
		}
		c.stats.record(o, time.Duration(c.now()-at))
		c.free <- h.Stream
	}
}

// classifyError tells a rejection from a failure.
func (c *conn) classifyError(f []byte, h frame.Header) outcome {
	if h.Opcode != frame.OpError {
		return failed
	}
	b, err := c.responseBody(f, h)
	if err != nil || len(b) < 4 {
		return failed
	}
	switch code := int32(binary.BigEndian.Uint32(b)); code {
	case c.rateLimitCode, codeRateLimit, codeConfig:
		return rejected
	}
	return failed
}

// inflight is how many requests wait for an answer.
func (c *conn) inflight() int { return cap(c.free) - len(c.free) }

// keyGen draws partition keys.
type keyGen struct {
	rng       *rand.Rand
	dist      Dist
	keys, hot uint64
	hotFrac   float64
	zipf      *rand.Zipf
}

func newKeyGen(s *Spec, seed uint64) keyGen {
	g := keyGen{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), dist: s.Dist, keys: s.Keys,
		hot: s.HotKeys, hotFrac: s.HotFraction}
	if s.Dist == Zipf {
		g.zipf = rand.NewZipf(g.rng, s.ZipfS, 1, s.Keys-1)
	}
	return g
}

func (g *keyGen) next() int64 {
	switch g.dist {
	case Hot:
		if g.rng.Float64() < g.hotFrac {
			return int64(g.rng.Uint64N(g.hot))
		}
	case Zipf:
		return int64(g.zipf.Uint64())
	}
	return int64(g.rng.Uint64N(g.keys))
}
