// Package fakenode is a CQL server standing in for a Cassandra node in
// tests and benchmarks: it answers what drivers, cqlguard and the load
// generator ask with as little work as it can, so that a benchmark through
// cqlguard measures cqlguard.
//
// Supported: protocol v3 to v5 (v5 segments, uncompressed or LZ4), LZ4 and
// Snappy body compression on v3 and v4, TLS, the handshake with or without
// PasswordAuthenticator, OPTIONS, REGISTER and events pushed on demand,
// system.local, system.peers (the peers it is told of) and system.peers_v2
// (refused, as Cassandra 3 does, unless asked for), the system_schema tables
// drivers and cqlguard read, describing one user table, keyspace.table (k
// bigint PRIMARY KEY, v blob), USE, PREPARE, EXECUTE, QUERY and BATCH. Every
// SELECT on the user table returns the same rows; a SELECT on another table
// returns none; every write succeeds with a void result. It can reject every
// n-th request with ScyllaDB's rate-limit error or Config_error, to exercise
// clients' counting of rejections, and it can stall or drop a connection on
// a chosen query, as a slow or dying node would.
//
// Not supported: storage, paging, tracing, warnings.
//
// Answers are encoded once per protocol version and compression and sent
// by copying them into one output buffer per connection, which is written
// when no more requests are waiting: past the handshake, a connection's
// request loop allocates nothing.
package fakenode

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/datastax/go-cassandra-native-protocol/datatype"
	pframe "github.com/datastax/go-cassandra-native-protocol/frame"
	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"

	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/schema"
)

// Options configure a Node. The zero value serves bench.kv rows of 64
// bytes, without authentication, peers or TLS.
type Options struct {
	// Keyspace and Table name the one user table (default bench.kv).
	Keyspace, Table string
	// RowBytes is the size of the v value in each row a SELECT returns
	// (default 64); Rows is how many rows it returns (default 1).
	RowBytes, Rows int
	// Username and Password, when Username is set, make the node ask for
	// PasswordAuthenticator credentials.
	Username, Password string
	// RateLimitError advertises SCYLLA_RATE_LIMIT_ERROR; connections that
	// opt in get that error, code 0xF000, when rejected.
	RateLimitError bool
	// RejectEvery, when positive, rejects every n-th read of the user table
	// or write of each connection, with the rate-limit error for
	// connections that opted in and Config_error for the others.
	RejectEvery int
	// MaxVersion is the highest protocol version spoken (default 5);
	// frames of higher versions get a protocol error, as Cassandra sends.
	MaxVersion uint8
	// Supported are SUPPORTED options added to the node's own.
	Supported map[string][]string
	// Peers are the addresses (IPs) system.peers reports.
	Peers []string
	// PeersV2 serves system.peers_v2, as Cassandra 4 and later do; without
	// it the table is refused, as Cassandra 3 refuses it.
	PeersV2 bool
	// SlowQuery makes queries containing it wait SlowFor before answering.
	SlowQuery string
	SlowFor   time.Duration
	// ResetQuery makes a query containing it close the connection, as a
	// node that dies would, with the query and what follows unanswered.
	ResetQuery string
	// TLS, when set, makes the node accept TLS connections only.
	TLS *tls.Config
	// Shards, when above 1, makes the node advertise ScyllaDB's sharding
	// of that many shards (biased-token-round-robin, ignore_msb 12,
	// Murmur3Partitioner) and serve each connection by one of them.
	Shards int
	// ShardAwarePort, with Shards, also listens on a shard-aware port and
	// advertises it: SCYLLA_SHARD_AWARE_PORT, or SCYLLA_SHARD_AWARE_PORT_SSL
	// with TLS.
	ShardAwarePort bool
	// RecordServed records each request on the user table (Served).
	RecordServed bool
}

// IgnoreMSB is the SCYLLA_SHARDING_IGNORE_MSB a node with shards
// advertises, ScyllaDB's default.
const IgnoreMSB = 12

