// Package fakeupstream is a CQL server made for benchmarks: it answers what
// drivers, cqlguard and the load generator ask with as little work as it
// can, so that a benchmark through cqlguard measures cqlguard.
//
// Supported: protocol v3 to v5 (v5 segments, uncompressed or LZ4), LZ4 and
// Snappy body compression on v3 and v4, the handshake with or without
// PasswordAuthenticator, OPTIONS, REGISTER (acknowledged; no event is ever
// pushed), system.local, system.peers and system.peers_v2 (one node, no
// peers), the system_schema tables drivers and cqlguard read, describing
// one user table, keyspace.table (k bigint PRIMARY KEY, v blob), USE,
// PREPARE, EXECUTE, QUERY and BATCH. Every SELECT on a user table returns
// the same rows; every write succeeds with a void result. It can reject
// every n-th request with ScyllaDB's rate-limit error or Config_error, to
// exercise clients' counting of rejections.
//
// Not supported: storage, paging, tracing, warnings, events.
//
// Answers are encoded once per protocol version and compression and sent
// by copying them into one output buffer per connection, which is written
// when no more requests are waiting: past the handshake, a connection's
// request loop allocates nothing.
package fakeupstream

import (
	"bufio"
	"bytes"
	"crypto/md5"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/datastax/go-cassandra-native-protocol/datatype"
	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"

	"github.com/cqlguard/cqlguard/cql"
	"github.com/cqlguard/cqlguard/frame"
)

// Options configure a Server. The zero value serves bench.kv rows of 64
// bytes, without authentication.
type Options struct {
	// Keyspace and Table name the one user table (default bench.kv).
	Keyspace, Table string
	// RowBytes is the size of the v value in each row a SELECT returns
	// (default 64); Rows is how many rows it returns (default 1).
	RowBytes, Rows int
	// Username and Password, when Username is set, make the server ask for
	// PasswordAuthenticator credentials.
	Username, Password string
	// RateLimitError advertises SCYLLA_RATE_LIMIT_ERROR; connections that
	// opt in get that error, code 0xF000, when rejected.
	RateLimitError bool
	// RejectEvery, when positive, rejects every n-th request on the user
	// table of each connection, with the rate-limit error for connections
	// that opted in and Config_error for the others.
	RejectEvery int
	// MaxVersion is the highest protocol version spoken (default 5).
	MaxVersion uint8
	// OnStartup, when set, is called with the version and options of each
	// STARTUP, from the connection's goroutine.
	OnStartup func(version uint8, options map[string]string)
}

// RateLimitErrorCode is ScyllaDB's rate-limit error code, as advertised.
const RateLimitErrorCode = 0xF000

// maxPending is how many bytes of answers a connection gathers before it
// writes them even though more requests wait.
const maxPending = 64 << 10

