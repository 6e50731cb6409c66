// Package fakenode is a small CQL server standing in for a Cassandra node in
// unit tests and benchmarks. It speaks protocol v3 to v5 (v5 segments
// included), answers the handshake, system.local, system.peers (and refuses
// system.peers_v2, as Cassandra 3 does), USE, PREPARE, EXECUTE, QUERY and
// BATCH with as little work as it can, and pushes events on demand.
//
// It is a fake: it stores nothing, and every statement it does not know
// succeeds with a void result.
package fakenode

import (
	"bufio"
	"bytes"
	"crypto/md5"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/datastax/go-cassandra-native-protocol/datatype"
	pframe "github.com/datastax/go-cassandra-native-protocol/frame"
	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"

	"github.com/cqlguard/cqlguard/cql"
	"github.com/cqlguard/cqlguard/frame"
)

// Options configure a fake node.
type Options struct {
	// Peers are the addresses system.peers reports.
	Peers []string
	// Supported are SUPPORTED options added to the node's own.
	Supported map[string][]string
	// MaxVersion is the highest protocol version the node speaks (default 5);
	// frames of higher versions get a protocol error, as Cassandra sends.
	MaxVersion uint8
	// SlowQuery makes queries containing it wait SlowFor before answering.
	SlowQuery string
	SlowFor   time.Duration
	// ResetQuery makes a query containing it close the connection, as a
	// node that dies would, with the query and what follows unanswered.
	ResetQuery string
	// TLS, when set, makes the node accept TLS connections only.
	TLS *tls.Config
}

// Node is a running fake node.
type Node struct {
	ln   net.Listener
	opts Options
	ip   net.IP

	mu       sync.Mutex
	conns    map[*conn]struct{}
	prepared map[string]string // statement id -> query
	startups []map[string]string
	wg       sync.WaitGroup
}

// Start listens on addr and serves until Close.
func Start(addr string, opts Options) (*Node, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	n := &Node{ln: ln, opts: opts, ip: ln.Addr().(*net.TCPAddr).IP.To4(),
		conns: map[*conn]struct{}{}, prepared: map[string]string{}}
	if opts.TLS != nil {
		n.ln = tls.NewListener(ln, opts.TLS)
	}
	n.wg.Add(1)
	go n.accept()
	return n, nil
}

// Addr is the node's listening address.
func (n *Node) Addr() string { return n.ln.Addr().String() }

// Close stops the node and closes its connections.
func (n *Node) Close() {
	n.ln.Close()
	n.mu.Lock()
	for c := range n.conns {
		c.nc.Close()
	}
	n.mu.Unlock()
	n.wg.Wait()
}

// Startups returns the options of every STARTUP the node received.
func (n *Node) Startups() []map[string]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]map[string]string(nil), n.startups...)
}

// PushEvent sends ev to every connection that registered for events.
func (n *Node) PushEvent(ev message.Message) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for c := range n.conns {
		if c.registered {
			c.send(pframe.NewFrame(c.version, -1, ev))
		}
	}
}

func (n *Node) accept() {
	defer n.wg.Done()
	for {
		nc, err := n.ln.Accept()
		if err != nil {
			return
		}
		c := &conn{node: n, nc: nc, br: bufio.NewReader(nc), bw: bufio.NewWriter(nc)}
		n.mu.Lock()
		n.conns[c] = struct{}{}
		n.mu.Unlock()
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			c.serve()
			nc.Close()
			n.mu.Lock()
			delete(n.conns, c)
			n.mu.Unlock()
		}()
	}
}

type conn struct {
	node *Node
	nc   net.Conn
	br   *bufio.Reader

	wmu        sync.Mutex // guards what follows: responses and pushed events
	bw         *bufio.Writer
	segs       *frame.SegmentWriter
	version    primitive.ProtocolVersion
	registered bool
	out        []byte
}

var codec = pframe.NewCodec()

// send encodes and writes one frame, flushing at once (events).
func (c *conn) send(f *pframe.Frame) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.writeLocked(f)
	c.bw.Flush()
}