// Served is a request on the user table as the node served it.
type Served struct {
	// Shard is the shard of the connection the request came on.
	Shard int
	// Key is the request's partition key k, serialized (a bigint's 8
	// bytes), bound or written as an integer literal; nil when the request
	// names no one key. Token is its Murmur3Partitioner token.
	Key   []byte
	Token int64
}

// RateLimitErrorCode is ScyllaDB's rate-limit error code, as advertised.
const RateLimitErrorCode = 0xF000

// Startup is a STARTUP the node received.
type Startup struct {
	Version uint8
	Options map[string]string
}

// Node is a running fake node.
type Node struct {
	opts Options
	ln   net.Listener
	// shardLn is the shard-aware port's listener, nil without one.
	shardLn net.Listener
	tables  map[string]*table
	// The user table's names and the queries that stall or drop a
	// connection, as the request path compares them.
	keyspace, table, slow, reset []byte
	// The answers of the request path, encoded once.
	// supported is SUPPORTED as each shard's connections get it.
	supported                                        []*answer
	ready, authenticate, authSuccess, badCredentials *answer
	void, rejectConfig, rejectRead, rejectWrite      *answer
	rows                                             [2]*answer // by skip_metadata
	prepared                                         atomic.Pointer[map[string]*statement]
	requests                                         atomic.Uint64
	delay                                            atomic.Int64 // SetDelay's, in nanoseconds
	slowRequests                                     atomic.Uint64
	batches                                          atomic.Uint64 // run, not refused

	mu       sync.Mutex // guards what follows and writers of prepared
	cold     map[string]*answer
	conns    map[*conn]struct{}
	startups []Startup
	shardOf  []int // open connections per shard
	served   []Served
	closed   bool
	wg       sync.WaitGroup
}

// statement is a prepared statement's EXECUTE answers.
type statement struct {
	result [2]*answer // by skip_metadata
	user   bool       // on the user table: may be rejected
	write  bool
	// keyMarker is the index of the marker that binds the user table's
	// partition key, -1 if none does; key is the key when the statement
	// writes it as a literal.
	keyMarker int
	key       []byte
}

// Start listens on addr (host:port; port 0 picks one) and serves until
// Close.
func Start(addr string, opts Options) (*Node, error) {
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
		return nil, fmt.Errorf("fakenode: max version %d is not 3, 4 or 5", opts.MaxVersion)
	}
	if opts.Shards < 1 {
		opts.Shards = 1
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("fakenode: %w", err)
	}
	tcp := ln.Addr().(*net.TCPAddr)
	n := &Node{
		opts:     opts,
		ln:       ln,
		tables:   systemTables(tcp.IP, tcp.Port, opts),
		keyspace: []byte(opts.Keyspace),
		table:    []byte(opts.Table),
		cold:     map[string]*answer{},
		conns:    map[*conn]struct{}{},
		shardOf:  make([]int, opts.Shards),
	}
	if opts.Shards > 1 && opts.ShardAwarePort {
		// On the node's host, as ScyllaDB's shard-aware port is.
		if n.shardLn, err = net.Listen("tcp", net.JoinHostPort(tcp.IP.String(), "0")); err != nil {
			ln.Close()
			return nil, fmt.Errorf("fakenode: shard-aware port: %w", err)
		}
	}
	if opts.SlowQuery != "" {
		n.slow = []byte(opts.SlowQuery)
	}
	if opts.ResetQuery != "" {
		n.reset = []byte(opts.ResetQuery)
	}
	if opts.TLS != nil {
		n.ln = tls.NewListener(ln, opts.TLS)
		if n.shardLn != nil {
			n.shardLn = tls.NewListener(n.shardLn, opts.TLS)
		}
	}
	if err := n.encodeAnswers(); err != nil {
		ln.Close()
		if n.shardLn != nil {
			n.shardLn.Close()
		}
		return nil, err
	}
	n.prepared.Store(&map[string]*statement{})
	n.wg.Add(1)
	go n.accept(n.ln, false)
	if n.shardLn != nil {
		n.wg.Add(1)
		go n.accept(n.shardLn, true)
	}
	return n, nil
}

