package classify

// Classify reads a request frame's body: the QUERY, PREPARE, EXECUTE or
// BATCH message with package frame, each statement's text with package
// cql, and hands what it learns to the statement's classification
// (statement.go, prepared.go). It runs on the request path for every such
// frame, so it reuses the Classifier's buffers and allocates nothing in
// steady state.

import (
	"slices"

	"github.com/cqlguard/cqlguard/cql"
	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/schema"
)

// Op is the operation type a request counts as.
type Op uint8

// Operation types.
const (
	OpNone  Op = iota // neither a read nor a write: DDL, USE, unknown
	OpRead            // SELECT
	OpWrite           // INSERT, UPDATE, DELETE, BATCH
)

// String returns "read", "write" or "none".
func (o Op) String() string {
	switch o {
	case OpRead:
		return "read"
	case OpWrite:
		return "write"
	}
	return "none"
}

// Topology names the system table, if any, a SELECT reads of those drivers
// learn the cluster from, as its text names it (keyspace and all).
type Topology uint8

// The tables drivers learn the cluster from.
const (
	TopologyNone    Topology = iota // not one of them
	TopologyLocal                   // system.local
	TopologyPeers                   // system.peers
	TopologyPeersV2                 // system.peers_v2
)

// Partition is one partition a request touches.
type Partition struct {
	Table *schema.Table
	Token int64
	// Key is the serialized partition key, for display (/hot); it is the
	// classifier's, valid until its next call.
	Key []byte
}

// Classification is what a Classifier learned of a request. Its slices
// are the classifier's or the request body's, valid until its next call.
type Classification struct {
	// Keyspace and Table name the request's (first) statement's table.
	Keyspace, Table []byte
	Op              Op
	// Internal is set for the system keyspaces, which are never limited.
	Internal bool
	// Pinned is set when Partitions lists every partition the request
	// touches.
	Pinned bool
	// LWT is set for lightweight transactions (IF clauses).
	LWT bool
	// Counter is set for counter tables.
	Counter bool
	// Batch is set for a BATCH; Logged for a logged one.
	Batch, Logged bool
	// Partitions are the distinct partitions, when Pinned.
	Partitions []Partition
	// Overflow, when not nil, is a table of which the request touches
	// more partitions than the classifier's bound; Pinned is then false.
	Overflow *schema.Table

	// Use is set for a USE, run by a QUERY or an EXECUTE: the upstream's
	// answer sets the connection's keyspace.
	Use bool
	// Topology is the table drivers learn the cluster from that a QUERY
	// reads, or that a PREPARE prepares or an EXECUTE runs a read of.
	Topology Topology
	// Prepared is, for a PREPARE, what was learned of the statement from
	// its text, to be completed from the upstream's answer and recorded
	// (Registry.Learn); for an EXECUTE, the statement executed.
	Prepared *Prepared
	// BatchPrepared are the prepared statements a BATCH runs, in its
	// order, once the batch is classified whole.
	BatchPrepared []*Prepared
	// Unprepared is the id of a statement an EXECUTE or a BATCH runs that
	// the registry does not hold: the request could not be classified,
	// and the driver must prepare the statement again.
	Unprepared []byte

	// Body is the QUERY, PREPARE or EXECUTE message, decompressed and past
	// its custom payload, nil for a BATCH.
	Body []byte
	// WithoutTimeout is the length of a QUERY's or PREPARE's statement
	// without its trailing USING TIMEOUT clause, 0 when it has none.
	WithoutTimeout int
	// Consistency is a QUERY's or EXECUTE's consistency level, and
	// TimestampAt the offset in Body of its default timestamp, 0 for none.
	Consistency uint16
	TimestampAt int
}

// Env is what a request is classified against.
type Env struct {
	// Schema is the tables' partition keys.
	Schema *schema.Snapshot
	// Prepared is the statements prepared so far, which an EXECUTE or a
	// BATCH runs by id.
	Prepared *Registry
	// Keyspace is the connection's keyspace, as the upstream's answer to a
	// USE named it, nil for none.
	Keyspace []byte
	// MaxPartitions bounds the partitions a request is pinned to
	// (limits.max_partitions_per_request); 0 means 1024.
	MaxPartitions int
}

// defaultMaxPartitions is the bound on the partitions a request is pinned
// to when Env gives none.
const defaultMaxPartitions = 1024

// dedupLinear is how many partitions a request may have before the
// classifier indexes them by token rather than compare each new one with
// all before it: a request's cost stays the same per partition.
const dedupLinear = 16

// largeScratch is the size past which Release lets go of scratch space a
// request grew.
const largeScratch = 64 << 10

// pkSource says where a prepared statement's partition key component
// comes from: a bound variable, or a literal serialized at prepare time,
// kept in the statement's literals. It is small because an IN list of
// literals has one per element: a statement is kept at a few times its
// text's size, not tens of times.
type pkSource struct {
	index      int32 // bound variable index, or -1
	start, end uint32
}

// A Classifier classifies one connection's requests, one at a time. Its
// zero value is ready to use.
type Classifier struct {
	// keyspace is the connection's keyspace (Env.Keyspace).
	keyspace []byte
	// use is set when the request classified last is a USE.
	use bool
	// withoutTimeout is what the statement recognised last says of a
	// trailing USING TIMEOUT (Classification.WithoutTimeout).
	withoutTimeout int
	rec            cql.Recognizer
	key            schema.KeyBuilder
	comps          []byte   // serialized key components, back to back
	spans          [][2]int // component spans in comps, column after column
	cols           []int    // column i's spans are spans[cols[i]:cols[i+1]]
	odometer       []int
	// keys holds the partitions' keys back to back. When it grows, the
	// keys already handed out keep the old array, which nothing writes to
	// again, so they stay valid until the next request.
	keys []byte
	// seen indexes Partitions by token past dedupLinear of them: each
	// slot is an index into Partitions plus one, 0 when empty; its length
	// is a power of two, at least twice the partitions it indexes.
	seen    []int32
	indexed bool // seen indexes this request's partitions
	// maxPartitions bounds the partitions a request is pinned to
	// (Env.MaxPartitions); 0 means defaultMaxPartitions.
	maxPartitions int
	// doc and jsonScratch are INSERT JSON's document, when a literal, and
	// the space its strings are decoded in.
	doc, jsonScratch []byte
	c                Classification
}

