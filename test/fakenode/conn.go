package fakenode

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/datastax/go-cassandra-native-protocol/primitive"

	"github.com/cqlguard/cqlguard/cql"
	"github.com/cqlguard/cqlguard/frame"
)

// maxPending is how many bytes of answers a connection gathers before it
// writes them even though more requests wait.
const maxPending = 64 << 10

// errReset ends a connection on Options.ResetQuery.
var errReset = errors.New("fakenode: reset query")

// conn is one client connection, served by one goroutine; PushEvent
// writes to it from others.
type conn struct {
	n        *Node
	rec      cql.Recognizer
	nc       net.Conn
	br       *bufio.Reader
	r        *frame.Reader
	dec      frame.Decompressor
	comp     frame.Compression
	out      []byte // answers not yet written, as frames
	pending  uint64 // answers in out
	optIn    bool   // asked for the rate-limit error
	keyspace []byte // set by USE
	count    int    // requests on the user table, for RejectEvery
	shard    int    // the shard serving the connection

	version    atomic.Uint32 // of the STARTUP, for events
	registered atomic.Bool

	// wmu guards writes to nc and what follows once the connection is
	// registered.
	wmu  sync.Mutex
	segs *frame.SegmentWriter // v5 after the handshake
	seg  []byte               // out as segments
}

func newConn(n *Node, nc net.Conn) *conn {
	return &conn{n: n, nc: nc, br: bufio.NewReaderSize(nc, 64<<10)}
}

func (c *conn) serve() {
	c.r = frame.NewReader(c.br, frame.MaxBodySize)
	maxVersion := c.n.opts.MaxVersion
	for {
		f, h, err := c.r.Next()
		if err != nil {
			var uv *frame.UnsupportedVersionError
			if errors.As(err, &uv) {
				c.write(frame.AppendError(nil, maxVersion, 0, frame.ErrCodeProtocol, uv.Error()))
			}
			return
		}
		if h.Version > maxVersion {
			// As Cassandra does, on stream 0: the frame cannot be trusted.
			msg := fmt.Sprintf("Invalid or unsupported protocol version (%d); highest supported version is %d", h.Version, maxVersion)
			c.out = frame.AppendError(c.out, maxVersion, 0, frame.ErrCodeProtocol, msg)
			if c.flush() != nil {
				return
			}
			continue
		}
		if err := c.handle(f, h); err != nil {
			// What was answered before goes out, as from a node that
			// closes the connection.
			c.flush()
			return
		}
		c.pending++
		if c.r.Buffered() == 0 || len(c.out) >= maxPending {
			if c.flush() != nil {
				return
			}
		}
	}
}

// flush writes the gathered answers.
func (c *conn) flush() error {
	if len(c.out) == 0 {
		return nil
	}
	// Only a connection registered for events is written to by others:
	// the connections of a benchmark's load take no lock.
	registered := c.registered.Load()
	if registered {
		c.wmu.Lock()
	}
	// Counted before they are answered: a client that has its answer
	// finds its request counted.
	c.n.requests.Add(c.pending)
	c.pending = 0
	b := c.out
	if c.segs != nil {
		c.seg = c.segs.AppendFrames(c.seg[:0], c.out)
		b = c.seg
	}
	_, err := c.nc.Write(b)
	if registered {
		c.wmu.Unlock()
	}
	c.out = c.out[:0]
	return err
}

// write writes frames f at once, in segments once the connection uses
// them; it is for the frames off the request path.
func (c *conn) write(f []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.segs != nil {
		f = c.segs.AppendFrames(nil, f)
	}
	c.nc.Write(f)
}

// reply appends answer a on stream, in the connection's version and
// compression.
func (c *conn) reply(a *answer, h frame.Header) {
	c.out = appendAnswer(c.out, a.frame(h.Version, c.comp), h.Stream)
}

// replyPlain appends answer a uncompressed, as handshake answers go.
func (c *conn) replyPlain(a *answer, h frame.Header) {
	c.out = appendAnswer(c.out, a.frame(h.Version, frame.CompressionNone), h.Stream)
}