// ShardAwareAddr is the address of the node's shard-aware port, "" when
// it has none.
func (n *Node) ShardAwareAddr() string {
	if n.shardLn == nil {
		return ""
	}
	return n.shardLn.Addr().String()
}

// Served returns the requests on the user table the node served, in the
// order each shard served them, when Options.RecordServed is set.
func (n *Node) Served() []Served {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.served)
}

// Conns returns how many connections each shard serves.
func (n *Node) Conns() []int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.shardOf)
}

// DropShard closes every connection shard serves, as a shard that fails
// would, with what is in flight on them unanswered.
func (n *Node) DropShard(shard int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for c := range n.conns {
		if c.shard == shard {
			c.nc.Close()
		}
	}
}

// Addr is the address the node listens on.
func (n *Node) Addr() string { return n.ln.Addr().String() }

// SetDelay makes every QUERY, EXECUTE and BATCH wait d before it is
// answered, one after another on each connection, as on a slow node; 0
// ends it.
func (n *Node) SetDelay(d time.Duration) { n.delay.Store(int64(d)) }

// Requests is how many requests the node has answered.
func (n *Node) Requests() uint64 { return n.requests.Load() }

// Batches returns how many BATCHes the node ran: those it answered
// Unprepared for are not counted.
func (n *Node) Batches() uint64 { return n.batches.Load() }

// SlowRequests is how many queries containing Options.SlowQuery the
// node has received. Unlike Requests, it counts a query when it arrives,
// so a test can count them without racing the handshakes' answers.
func (n *Node) SlowRequests() uint64 { return n.slowRequests.Load() }

// Startups returns every STARTUP the node received, in order.
func (n *Node) Startups() []Startup {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Startup(nil), n.startups...)
}

// ForgetPrepared forgets every statement prepared on the node, as a node
// that restarted while connections to it survived, or whose cache evicted
// them, does: an EXECUTE or BATCH of one is answered Unprepared until it is
// prepared again.
func (n *Node) ForgetPrepared() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.prepared.Store(&map[string]*statement{})
	// The PREPARE answers remembered must not skip preparing again.
	for key := range n.cold {
		if strings.HasPrefix(key, preparedKey) {
			delete(n.cold, key)
		}
	}
}

// Close stops the node and closes its connections.
func (n *Node) Close() {
	n.ln.Close()
	if n.shardLn != nil {
		n.shardLn.Close()
	}
	n.mu.Lock()
	n.closed = true
	for c := range n.conns {
		c.nc.Close()
	}
	n.mu.Unlock()
	n.wg.Wait()
}

// PushEvent sends ev to every connection that registered for events,
// uncompressed, in the connection's protocol version.
func (n *Node) PushEvent(ev message.Message) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for c := range n.conns {
		if !c.registered.Load() {
			continue
		}
		var b bytes.Buffer
		v := primitive.ProtocolVersion(c.version.Load())
		if err := codec.EncodeFrame(pframe.NewFrame(v, -1, ev), &b); err != nil {
			panic(fmt.Sprintf("fakenode: encoding %v: %v", ev, err))
		}
		c.write(b.Bytes())
	}
}

// accept serves the connections of ln, the shard-aware port's if
// shardAware.
func (n *Node) accept(ln net.Listener, shardAware bool) {
	defer n.wg.Done()
	for {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		c := newConn(n, nc)
		n.mu.Lock()
		if n.closed {
			n.mu.Unlock()
			nc.Close()
			return
		}
		if shardAware {
			c.shard = nc.RemoteAddr().(*net.TCPAddr).Port % n.opts.Shards
		} else {
			c.shard = leastLoaded(n.shardOf)
		}
		n.shardOf[c.shard]++
		n.conns[c] = struct{}{}
		n.mu.Unlock()
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			c.serve()
			nc.Close()
			n.mu.Lock()
			delete(n.conns, c)
			n.shardOf[c.shard]--
			n.mu.Unlock()
		}()
	}
}

// leastLoaded returns the shard with the fewest connections, the lowest
// of those.
func leastLoaded(conns []int) int {
	best := 0
	for i, n := range conns {
		if n < conns[best] {
			best = i
		}
	}
	return best
}