// Server is a running fake upstream.
type Server struct {
	opts   Options
	ln     net.Listener
	tables map[string]*table
	// The answers of the request path, encoded once.
	supported, ready, authenticate, authSuccess, badCredentials *answer
	void, rejectConfig, rejectRead, rejectWrite                 *answer
	rows                                                        [2]*answer // by skip_metadata
	prepared                                                    atomic.Pointer[map[string]*statement]
	requests                                                    atomic.Uint64

	mu     sync.Mutex // guards what follows and writers of prepared
	cold   map[string]*answer
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// statement is a prepared statement's EXECUTE answers.
type statement struct {
	result [2]*answer // by skip_metadata
	user   bool       // on the user table: may be rejected
	write  bool
}

// Start listens on addr (host:port; port 0 picks one) and serves until
// Close.
func Start(addr string, opts Options) (*Server, error) {
	if opts.Keyspace == "" {
		opts.Keyspace = "bench"
	}
	if opts.Table == "" {
		opts.Table = "kv"
	}
	if opts.RowBytes <= 0 {
		opts.RowBytes = 64
	}
	if opts.Rows <= 0 {
		opts.Rows = 1
	}
	if opts.MaxVersion == 0 {
		opts.MaxVersion = 5
	}
	if opts.MaxVersion < 3 || opts.MaxVersion > 5 {
		return nil, fmt.Errorf("fakeupstream: max version %d is not 3, 4 or 5", opts.MaxVersion)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("fakeupstream: %w", err)
	}
	tcp := ln.Addr().(*net.TCPAddr)
	s := &Server{
		opts:   opts,
		ln:     ln,
		tables: systemTables(tcp.IP, tcp.Port, opts.Keyspace, opts.Table),
		cold:   map[string]*answer{},
		conns:  map[net.Conn]struct{}{},
	}
	if err := s.encodeAnswers(); err != nil {
		ln.Close()
		return nil, err
	}
	s.prepared.Store(&map[string]*statement{})
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Requests is how many requests the server has answered.
func (s *Server) Requests() uint64 { return s.requests.Load() }

// Close stops the server and closes its connections.
func (s *Server) Close() error {
	err := s.ln.Close()
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *Server) encodeAnswers() error {
	supported := map[string][]string{
		"CQL_VERSION": {"3.4.7"}, "COMPRESSION": {"lz4", "snappy"},
		"PROTOCOL_VERSIONS": {"3/v3", "4/v4", "5/v5"},
	}
	if s.opts.RateLimitError {
		supported["SCYLLA_RATE_LIMIT_ERROR"] = []string{fmt.Sprintf("ERROR_CODE=%d", RateLimitErrorCode)}
	}
	s.supported = mustAnswer(same(&message.Supported{Options: supported}))
	s.ready = mustAnswer(same(&message.Ready{}))
	s.authenticate = mustAnswer(same(&message.Authenticate{Authenticator: "org.apache.cassandra.auth.PasswordAuthenticator"}))
	s.authSuccess = mustAnswer(same(&message.AuthSuccess{}))
	s.badCredentials = mustAnswer(same(&message.AuthenticationError{ErrorMessage: "Provided username and/or password are incorrect"}))
	s.void = mustAnswer(same(&message.VoidResult{}))
	table := s.opts.Keyspace + "." + s.opts.Table
	s.rejectConfig = newAnswer(frame.OpError, func(uint8) []byte {
		return rateLimitBody(frame.ErrCodeConfig, "read", table, false)
	})
	s.rejectRead = newAnswer(frame.OpError, func(uint8) []byte { return rateLimitBody(RateLimitErrorCode, "read", table, true) })
	s.rejectWrite = newAnswer(frame.OpError, func(uint8) []byte { return rateLimitBody(RateLimitErrorCode, "write", table, true) })
	value := make([]byte, s.opts.RowBytes)
	fillText(value)
	for skip := range 2 {
		var err error
		s.rows[skip], err = messageAnswer(same(s.userRows(skip == 1, value)))
		if err != nil {
			return err
		}
	}
	return nil
}

// fillText fills b with random hexadecimal text, which LZ4 and Snappy
// shrink by about half, like much real data.
func fillText(b []byte) {
	rand.Read(b)
	const hex = "0123456789abcdef"
	for i := range b {
		b[i] = hex[b[i]&0xf]
	}
}

// rateLimitBody is the ERROR body of a rejection: ScyllaDB's rate-limit
// error with its operation and coordinator bytes, or Config_error with the
// same message.
func rateLimitBody(code int32, op, table string, scylla bool) []byte {
	b := errorBody(code, "Per-partition rate limit reached for "+op+" in table "+table+", rejected by coordinator")
	if scylla {
		opType := byte(0)
		if op == "write" {
			opType = 1
		}
		b = append(b, opType, 1)
	}
	return b
}

// errorBody is an ERROR body with code and message.
func errorBody(code int32, msg string) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(code))
	b = binary.BigEndian.AppendUint16(b, uint16(len(msg)))
	return append(b, msg...)
}

// userRows is the result of every SELECT on the user table.
func (s *Server) userRows(skipMetadata bool, value []byte) *message.RowsResult {
	md := &message.RowsMetadata{ColumnCount: 1}
	if !skipMetadata {
		md.Columns = []*message.ColumnMetadata{{Keyspace: s.opts.Keyspace, Table: s.opts.Table, Name: "v", Type: datatype.Blob}}
	}
	data := message.RowSet{}
	for range s.opts.Rows {
		data = append(data, message.Row{value})
	}
	return &message.RowsResult{Metadata: md, Data: data}
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return
		}
		s.conns[nc] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			c := &conn{s: s, nc: nc, br: bufio.NewReaderSize(nc, 64<<10)}
			c.serve()
			nc.Close()
			s.mu.Lock()
			delete(s.conns, nc)
			s.mu.Unlock()
		}()
	}
}

// conn is one client connection, served by one goroutine.
type conn struct {
	s        *Server
	rec      cql.Recognizer
	nc       net.Conn
	br       *bufio.Reader
	r        *frame.Reader
	dec      frame.Decompressor
	comp     frame.Compression
	segs     *frame.SegmentWriter // v5 after the handshake
	out      []byte               // answers not yet written, as frames
	seg      []byte               // out as segments
	pending  uint64               // answers in out
	optIn    bool                 // asked for the rate-limit error
	keyspace []byte               // set by USE
	n        int                  // requests on the user table, for RejectEvery
}