// handle answers one request. It returns an error only when the
// connection must close.
func (c *conn) handle(f []byte, h frame.Header) error {
	body := f[frame.HeaderSize:]
	if h.Compressed() {
		var err error
		if body, err = c.dec.Body(c.comp, body, frame.MaxBodySize); err != nil {
			c.protocolError(h, err.Error())
			return nil
		}
	}
	if h.Flags&frame.FlagCustomPayload != 0 {
		n, ok := frame.BytesMapLen(body)
		if !ok {
			c.protocolError(h, "bad custom payload")
			return nil
		}
		body = body[n:]
	}
	if d := c.n.delay.Load(); d > 0 && (h.Opcode == frame.OpExecute || h.Opcode == frame.OpQuery || h.Opcode == frame.OpBatch) {
		// A slow node: each connection's requests wait in turn.
		if err := c.flush(); err != nil {
			return err
		}
		time.Sleep(time.Duration(d))
	}
	switch h.Opcode {
	case frame.OpExecute:
		c.execute(body, h)
	case frame.OpQuery:
		return c.query(body, h)
	case frame.OpBatch:
		c.batch(body, h)
	case frame.OpOptions:
		c.replyPlain(c.n.supported[c.shard], h)
	case frame.OpStartup:
		return c.startup(body, h)
	case frame.OpAuthResponse:
		c.authResponse(body, h)
	case frame.OpRegister:
		c.registered.Store(true)
		c.replyPlain(c.n.ready, h)
	case frame.OpPrepare:
		q, err := frame.QueryString(body)
		if err != nil {
			c.protocolError(h, "bad PREPARE: "+err.Error())
			return nil
		}
		c.reply(c.n.prepare(q), h)
	default:
		c.protocolError(h, "unexpected "+h.Opcode.String())
	}
	return nil
}

func (c *conn) protocolError(h frame.Header, msg string) {
	c.out = frame.AppendError(c.out, h.Version, h.Stream, frame.ErrCodeProtocol, "fakenode: "+msg)
}

func (c *conn) startup(body []byte, h frame.Header) error {
	opts, err := primitive.ReadStringMap(bytes.NewReader(body))
	if err != nil {
		c.protocolError(h, "bad STARTUP: "+err.Error())
		return nil
	}
	comp, err := frame.ParseCompression(opts["COMPRESSION"])
	if err != nil {
		c.protocolError(h, err.Error())
		return nil
	}
	c.comp = comp
	c.version.Store(uint32(h.Version))
	c.n.mu.Lock()
	c.n.startups = append(c.n.startups, Startup{Version: h.Version, Options: opts})
	c.n.mu.Unlock()
	_, c.optIn = opts["SCYLLA_RATE_LIMIT_ERROR"]
	c.optIn = c.optIn && c.n.opts.RateLimitError
	if c.n.opts.Username != "" {
		c.replyPlain(c.n.authenticate, h)
	} else {
		c.replyPlain(c.n.ready, h)
	}
	if h.Version >= 5 {
		// READY and AUTHENTICATE are the last frames outside segments.
		if err := c.flush(); err != nil {
			return err
		}
		lz4 := comp == frame.CompressionLZ4
		c.wmu.Lock()
		c.segs = frame.NewSegmentWriter(lz4)
		c.wmu.Unlock()
		c.r.UseSegments(lz4)
	}
	return nil
}

func (c *conn) authResponse(body []byte, h frame.Header) {
	want := "\x00" + c.n.opts.Username + "\x00" + c.n.opts.Password
	if len(body) >= 4 && string(body[4:]) == want {
		c.replyPlain(c.n.authSuccess, h)
		return
	}
	c.replyPlain(c.n.badCredentials, h)
}

// reject counts a request on the user table and says whether to reject it.
func (c *conn) reject() bool {
	if c.n.opts.RejectEvery <= 0 {
		return false
	}
	c.count++
	return c.count%c.n.opts.RejectEvery == 0
}

