package classify

// Classification of a statement: its table, operation and partitions, from
// what package cql recognised of its text and the values bound to it. A
// partition key is serialized from literals as Cassandra would (package
// schema) or taken from bound values as they are, then hashed to its
// token.

import (
	"github.com/cqlguard/cqlguard/cql"
	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/schema"
)

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
func (c *Classifier) keyspaceOf(stmt, request []byte) []byte {
	switch {
	case len(stmt) > 0:
		return stmt
	case len(request) > 0:
		return request
	}
	return c.keyspace
}

// query classifies a QUERY.
func (c *Classifier) query(q *frame.Query, snap *schema.Snapshot) {
	st := c.rec.Recognize(q.Text)
	if st.Kind == cql.StmtUse {
		// The connection's keyspace changes only once the upstream has
		// answered Set_keyspace (session.learnKeyspace): a USE it refuses
		// leaves the keyspace as it was, as Cassandra does.
		c.use = true
		return
	}
	if st.Kind == cql.StmtBatch {
		c.c.Op, c.c.Batch, c.c.Pinned = OpWrite, true, true
		ks := q.Keyspace
		c.rec.Statements(q.Text, func(st *cql.Statement) {
			c.statement(st, c.keyspaceOf(st.Keyspace, ks), snap, &q.Values, true)
		})
		return
	}
	c.c.Pinned = true
	c.withoutTimeout = st.WithoutTimeout
	c.statement(st, c.keyspaceOf(st.Keyspace, q.Keyspace), snap, &q.Values, false)
}

// statement adds one recognised statement to the classification: its op,
// table and partitions, or unpins the whole when it pins nothing.
func (c *Classifier) statement(st *cql.Statement, ks []byte, snap *schema.Snapshot, values *frame.Values, inBatch bool) {
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
func (c *Classifier) sourcesFromStatement(st *cql.Statement, t *schema.Table, values *frame.Values) bool {
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
func (c *Classifier) sourcesFromJSON(doc []byte, t *schema.Table) bool {
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

// maxPinned is the most partitions the classifier pins a request to.
func (c *Classifier) maxPinned() int {
	if c.maxPartitions == 0 {
		return defaultMaxPartitions
	}
	return c.maxPartitions
}

// fits reports whether a statement selecting n partitions of t, before
// they are deduplicated, may be within the classifier's bound, and marks
// the request as overflowing t if not: a statement past it is not worth
// serializing. Distinct partitions are counted as they are added.
func (c *Classifier) fits(t *schema.Table, n int) bool {
	if n <= c.maxPinned() {
		return true
	}
	c.c.Overflow = t
	return false
}

// addPartitions adds the partitions the gathered candidates select: every
// combination of one candidate per column (IN lists multiply).
func (c *Classifier) addPartitions(t *schema.Table) bool {
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
func (c *Classifier) addPartition(p Partition) bool {
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
	if len(c.c.Partitions) == c.maxPinned() {
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
func (c *Classifier) index(n int) {
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