// Classify classifies the request frame whose header is h and whose body,
// decompressed, is body: a QUERY, PREPARE, EXECUTE or BATCH, against env.
// It returns nil for any other opcode, and an error, from package frame,
// for a body that does not decode. The Classification is c's, valid until
// its next call. It allocates nothing in steady state, but for a PREPARE:
// preparing is rare.
func (c *Classifier) Classify(h frame.Header, body []byte, env *Env) (*Classification, error) {
	c.reset()
	c.keyspace = env.Keyspace
	c.maxPartitions = env.MaxPartitions
	body = skipCustomPayload(body, h)
	switch h.Opcode {
	case frame.OpQuery:
		q, err := frame.ParseQuery(body, h.Version)
		if err != nil {
			return nil, err
		}
		c.query(&q, env.Schema)
		c.c.Use, c.c.Topology = c.use, topologyOf(&c.rec)
		c.c.WithoutTimeout = c.withoutTimeout
		c.c.Body, c.c.Consistency, c.c.TimestampAt = body, q.Consistency, timestampAt(&q)
	case frame.OpPrepare:
		q, err := frame.QueryString(body)
		if err != nil {
			return nil, err
		}
		p := c.prepare(q, nil, env.Schema)
		p.preparedIn = slices.Clone(env.Keyspace)
		c.c.Keyspace, c.c.Table, c.c.Op = p.keyspace, p.tableName, p.op
		c.c.Internal, c.c.LWT, c.c.Topology, c.c.Prepared = p.internal, p.lwt, p.topology, p
		c.c.WithoutTimeout, c.c.Body = c.withoutTimeout, body
	case frame.OpExecute:
		q, err := frame.ParseExecute(body, h.Version)
		if err != nil {
			return nil, err
		}
		p := env.Prepared.get(q.ID)
		if p == nil {
			c.c.Unprepared = q.ID
			return &c.c, nil
		}
		p = env.Prepared.resolve(q.ID, p, env.Schema, c)
		c.executeInto(p, &q.Values, env.Schema, false)
		c.c.Use, c.c.Topology, c.c.Prepared = p.use, p.topology, p
		c.c.Body, c.c.Consistency, c.c.TimestampAt = body, q.Consistency, timestampAt(&q)
	case frame.OpBatch:
		b, err := frame.ParseBatch(body, h.Version)
		if err != nil {
			return nil, err
		}
		c.batch(&b, env.Prepared, env.Schema)
	default:
		return nil, nil
	}
	return &c.c, nil
}

func (c *Classifier) reset() {
	c.c = Classification{Partitions: c.c.Partitions[:0], BatchPrepared: c.c.BatchPrepared[:0]}
	c.keys = c.keys[:0]
	c.use = false
	c.indexed = false
	c.withoutTimeout = 0
}

// Release drops what c holds of the last request, which may point into its
// frame, and the scratch space a large request grew, so that an idle
// connection does not keep a large request alive.
func (c *Classifier) Release() {
	c.rec.Release()
	c.withoutTimeout = 0
	clear(c.c.Partitions[:cap(c.c.Partitions)])
	clear(c.c.BatchPrepared[:cap(c.c.BatchPrepared)])
	c.c = Classification{Partitions: c.c.Partitions[:0], BatchPrepared: c.c.BatchPrepared[:0]}
	if cap(c.keys) > largeScratch {
		c.keys = nil
	}
	if cap(c.comps) > largeScratch {
		c.comps = nil
	}
	// What a request of many partitions grew is not kept by an idle
	// connection.
	if cap(c.c.Partitions) > 4*dedupLinear {
		c.c.Partitions = nil
	}
	if len(c.seen) > 4*dedupLinear {
		c.seen = nil
	}
	if cap(c.spans) > 4*dedupLinear {
		c.spans, c.odometer = nil, nil
	}
	if cap(c.doc) > largeScratch || cap(c.jsonScratch) > largeScratch {
		c.doc, c.jsonScratch = nil, nil
	}
	c.key = schema.KeyBuilder{}
}

// skipCustomPayload skips the custom payload ([bytes map]) a request body
// starts with when its flag is set; it returns nil for a payload that does
// not decode, which the message's parser then refuses.
func skipCustomPayload(body []byte, h frame.Header) []byte {
	if h.Flags&frame.FlagCustomPayload == 0 {
		return body
	}
	n, ok := frame.BytesMapLen(body)
	if !ok {
		return nil
	}
	return body[n:]
}

// timestampAt is the offset of q's default timestamp in its body, 0 for
// none.
func timestampAt(q *frame.Query) int {
	if !q.HasTimestamp() {
		return 0
	}
	return q.TimestampAt
}

// topologyOf says which of the tables drivers learn the cluster from, if
// any, the SELECT rec recognised last reads.
func topologyOf(rec *cql.Recognizer) Topology {
	ks, table, ok := rec.From()
	if !ok || string(ks) != "system" {
		return TopologyNone
	}
	switch string(table) {
	case "local":
		return TopologyLocal
	case "peers":
		return TopologyPeers
	case "peers_v2":
		return TopologyPeersV2
	}
	return TopologyNone
}
