package proxy

// Classification: which tables, operation and partitions a request
// touches. It runs on the request path for every QUERY, EXECUTE and BATCH,
// so it reuses the connection's buffers and allocates nothing in steady
// state. What cannot be pinned to partitions (a scan, a token range, a
// partition key computed by a function, a table the schema does not know
// yet) is reported as not pinned, never guessed.

import (
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

// defaultMaxPartitions is the bound on the partitions a request is pinned
// to when the classifier is given none (limits.max_partitions_per_request).
const defaultMaxPartitions = 1024

// dedupLinear is how many partitions a request may have before the
// classifier indexes them by token rather than compare each new one with
// all before it: a request's cost stays the same per partition.
const dedupLinear = 16

// Partition is one partition a request touches.
type Partition struct {
	Table *schema.Table
	Token int64
	// Key is the serialized partition key, for display (/hot); it is the
	// classifier's, valid until its next call.
	Key []byte
}

// Classification is what the proxy learned of a request. Its slices are
// the classifier's, valid until its next call.
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
	// observed is set once the hot partitions sketch counted the
	// request's partition (serveHot), so that decide does not again.
	observed bool
}

// pkSource says where a prepared statement's partition key component
// comes from: a bound variable, or a literal serialized at prepare time,
// kept in the statement's literals. It is small because an IN list of
// literals has one per element: a statement is kept at a few times its
// text's size, not tens of times.
type pkSource struct {
	index      int32 // bound variable index, or -1
	start, end uint32
}

// classifier classifies one connection's requests.
type classifier struct {
	// keyspace is the connection's keyspace, as the upstream's answer to
	// USE named it; the request path sets it before each classification.
	keyspace []byte
	// use is set when the request classified last is a USE.
	use bool
	// body is the QUERY or PREPARE body classified last, decompressed, and
	// withoutTimeout the length of its statement without a trailing USING
	// TIMEOUT clause, 0 when it has none: what dropUsingTimeout needs.
	body           []byte
	withoutTimeout int
	// consistency is the QUERY's or EXECUTE's consistency level, and
	// timestampAt the offset in body of its default timestamp, 0 for none.
	consistency uint16
	timestampAt int
	rec         cql.Recognizer
	key         schema.KeyBuilder
	comps       []byte   // serialized key components, back to back
	spans       [][2]int // component spans in comps, column after column
	cols        []int    // column i's spans are spans[cols[i]:cols[i+1]]
	odometer    []int
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
	// (limits.max_partitions_per_request); 0 means defaultMaxPartitions.
	maxPartitions int
	// doc and jsonScratch are INSERT JSON's document, when a literal, and
	// the space its strings are decoded in.
	doc, jsonScratch []byte
	c                Classification
}

func (c *classifier) reset() {
	c.c = Classification{Partitions: c.c.Partitions[:0]}
	c.keys = c.keys[:0]
	c.use = false
	c.indexed = false
	c.withoutTimeout = 0
	c.consistency, c.timestampAt = 0, 0
}