func (c *conn) writeLocked(f *pframe.Frame) {
	var b bytes.Buffer
	if err := codec.EncodeFrame(f, &b); err != nil {
		panic("fakenode: encoding " + f.String() + ": " + err.Error())
	}
	c.writeRawLocked(b.Bytes())
}

func (c *conn) writeRawLocked(f []byte) {
	if c.segs != nil {
		c.out = c.segs.AppendFrames(c.out[:0], f)
		c.bw.Write(c.out)
		return
	}
	c.bw.Write(f)
}

func (c *conn) serve() {
	r := frame.NewReader(c.br, frame.MaxBodySize)
	var dec frame.Decompressor
	comp := frame.CompressionNone
	for {
		raw, h, err := r.Next()
		if err != nil {
			var uv *frame.UnsupportedVersionError
			if errors.As(err, &uv) {
				c.bw.Write(frame.AppendError(nil, 4, 0, frame.ErrCodeProtocol, uv.Error()))
				c.bw.Flush()
			}
			return
		}
		body := raw[frame.HeaderSize:]
		if h.Compressed() {
			if body, err = dec.Body(comp, body, frame.MaxBodySize); err != nil {
				return
			}
		}
		if h.Flags&frame.FlagCustomPayload != 0 {
			if n, ok := frame.BytesMapLen(body); ok {
				body = body[n:]
			}
		}
		v := primitive.ProtocolVersion(h.Version)
		if max := c.node.opts.MaxVersion; max != 0 && h.Version > max {
			msg := fmt.Sprintf("Invalid or unsupported protocol version (%d); highest supported version is %d", h.Version, max)
			c.wmu.Lock()
			// Like Cassandra, answer on stream 0: the frame cannot be trusted.
			c.writeRawLocked(frame.AppendError(nil, max, 0, frame.ErrCodeProtocol, msg))
			c.bw.Flush()
			c.wmu.Unlock()
			continue
		}
		c.wmu.Lock()
		c.version = v
		switch h.Opcode {
		case frame.OpOptions:
			opts := map[string][]string{
				"CQL_VERSION": {"3.4.7"}, "COMPRESSION": {"lz4", "snappy"},
				"PROTOCOL_VERSIONS": {"3/v3", "4/v4", "5/v5"},
			}
			for k, vs := range c.node.opts.Supported {
				opts[k] = vs
			}
			c.writeLocked(pframe.NewFrame(v, h.Stream, &message.Supported{Options: opts}))
		case frame.OpStartup:
			opts, _ := primitive.ReadStringMap(bytes.NewReader(body))
			c.node.mu.Lock()
			c.node.startups = append(c.node.startups, opts)
			c.node.mu.Unlock()
			comp, _ = frame.ParseCompression(opts["COMPRESSION"])
			c.writeLocked(pframe.NewFrame(v, h.Stream, &message.Ready{}))
			if v >= 5 {
				c.bw.Flush()
				lz4 := comp == frame.CompressionLZ4
				c.segs = frame.NewSegmentWriter(lz4)
				r.UseSegments(lz4)
			}
		case frame.OpRegister:
			c.registered = true
			c.writeLocked(pframe.NewFrame(v, h.Stream, &message.Ready{}))
		case frame.OpQuery:
			q, _ := frame.QueryString(body)
			if reset := c.node.opts.ResetQuery; reset != "" && bytes.Contains(q, []byte(reset)) {
				c.bw.Flush()
				c.wmu.Unlock()
				return
			}
			if slow := c.node.opts.SlowQuery; slow != "" && bytes.Contains(q, []byte(slow)) {
				time.Sleep(c.node.opts.SlowFor)
			}
			c.writeLocked(pframe.NewFrame(v, h.Stream, c.node.answer(string(q), v, false)))
		case frame.OpPrepare:
			q, _ := frame.QueryString(body)
			c.writeLocked(pframe.NewFrame(v, h.Stream, c.node.prepare(string(q), v)))
		case frame.OpExecute:
			c.writeLocked(pframe.NewFrame(v, h.Stream, c.node.execute(body, v)))
		case frame.OpBatch:
			c.writeRawLocked(voidResult(h))
		default:
			c.writeLocked(pframe.NewFrame(v, h.Stream, &message.ProtocolError{ErrorMessage: "fakenode: unexpected " + h.Opcode.String()}))
		}
		// Answers to pipelined requests go out together.
		if c.br.Buffered() == 0 {
			c.bw.Flush()
		}
		c.wmu.Unlock()
	}
}