func (c *conn) rejection(write bool) *answer {
	switch {
	case !c.optIn:
		return c.n.rejectConfig
	case write:
		return c.n.rejectWrite
	}
	return c.n.rejectRead
}

// skipMetadata reads the skip_metadata flag of the query parameters at p.
func skipMetadata(p []byte, v uint8) bool {
	if len(p) < 3 {
		return false
	}
	flags := uint32(p[2])
	if v >= 5 && len(p) >= 6 {
		flags = binary.BigEndian.Uint32(p[2:6])
	}
	return flags&0x02 != 0
}

func (c *conn) execute(body []byte, h frame.Header) {
	id, err := frame.PreparedID(body)
	if err != nil {
		c.protocolError(h, "bad EXECUTE")
		return
	}
	st := (*c.n.prepared.Load())[string(id)]
	if st == nil {
		c.unprepared(h, id)
		return
	}
	rest := body[2+len(id):]
	if h.Version >= 5 && len(rest) >= 2 { // result metadata id
		rest = rest[min(len(rest), 2+int(binary.BigEndian.Uint16(rest))):]
	}
	if st.user && c.n.opts.RecordServed {
		key := st.key
		if st.keyMarker >= 0 {
			key = boundValue(rest, h.Version, st.keyMarker)
		}
		c.record(key)
	}
	if st.user && c.reject() {
		c.reply(c.rejection(st.write), h)
		return
	}
	skip := 0
	if skipMetadata(rest, h.Version) {
		skip = 1
	}
	c.reply(st.result[skip], h)
}

// unprepared answers the request of header h with the Unprepared error for
// the statement id, as a node that does not hold it does.
func (c *conn) unprepared(h frame.Header, id []byte) {
	const msg = "fakenode: unknown prepared statement"
	start := len(c.out)
	c.out = frame.AppendHeader(c.out, frame.Header{Version: h.Version, Response: true, Stream: h.Stream, Opcode: frame.OpError})
	c.out = binary.BigEndian.AppendUint32(c.out, uint32(frame.ErrCodeUnprepared))
	c.out = binary.BigEndian.AppendUint16(c.out, uint16(len(msg)))
	c.out = append(c.out, msg...)
	c.out = binary.BigEndian.AppendUint16(c.out, uint16(len(id)))
	c.out = append(c.out, id...)
	frame.SetLength(c.out[start:])
}

// batch answers a BATCH: Unprepared for the first prepared statement it
// runs that the node does not hold, else as a write.
func (c *conn) batch(body []byte, h frame.Header) {
	b, err := frame.ParseBatch(body, h.Version)
	if err != nil {
		c.protocolError(h, "bad BATCH: "+err.Error())
		return
	}
	known := *c.n.prepared.Load()
	for {
		st, ok := b.Next()
		if !ok {
			break
		}
		if st.Prepared && known[string(st.ID)] == nil {
			c.unprepared(h, st.ID)
			return
		}
	}
	c.n.batches.Add(1)
	if c.reject() {
		c.reply(c.rejection(true), h)
	} else {
		c.reply(c.n.void, h)
	}
}