// record notes that the connection's shard served a request on the user
// table for the partition key key, nil if unknown.
func (c *conn) record(key []byte) {
	s := Served{Shard: c.shard}
	if key != nil {
		s.Key, s.Token = slices.Clone(key), schema.Token(key)
	}
	c.n.mu.Lock()
	c.n.served = append(c.n.served, s)
	c.n.mu.Unlock()
}

func (n *Node) encodeAnswers() error {
	supported := map[string][]string{
		"CQL_VERSION": {"3.4.7"}, "COMPRESSION": {"lz4", "snappy"},
		"PROTOCOL_VERSIONS": {"3/v3", "4/v4", "5/v5"},
	}
	if n.opts.RateLimitError {
		supported["SCYLLA_RATE_LIMIT_ERROR"] = []string{fmt.Sprintf("ERROR_CODE=%d", RateLimitErrorCode)}
	}
	if n.opts.Shards > 1 {
		supported["SCYLLA_NR_SHARDS"] = []string{strconv.Itoa(n.opts.Shards)}
		supported["SCYLLA_SHARDING_ALGORITHM"] = []string{"biased-token-round-robin"}
		supported["SCYLLA_SHARDING_IGNORE_MSB"] = []string{strconv.Itoa(IgnoreMSB)}
		supported["SCYLLA_PARTITIONER"] = []string{"org.apache.cassandra.dht.Murmur3Partitioner"}
		if n.shardLn != nil {
			key := "SCYLLA_SHARD_AWARE_PORT"
			if n.opts.TLS != nil {
				key += "_SSL"
			}
			supported[key] = []string{strconv.Itoa(n.shardLn.Addr().(*net.TCPAddr).Port)}
		}
	}
	for k, vs := range n.opts.Supported {
		supported[k] = vs
	}
	n.supported = make([]*answer, n.opts.Shards)
	for shard := range n.supported {
		opts := maps.Clone(supported)
		if n.opts.Shards > 1 {
			opts["SCYLLA_SHARD"] = []string{strconv.Itoa(shard)}
		}
		a, err := messageAnswer(same(&message.Supported{Options: opts}))
		if err != nil {
			return err
		}
		n.supported[shard] = a
	}
	var err error
	n.ready = mustAnswer(same(&message.Ready{}))
	n.authenticate = mustAnswer(same(&message.Authenticate{Authenticator: "org.apache.cassandra.auth.PasswordAuthenticator"}))
	n.authSuccess = mustAnswer(same(&message.AuthSuccess{}))
	n.badCredentials = mustAnswer(same(&message.AuthenticationError{ErrorMessage: "Provided username and/or password are incorrect"}))
	n.void = mustAnswer(same(&message.VoidResult{}))
	table := n.opts.Keyspace + "." + n.opts.Table
	n.rejectConfig = newAnswer(frame.OpError, func(uint8) []byte {
		return rateLimitBody(frame.ErrCodeConfig, "read", table, false)
	})
	n.rejectRead = newAnswer(frame.OpError, func(uint8) []byte { return rateLimitBody(RateLimitErrorCode, "read", table, true) })
	n.rejectWrite = newAnswer(frame.OpError, func(uint8) []byte { return rateLimitBody(RateLimitErrorCode, "write", table, true) })
	value := make([]byte, n.opts.RowBytes)
	fillText(value)
	for skip := range 2 {
		n.rows[skip], err = messageAnswer(same(n.userRows(skip == 1, value)))
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
func (n *Node) userRows(skipMetadata bool, value []byte) *message.RowsResult {
	md := &message.RowsMetadata{ColumnCount: 1}
	if !skipMetadata {
		md.Columns = []*message.ColumnMetadata{{Keyspace: n.opts.Keyspace, Table: n.opts.Table, Name: "v", Type: datatype.Blob}}
	}
	data := message.RowSet{}
	for range n.opts.Rows {
		data = append(data, message.Row{value})
	}
	return &message.RowsResult{Metadata: md, Data: data}
}