// release drops what the classifier holds of the last request, which may
// point into its frame, and the scratch space a large request grew, so that
// an idle connection does not keep a large request alive.
func (c *classifier) release() {
	c.rec.Release()
	c.body, c.withoutTimeout = nil, 0
	clear(c.c.Partitions[:cap(c.c.Partitions)])
	c.c = Classification{Partitions: c.c.Partitions[:0]}
	if cap(c.keys) > largeFrame {
		c.keys = nil
	}
	if cap(c.comps) > largeFrame {
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
	if cap(c.doc) > largeFrame || cap(c.jsonScratch) > largeFrame {
		c.doc, c.jsonScratch = nil, nil
	}
	c.key = schema.KeyBuilder{}
}

// isInternal reports whether keyspace is one of Cassandra's or ScyllaDB's
// own (system, system_schema, system_auth, ...).
func isInternal(keyspace []byte) bool {
	const p = "system"
	return len(keyspace) >= len(p) && string(keyspace[:len(p)]) == p &&
		(len(keyspace) == len(p) || keyspace[len(p)] == '_')
}

func opOf(k cql.StatementKind) Op {
	switch k {
	case cql.StmtSelect:
		return OpRead
	case cql.StmtInsert, cql.StmtUpdate, cql.StmtDelete:
		return OpWrite
	}
	return OpNone
}

// keyspaceOf picks the keyspace a statement runs in: its own, the
// request's (v5), or the connection's.
func (c *classifier) keyspaceOf(stmt, request []byte) []byte {
	switch {
	case len(stmt) > 0:
		return stmt
	case len(request) > 0:
		return request
	}
	return c.keyspace
}

// query classifies a QUERY.
func (c *classifier) query(q *frame.Query, snap *schema.Snapshot) *Classification {
	c.reset()
	st := c.rec.Recognize(q.Text)
	if st.Kind == cql.StmtUse {
		// The connection's keyspace changes only once the upstream has
		// answered Set_keyspace (session.learnKeyspace): a USE it refuses
		// leaves the keyspace as it was, as Cassandra does.
		c.use = true
		return &c.c
	}
	if st.Kind == cql.StmtBatch {
		c.c.Op, c.c.Batch, c.c.Pinned = OpWrite, true, true
		ks := q.Keyspace
		c.rec.Statements(q.Text, func(st *cql.Statement) {
			c.statement(st, c.keyspaceOf(st.Keyspace, ks), snap, &q.Values, true)
		})
		return &c.c
	}
	c.c.Pinned = true
	c.withoutTimeout = st.WithoutTimeout
	c.statement(st, c.keyspaceOf(st.Keyspace, q.Keyspace), snap, &q.Values, false)
	return &c.c
}

// statement adds one recognised statement to the classification: its op,
// table and partitions, or unpins the whole when it pins nothing.
func (c *classifier) statement(st *cql.Statement, ks []byte, snap *schema.Snapshot, values *frame.Values, inBatch bool) {
	op := opOf(st.Kind)
	if c.c.Table == nil {
		c.c.Keyspace, c.c.Table = ks, st.Table
	}
	if !inBatch {
		c.c.Op = op
	}
	c.c.LWT = c.c.LWT || st.LWT
	if op == OpNone {
		c.c.Pinned = false
		return
	}
	if isInternal(ks) {
		c.c.Internal = true
		c.c.Pinned = false
		return
	}
	t := snap.Table(ks, st.Table)
	if t == nil {
		c.c.Pinned = false
		return
	}
	c.c.Counter = c.c.Counter || t.Counter
	if !c.c.Pinned {
		return // a batch already unpinned: nothing more to learn
	}
	if !c.sourcesFromStatement(st, t, values) || !c.addPartitions(t) {
		c.c.Pinned = false
	}
}

// sourcesFromStatement gathers each partition key column's candidate
// components from the statement's restrictions: literals serialized as
// Cassandra would, bound markers from values.
func (c *classifier) sourcesFromStatement(st *cql.Statement, t *schema.Table, values *frame.Values) bool {
	c.comps, c.spans, c.cols = c.comps[:0], c.spans[:0], c.cols[:0]
	if st.JSON {
		var doc []byte
		switch term := st.JSONTerm; term.Kind {
		case cql.TermLiteral:
			var err error
			if c.doc, err = schema.AppendLiteral(c.doc[:0], textType, term.Text); err != nil {
				return false
			}
			doc = c.doc
		case cql.TermPositional, cql.TermNamed:
			v, ok := boundValue(values, term)
			if !ok {
				return false
			}
			doc = v
		default:
			return false
		}
		return c.sourcesFromJSON(doc, t)
	}
	// Count first: a request past the bound is not worth serializing.
	n := 1
	for _, col := range t.PartitionKey {
		r := restriction(st, col.Name)
		if r == nil || !r.Pinned || len(r.Terms) == 0 {
			return false
		}
		if n = mulBounded(n, len(r.Terms)); !c.fits(t, n) {
			return false
		}
	}
	for _, col := range t.PartitionKey {
		r := restriction(st, col.Name)
		c.cols = append(c.cols, len(c.spans))
		for _, term := range r.Terms {
			start := len(c.comps)
			switch term.Kind {
			case cql.TermLiteral:
				var err error
				if c.comps, err = schema.AppendLiteral(c.comps, col.Type, term.Text); err != nil {
					return false
				}
			case cql.TermPositional, cql.TermNamed:
				v, ok := boundValue(values, term)
				if !ok {
					return false
				}
				c.comps = append(c.comps, v...)
			default:
				return false
			}
			c.spans = append(c.spans, [2]int{start, len(c.comps)})
		}
	}
	c.cols = append(c.cols, len(c.spans))
	return true
}

// textType is the type INSERT JSON's document is read as.
var textType = schema.Type{Kind: schema.Text}

// sourcesFromJSON gathers each partition key column's value from an
// INSERT JSON document, one component each.
func (c *classifier) sourcesFromJSON(doc []byte, t *schema.Table) bool {
	for _, col := range t.PartitionKey {
		start := len(c.comps)
		var err error
		if c.comps, c.jsonScratch, err = schema.AppendJSONKey(c.comps, c.jsonScratch, doc, col.Name, col.Type); err != nil {
			return false
		}
		c.cols = append(c.cols, len(c.spans))
		c.spans = append(c.spans, [2]int{start, len(c.comps)})
	}
	c.cols = append(c.cols, len(c.spans))
	return true
}

// restriction finds the restriction on the column named name.
func restriction(st *cql.Statement, name string) *cql.Restriction {
	for i := range st.Restrictions {
		if string(st.Restrictions[i].Column) == name {
			return &st.Restrictions[i]
		}
	}
	return nil
}

// boundValue returns the value bound to a marker: by name when the request
// names its values, else by position. Null and unset values pin nothing.
func boundValue(values *frame.Values, term cql.Term) ([]byte, bool) {
	var v frame.Value
	var ok bool
	if values.Named() {
		if term.Kind != cql.TermNamed {
			return nil, false
		}
		v, ok = values.Lookup(term.Text)
	} else {
		v, ok = values.At(term.Index)
	}
	if !ok || v.Kind != frame.ValueSet {
		return nil, false
	}
	return v.Bytes, true
}

// mulBounded multiplies counts, saturating well past any bound.
func mulBounded(a, b int) int {
	if a > 0 && b > (1<<30)/a {
		return 1 << 30
	}
	return a * b
}

// bound is the most partitions the classifier pins a request to.
func (c *classifier) bound() int {
	if c.maxPartitions == 0 {
		return defaultMaxPartitions
	}
	return c.maxPartitions
}

// fits reports whether a statement selecting n partitions of t, before
// they are deduplicated, may be within the classifier's bound, and marks
// the request as overflowing t if not: a statement past it is not worth
// serializing. Distinct partitions are counted as they are added.
func (c *classifier) fits(t *schema.Table, n int) bool {
	if n <= c.bound() {
		return true
	}
	c.c.Overflow = t
	return false
}

// addPartitions adds the partitions the gathered candidates select: every
// combination of one candidate per column (IN lists multiply).
func (c *classifier) addPartitions(t *schema.Table) bool {
	ncols := len(c.cols) - 1
	n := 1
	for i := range ncols {
		n = mulBounded(n, c.cols[i+1]-c.cols[i])
	}
	if n == 0 {
		return true // IN (): no partition at all
	}
	if !c.fits(t, n) {
		return false
	}
	c.odometer = c.odometer[:0]
	for range ncols {
		c.odometer = append(c.odometer, 0)
	}
	for {
		c.key.Reset()
		for i := range ncols {
			sp := c.spans[c.cols[i]+c.odometer[i]]
			c.key.Add(c.comps[sp[0]:sp[1]])
		}
		key := c.key.Bytes()
		if !c.addPartition(Partition{Table: t, Token: schema.Token(key), Key: key}) {
			return false
		}
		i := ncols - 1
		for ; i >= 0; i-- {
			c.odometer[i]++
			if c.odometer[i] < c.cols[i+1]-c.cols[i] {
				break
			}
			c.odometer[i] = 0
		}
		if i < 0 {
			return true
		}
	}
}

// addPartition adds p unless the request already touches it: a batch
// counts each distinct partition once. Past dedupLinear partitions it
// looks p up by token instead of comparing it with each. It reports false,
// marking the request as overflowing p's table, when p would be one
// partition more than the classifier's bound.
func (c *classifier) addPartition(p Partition) bool {
	slot := -1
	if n := len(c.c.Partitions); n < dedupLinear {
		for _, q := range c.c.Partitions {
			if q.Table == p.Table && q.Token == p.Token {
				return true
			}
		}
	} else {
		if !c.indexed || 2*(n+1) > len(c.seen) {
			c.index(2 * (n + 1))
		}
		mask := len(c.seen) - 1
		for i := int(uint64(p.Token) & uint64(mask)); ; i = (i + 1) & mask {
			j := c.seen[i]
			if j == 0 {
				slot = i
				break
			}
			if q := &c.c.Partitions[j-1]; q.Table == p.Table && q.Token == p.Token {
				return true
			}
		}
	}
	if len(c.c.Partitions) == c.bound() {
		c.c.Overflow = p.Table
		return false
	}
	start := len(c.keys)
	c.keys = append(c.keys, p.Key...)
	p.Key = c.keys[start:len(c.keys):len(c.keys)]
	c.c.Partitions = append(c.c.Partitions, p)
	if slot >= 0 {
		c.seen[slot] = int32(len(c.c.Partitions))
	}
	return true
}

// index rebuilds seen over the request's partitions, with room for at
// least n. Tokens are Murmur3 hashes, so their low bits spread well.
func (c *classifier) index(n int) {
	size := 4 * dedupLinear
	for size < 2*n {
		size *= 2
	}
	if len(c.seen) < size {
		c.seen = make([]int32, size)
	} else {
		clear(c.seen)
	}
	mask := len(c.seen) - 1
	for k, q := range c.c.Partitions {
		i := int(uint64(q.Token) & uint64(mask))
		for c.seen[i] != 0 {
			i = (i + 1) & mask
		}
		c.seen[i] = int32(k + 1)
	}
	c.indexed = true
}