func (c *conn) serve() {
	c.r = frame.NewReader(c.br, frame.MaxBodySize)
	for {
		f, h, err := c.r.Next()
		if err != nil {
			var uv *frame.UnsupportedVersionError
			if errors.As(err, &uv) {
				c.nc.Write(frame.AppendError(nil, c.s.opts.MaxVersion, 0, frame.ErrCodeProtocol, uv.Error()))
			}
			return
		}
		if h.Version > c.s.opts.MaxVersion {
			// As Cassandra does, on stream 0: the frame cannot be trusted.
			msg := fmt.Sprintf("Invalid or unsupported protocol version (%d); highest supported version is %d", h.Version, c.s.opts.MaxVersion)
			c.out = frame.AppendError(c.out, c.s.opts.MaxVersion, 0, frame.ErrCodeProtocol, msg)
			if c.flush() != nil {
				return
			}
			continue
		}
		if err := c.handle(f, h); err != nil {
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
	b := c.out
	if c.segs != nil {
		c.seg = c.segs.AppendFrames(c.seg[:0], c.out)
		b = c.seg
	}
	_, err := c.nc.Write(b)
	c.out = c.out[:0]
	c.s.requests.Add(c.pending)
	c.pending = 0
	return err
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
	if h.Compressed() && h.Opcode != frame.OpBatch {
		var err error
		if body, err = c.dec.Body(c.comp, body, frame.MaxBodySize); err != nil {
			c.protocolError(h, err.Error())
			return nil
		}
	}
	if h.Flags&frame.FlagCustomPayload != 0 && h.Opcode != frame.OpBatch {
		n, ok := frame.BytesMapLen(body)
		if !ok {
			c.protocolError(h, "bad custom payload")
			return nil
		}
		body = body[n:]
	}
	switch h.Opcode {
	case frame.OpExecute:
		c.execute(body, h)
	case frame.OpQuery:
		c.query(body, h)
	case frame.OpBatch:
		if c.reject() {
			c.reply(c.rejection(true), h)
		} else {
			c.reply(c.s.void, h)
		}
	case frame.OpOptions:
		c.replyPlain(c.s.supported, h)
	case frame.OpStartup:
		return c.startup(body, h)
	case frame.OpAuthResponse:
		c.authResponse(body, h)
	case frame.OpRegister:
		c.replyPlain(c.s.ready, h)
	case frame.OpPrepare:
		q, err := frame.QueryString(body)
		if err != nil {
			c.protocolError(h, "bad PREPARE: "+err.Error())
			return nil
		}
		c.reply(c.s.prepare(q), h)
	default:
		c.protocolError(h, "unexpected "+h.Opcode.String())
	}
	return nil
}

func (c *conn) protocolError(h frame.Header, msg string) {
	c.out = frame.AppendError(c.out, h.Version, h.Stream, frame.ErrCodeProtocol, "fakeupstream: "+msg)
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
	if c.s.opts.OnStartup != nil {
		c.s.opts.OnStartup(h.Version, opts)
	}
	_, c.optIn = opts["SCYLLA_RATE_LIMIT_ERROR"]
	c.optIn = c.optIn && c.s.opts.RateLimitError
	if c.s.opts.Username != "" {
		c.replyPlain(c.s.authenticate, h)
	} else {
		c.replyPlain(c.s.ready, h)
	}
	if h.Version >= 5 {
		// READY and AUTHENTICATE are the last frames outside segments.
		if err := c.flush(); err != nil {
			return err
		}
		lz4 := comp == frame.CompressionLZ4
		c.segs = frame.NewSegmentWriter(lz4)
		c.r.UseSegments(lz4)
	}
	return nil
}

func (c *conn) authResponse(body []byte, h frame.Header) {
	want := "\x00" + c.s.opts.Username + "\x00" + c.s.opts.Password
	if len(body) >= 4 && string(body[4:]) == want {
		c.replyPlain(c.s.authSuccess, h)
		return
	}
	c.replyPlain(c.s.badCredentials, h)
}

// reject counts a request on the user table and says whether to reject it.
func (c *conn) reject() bool {
	if c.s.opts.RejectEvery <= 0 {
		return false
	}
	c.n++
	return c.n%c.s.opts.RejectEvery == 0
}

func (c *conn) rejection(write bool) *answer {
	switch {
	case !c.optIn:
		return c.s.rejectConfig
	case write:
		return c.s.rejectWrite
	}
	return c.s.rejectRead
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
	st := (*c.s.prepared.Load())[string(id)]
	if st == nil {
		const msg = "fakeupstream: unknown prepared statement"
		start := len(c.out)
		c.out = frame.AppendHeader(c.out, frame.Header{Version: h.Version, Response: true, Stream: h.Stream, Opcode: frame.OpError})
		c.out = binary.BigEndian.AppendUint32(c.out, uint32(frame.ErrCodeUnprepared))
		c.out = binary.BigEndian.AppendUint16(c.out, uint16(len(msg)))
		c.out = append(c.out, msg...)
		c.out = binary.BigEndian.AppendUint16(c.out, uint16(len(id)))
		c.out = append(c.out, id...)
		frame.SetLength(c.out[start:])
		return
	}
	if st.user && c.reject() {
		c.reply(c.rejection(st.write), h)
		return
	}
	rest := body[2+len(id):]
	if h.Version >= 5 && len(rest) >= 2 { // result metadata id
		rest = rest[min(len(rest), 2+int(binary.BigEndian.Uint16(rest))):]
	}
	skip := 0
	if skipMetadata(rest, h.Version) {
		skip = 1
	}
	c.reply(st.result[skip], h)
}

func (c *conn) query(body []byte, h frame.Header) {
	q, err := frame.QueryString(body)
	if err != nil {
		c.protocolError(h, "bad QUERY")
		return
	}
	t := bytes.TrimLeft(q, " \t\r\n")
	switch {
	case hasPrefixFold(t, "select"):
		c.rec.Recognize(t)
		ks, _, ok := c.rec.From()
		if len(ks) == 0 {
			ks = c.keyspace
		}
		if !ok || hasPrefixFold(ks, "system") {
			break
		}
		if c.reject() {
			c.reply(c.rejection(false), h)
			return
		}
		skip := 0
		if skipMetadata(body[4+len(q):], h.Version) {
			skip = 1
		}
		c.reply(c.s.rows[skip], h)
		return
	case hasPrefixFold(t, "insert"), hasPrefixFold(t, "update"), hasPrefixFold(t, "delete"), hasPrefixFold(t, "begin"):
		if c.reject() {
			c.reply(c.rejection(true), h)
			return
		}
		c.reply(c.s.void, h)
		return
	case hasPrefixFold(t, "use"):
		var rec cql.Recognizer
		if st := rec.Recognize(t); st.Kind == cql.StmtUse {
			c.keyspace = append(c.keyspace[:0], st.Keyspace...)
		}
	}
	c.reply(c.s.coldAnswer(string(q), c.keyspace), h)
}

func hasPrefixFold(b []byte, p string) bool {
	return len(b) >= len(p) && strings.EqualFold(string(b[:len(p)]), p)
}

// maxCold bounds the answers remembered for queries off the request path.
const maxCold = 10000

// coldAnswer answers a query other than a read or write of the user table:
// system tables, USE, DDL. Answers are remembered by query text.
func (s *Server) coldAnswer(q string, keyspace []byte) *answer {
	key := string(keyspace) + "\x00" + q
	s.mu.Lock()
	a := s.cold[key]
	s.mu.Unlock()
	if a != nil {
		return a
	}
	a = s.encodeCold(q, keyspace)
	s.mu.Lock()
	if len(s.cold) < maxCold {
		s.cold[key] = a
	}
	s.mu.Unlock()
	return a
}

func (s *Server) encodeCold(q string, keyspace []byte) *answer {
	var rec cql.Recognizer
	st := rec.Recognize([]byte(q))
	var msg message.Message = &message.VoidResult{}
	switch st.Kind {
	case cql.StmtUse:
		msg = &message.SetKeyspaceResult{Keyspace: string(st.Keyspace)}
	case cql.StmtSelect:
		ks := st.Keyspace
		if len(ks) == 0 {
			ks = keyspace
		}
		msg = s.selectMessage(q, strings.ToLower(string(ks)), strings.ToLower(string(st.Table)))
	}
	a, err := messageAnswer(same(msg))
	if err != nil {
		return s.serverError(err)
	}
	return a
}

// selectMessage answers a SELECT on keyspace.table.
func (s *Server) selectMessage(q, keyspace, table string) message.Message {
	if t := s.tables[keyspace+"."+table]; t != nil {
		return t.selectRows(q)
	}
	if !strings.HasPrefix(keyspace, "system") {
		value := make([]byte, s.opts.RowBytes)
		fillText(value)
		return s.userRows(false, value)
	}
	// A system table the server does not model: no rows, one text column
	// per selected name.
	md := &message.RowsMetadata{}
	for i, name := range selectedNames(q) {
		md.Columns = append(md.Columns, &message.ColumnMetadata{Keyspace: keyspace, Table: table,
			Name: name, Index: int32(i), Type: datatype.Varchar})
	}
	md.ColumnCount = int32(len(md.Columns))
	return &message.RowsResult{Metadata: md, Data: message.RowSet{}}
}

// selectedNames lists the names a SELECT selects; "key" for *.
func selectedNames(q string) []string {
	lower := strings.ToLower(q)
	i, j := strings.Index(lower, "select"), strings.Index(lower, " from ")
	if i < 0 || j < i || strings.TrimSpace(lower[i+6:j]) == "*" {
		return []string{"key"}
	}
	var names []string
	for _, n := range strings.Split(lower[i+6:j], ",") {
		names = append(names, strings.Trim(strings.TrimSpace(n), `"`))
	}
	return names
}

// prepare answers PREPARE q and remembers the statement for EXECUTE.
func (s *Server) prepare(q []byte) *answer {
	key := "\x01PREPARE\x00" + string(q)
	s.mu.Lock()
	a := s.cold[key]
	s.mu.Unlock()
	if a != nil {
		return a
	}
	sum := md5.Sum(q)
	id := sum[:]
	var rec cql.Recognizer
	st := rec.Recognize(q)
	ks, tbl := strings.ToLower(string(st.Keyspace)), strings.ToLower(string(st.Table))
	if ks == "" {
		ks = s.opts.Keyspace
	}
	user := !strings.HasPrefix(ks, "system")

	// Bound variables: k is the bigint partition key wherever a marker
	// gives it; every other marker is a blob.
	vars := &message.VariablesMetadata{Columns: []*message.ColumnMetadata{}}
	names := make([]string, st.Markers)
	for _, r := range st.Restrictions {
		for _, t := range r.Terms {
			if t.Kind == cql.TermPositional && t.Index < len(names) {
				names[t.Index] = string(r.Column)
			}
		}
	}
	for i, n := range names {
		typ := datatype.DataType(datatype.Blob)
		if n == "k" {
			typ = datatype.Bigint
			vars.PkIndices = append(vars.PkIndices, uint16(i))
		} else if n == "" {
			n = "v"
		}
		vars.Columns = append(vars.Columns, &message.ColumnMetadata{Keyspace: ks, Table: tbl, Name: n, Index: int32(i), Type: typ})
	}
	result := &message.RowsMetadata{}
	stmt := &statement{user: user, write: st.Kind != cql.StmtSelect}
	var rows [2]message.Message
	if st.Kind == cql.StmtSelect {
		value := make([]byte, s.opts.RowBytes)
		fillText(value)
		var full *message.RowsResult
		if user {
			full = s.userRows(false, value)
		} else if m, ok := s.selectMessage(string(q), ks, tbl).(*message.RowsResult); ok {
			full = m
		}
		if full != nil {
			result = full.Metadata
			skipped := *full
			md := *full.Metadata
			md.Columns = nil
			skipped.Metadata = &md
			rows = [2]message.Message{full, &skipped}
		}
	}
	for skip := range 2 {
		m := rows[skip]
		if m == nil {
			m = &message.VoidResult{}
		}
		r, err := messageAnswer(same(m))
		if err != nil {
			return s.serverError(err)
		}
		stmt.result[skip] = r
	}
	a, err := messageAnswer(func(v primitive.ProtocolVersion) message.Message {
		p := &message.PreparedResult{PreparedQueryId: id, VariablesMetadata: vars, ResultMetadata: result}
		if v >= 5 {
			p.ResultMetadataId = id[:8]
		}
		if v < 4 {
			vv := *vars
			vv.PkIndices = nil
			p.VariablesMetadata = &vv
		}
		return p
	})
	if err != nil {
		return s.serverError(err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.prepared.Load()
	next := make(map[string]*statement, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[string(id)] = stmt
	s.prepared.Store(&next)
	if len(s.cold) < maxCold {
		s.cold[key] = a
	}
	return a
}

func (s *Server) serverError(err error) *answer {
	return newAnswer(frame.OpError, func(uint8) []byte {
		return errorBody(frame.ErrCodeServer, "fakeupstream: "+err.Error())
	})
}