// voidResult is a RESULT Void answering h, written without the codec.
func voidResult(h frame.Header) []byte {
	f := frame.AppendHeader(nil, frame.Header{Version: h.Version, Response: true, Stream: h.Stream, Opcode: frame.OpResult, Length: 4})
	return binary.BigEndian.AppendUint32(f, 1)
}

var (
	localColumns = columns("local", "key", datatype.Varchar, "broadcast_address", datatype.Inet,
		"cluster_name", datatype.Varchar, "cql_version", datatype.Varchar, "data_center", datatype.Varchar,
		"host_id", datatype.Uuid, "listen_address", datatype.Inet, "partitioner", datatype.Varchar,
		"rack", datatype.Varchar, "release_version", datatype.Varchar, "rpc_address", datatype.Inet,
		"rpc_port", datatype.Int, "schema_version", datatype.Uuid, "tokens", datatype.NewSet(datatype.Varchar))
	peerColumns = columns("peers", "peer", datatype.Inet, "data_center", datatype.Varchar,
		"host_id", datatype.Uuid, "preferred_ip", datatype.Inet, "rack", datatype.Varchar,
		"release_version", datatype.Varchar, "rpc_address", datatype.Inet,
		"schema_version", datatype.Uuid, "tokens", datatype.NewSet(datatype.Varchar))
	schemaVersion = bytes.Repeat([]byte{0x5c}, 16)
)

func columns(table string, nameTypes ...any) []*message.ColumnMetadata {
	var cols []*message.ColumnMetadata
	for i := 0; i < len(nameTypes); i += 2 {
		cols = append(cols, &message.ColumnMetadata{Keyspace: "system", Table: table,
			Name: nameTypes[i].(string), Index: int32(i / 2), Type: nameTypes[i+1].(datatype.DataType)})
	}
	return cols
}