func (c *conn) query(body []byte, h frame.Header) error {
	q, err := frame.QueryString(body)
	if err != nil {
		c.protocolError(h, "bad QUERY")
		return nil
	}
	if c.n.reset != nil && bytes.Contains(q, c.n.reset) {
		return errReset
	}
	if c.n.slow != nil && bytes.Contains(q, c.n.slow) {
		c.n.slowRequests.Add(1)
		if err := c.flush(); err != nil {
			return err
		}
		time.Sleep(c.n.opts.SlowFor)
	}
	t := bytes.TrimLeft(q, " \t\r\n")
	switch {
	case hasPrefixFold(t, "select"):
		c.rec.Recognize(t)
		ks, table, ok := c.rec.From()
		if len(ks) == 0 {
			ks = c.keyspace
		}
		if !ok || !c.n.userTable(ks, table) {
			break
		}
		if c.n.opts.RecordServed {
			c.recordQuery(t, body[4+len(q):], h.Version)
		}
		if c.reject() {
			c.reply(c.rejection(false), h)
			return nil
		}
		skip := 0
		if skipMetadata(body[4+len(q):], h.Version) {
			skip = 1
		}
		c.reply(c.n.rows[skip], h)
		return nil
	case hasPrefixFold(t, "insert"), hasPrefixFold(t, "update"), hasPrefixFold(t, "delete"), hasPrefixFold(t, "begin"):
		if c.n.opts.RecordServed && !hasPrefixFold(t, "begin") {
			c.recordQuery(t, body[4+len(q):], h.Version)
		}
		if c.reject() {
			c.reply(c.rejection(true), h)
			return nil
		}
		c.reply(c.n.void, h)
		return nil
	case hasPrefixFold(t, "use"):
		var rec cql.Recognizer
		if st := rec.Recognize(t); st.Kind == cql.StmtUse {
			c.keyspace = append(c.keyspace[:0], st.Keyspace...)
		}
	}
	c.reply(c.n.coldAnswer(string(q), c.keyspace), h)
	return nil
}

// userTable says whether keyspace.table names the user table.
func (n *Node) userTable(keyspace, table []byte) bool {
	return bytes.EqualFold(keyspace, n.keyspace) && bytes.EqualFold(table, n.table)
}

func hasPrefixFold(b []byte, p string) bool {
	return len(b) >= len(p) && strings.EqualFold(string(b[:len(p)]), p)
}

// recordQuery records QUERY q, of parameters params in version v, if it
// is on the user table.
func (c *conn) recordQuery(q, params []byte, v uint8) {
	var rec cql.Recognizer
	st := rec.Recognize(q)
	ks := st.Keyspace
	if len(ks) == 0 {
		ks = c.keyspace
	}
	if !c.n.userTable(ks, st.Table) {
		return
	}
	marker, key := keyOf(st)
	if marker >= 0 {
		key = boundValue(params, v, marker)
	}
	c.record(key)
}

// keyOf returns where statement st gives the user table's partition key
// k: the index of its marker, or -1 and its value when it is an integer
// literal, or -1 and nil when it names no one key.
func keyOf(st *cql.Statement) (marker int, key []byte) {
	for _, r := range st.Restrictions {
		if !strings.EqualFold(string(r.Column), "k") || len(r.Terms) != 1 {
			continue
		}
		switch t := r.Terms[0]; t.Kind {
		case cql.TermPositional:
			return t.Index, nil
		case cql.TermLiteral:
			if k, err := strconv.ParseInt(string(t.Text), 10, 64); err == nil {
				return -1, binary.BigEndian.AppendUint64(nil, uint64(k))
			}
		}
	}
	return -1, nil
}

// boundValue returns the i-th value bound in the query parameters p of a
// QUERY or EXECUTE of version v (from the consistency on), nil when there
// is none or it is null.
func boundValue(p []byte, v uint8, i int) []byte {
	if len(p) < 3 {
		return nil
	}
	flags, off := uint32(p[2]), 3
	if v >= 5 {
		if len(p) < 6 {
			return nil
		}
		flags, off = binary.BigEndian.Uint32(p[2:6]), 6
	}
	const withValues, withNames = 0x01, 0x40
	if flags&withValues == 0 || len(p) < off+2 {
		return nil
	}
	n := int(binary.BigEndian.Uint16(p[off:]))
	off += 2
	for j := range n {
		if flags&withNames != 0 {
			if len(p) < off+2 {
				return nil
			}
			off += 2 + int(binary.BigEndian.Uint16(p[off:]))
		}
		if len(p) < off+4 {
			return nil
		}
		size := int(int32(binary.BigEndian.Uint32(p[off:])))
		off += 4
		if size < 0 {
			size = 0
			if j == i {
				return nil
			}
		}
		if len(p) < off+size {
			return nil
		}
		if j == i {
			return p[off : off+size]
		}
		off += size
	}
	return nil
}