func textSet(s string) []byte {
	b := binary.BigEndian.AppendUint32(nil, 1)
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// hostID is a node's host id, derived from its address.
func hostID(ip net.IP) []byte {
	sum := md5.Sum(ip)
	return sum[:]
}

// answer returns the result of query q; skipMetadata leaves out the columns.
func (n *Node) answer(q string, v primitive.ProtocolVersion, skipMetadata bool) message.Message {
	lower := strings.ToLower(q)
	var rec cql.Recognizer
	rec.Recognize([]byte(q))
	ks, table, ok := rec.From()
	switch {
	case strings.HasPrefix(strings.TrimSpace(lower), "use "):
		return &message.SetKeyspaceResult{Keyspace: strings.Trim(strings.TrimSpace(q[4:]), "\" ;")}
	case !ok:
		return &message.VoidResult{}
	case strings.EqualFold(string(ks), "system") && strings.EqualFold(string(table), "local"):
		row := message.Row{[]byte("local"), n.ip, []byte("fake"), []byte("3.4.7"), []byte("dc1"),
			hostID(n.ip), n.ip, []byte("org.apache.cassandra.dht.Murmur3Partitioner"), []byte("rack1"),
			[]byte("4.0.0"), n.ip, binary.BigEndian.AppendUint32(nil, 9042), schemaVersion, textSet(token(n.ip))}
		cols, data := project(q, localColumns, []message.Row{row})
		return rows(cols, skipMetadata, data...)
	case strings.EqualFold(string(ks), "system") && strings.EqualFold(string(table), "peers"):
		var data []message.Row
		for _, p := range n.opts.Peers {
			ip := net.ParseIP(p).To4()
			data = append(data, message.Row{ip, []byte("dc1"), hostID(ip), ip, []byte("rack1"), []byte("4.0.0"),
				ip, schemaVersion, textSet(token(ip))})
		}
		cols, data := project(q, peerColumns, data)
		return rows(cols, skipMetadata, data...)
	case strings.EqualFold(string(ks), "system") && strings.EqualFold(string(table), "peers_v2"):
		return &message.Invalid{ErrorMessage: "unconfigured table peers_v2"}
	}
	return rows(columns(string(table), "v", datatype.Varchar), skipMetadata)
}

// token gives each node a distinct token.
func token(ip net.IP) string {
	return [...]string{"-6000000000000000000", "-3000000000000000000", "0", "3000000000000000000"}[ip[3]%4]
}

// project keeps the columns a SELECT names (all for *).
func project(q string, cols []*message.ColumnMetadata, data []message.Row) ([]*message.ColumnMetadata, []message.Row) {
	lower := strings.ToLower(q)
	i, j := strings.Index(lower, "select"), strings.Index(lower, " from ")
	if i < 0 || j < i {
		return cols, data
	}
	list := strings.TrimSpace(lower[i+len("select") : j])
	if list == "*" {
		return cols, data
	}
	var keep []int
	for _, name := range strings.Split(list, ",") {
		name = strings.Trim(strings.TrimSpace(name), "\"")
		for k, c := range cols {
			if c.Name == name {
				keep = append(keep, k)
			}
		}
	}
	pcols := make([]*message.ColumnMetadata, len(keep))
	for k, c := range keep {
		pcols[k] = cols[c]
	}
	pdata := make([]message.Row, len(data))
	for r, row := range data {
		for _, c := range keep {
			pdata[r] = append(pdata[r], row[c])
		}
	}
	return pcols, pdata
}

func rows(cols []*message.ColumnMetadata, skipMetadata bool, data ...message.Row) *message.RowsResult {
	md := &message.RowsMetadata{ColumnCount: int32(len(cols)), Columns: cols}
	if skipMetadata {
		md.Columns = nil
	}
	if data == nil {
		data = message.RowSet{}
	}
	return &message.RowsResult{Metadata: md, Data: data}
}

func (n *Node) prepare(q string, v primitive.ProtocolVersion) message.Message {
	sum := md5.Sum([]byte(q))
	n.mu.Lock()
	n.prepared[string(sum[:])] = q
	n.mu.Unlock()
	// Every bind marker is a text value: enough for the tests that use it.
	vars := &message.VariablesMetadata{}
	for i := range strings.Count(q, "?") {
		vars.Columns = append(vars.Columns, &message.ColumnMetadata{Keyspace: "ks", Table: "t",
			Name: fmt.Sprint("v", i), Index: int32(i), Type: datatype.Varchar})
	}
	p := &message.PreparedResult{PreparedQueryId: sum[:], VariablesMetadata: vars}
	if r, ok := n.answer(q, v, false).(*message.RowsResult); ok {
		p.ResultMetadata = r.Metadata
	} else {
		p.ResultMetadata = &message.RowsMetadata{}
	}
	if v >= 5 {
		p.ResultMetadataId = sum[:8]
	}
	return p
}

// execute answers an EXECUTE body, honouring its skip_metadata flag.
func (n *Node) execute(body []byte, v primitive.ProtocolVersion) message.Message {
	id, err := frame.PreparedID(body)
	if err != nil {
		return &message.ProtocolError{ErrorMessage: "fakenode: bad EXECUTE"}
	}
	n.mu.Lock()
	q, ok := n.prepared[string(id)]
	n.mu.Unlock()
	if !ok {
		return &message.Unprepared{ErrorMessage: "fakenode: unknown statement", Id: id}
	}
	rest := body[2+len(id):]
	if v >= 5 && len(rest) >= 2 { // result metadata id
		rest = rest[2+int(binary.BigEndian.Uint16(rest)):]
	}
	skip := false
	if len(rest) >= 3 { // [consistency][flags]
		flags := uint32(rest[2])
		if v >= 5 && len(rest) >= 6 {
			flags = binary.BigEndian.Uint32(rest[2:6])
		}
		skip = flags&0x02 != 0
	}
	return n.answer(q, v, skip)
}
