package classify

// Classification of prepared statements: what a PREPARE learns of its
// statement's text, and EXECUTEs and BATCH children classified from it
// with their bound values (see statement.go).

import (
	"slices"

	"github.com/cqlguard/cqlguard/cql"
	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/schema"
)

// prepare learns what it can of a statement being prepared; the id and
// the partition key indexes come with the upstream's answer. It allocates:
// preparing is rare.
//
// keyspace, when not empty, is the keyspace the request names, which a
// keyspace in the text overrides.
func (c *Classifier) prepare(text, keyspace []byte, snap *schema.Snapshot) *Prepared {
	st := c.rec.Recognize(text)
	c.withoutTimeout = st.WithoutTimeout
	p := &Prepared{
		op: opOf(st.Kind), lwt: st.LWT, use: st.Kind == cql.StmtUse, topology: topologyOf(&c.rec),
		text: append([]byte(nil), text...),
	}
	if p.op == OpNone {
		return p
	}
	ks := c.keyspaceOf(st.Keyspace, keyspace)
	p.keyspace, p.tableName = append([]byte(nil), ks...), append([]byte(nil), st.Table...)
	p.internal = isInternal(ks)
	if p.internal {
		return p
	}
	t := snap.Table(ks, st.Table)
	if t == nil {
		// A later schema, which knows the table, resolves it.
		p.unresolved = true
		return p
	}
	if st.JSON {
		return c.prepareJSON(p, st, t)
	}
	sources := make([][]pkSource, 0, len(t.PartitionKey))
	var literals []byte
	for _, col := range t.PartitionKey {
		r := restriction(st, col.Name)
		if r == nil || !r.Pinned || len(r.Terms) == 0 {
			return p
		}
		var terms []pkSource
		for _, term := range r.Terms {
			switch term.Kind {
			case cql.TermLiteral:
				start := len(literals)
				var err error
				if literals, err = schema.AppendLiteral(literals, col.Type, term.Text); err != nil {
					return p
				}
				terms = append(terms, pkSource{index: -1, start: uint32(start), end: uint32(len(literals))})
			case cql.TermPositional, cql.TermNamed:
				// A prepared statement's variables are numbered by marker
				// position, named or not.
				terms = append(terms, pkSource{index: int32(term.Index)})
			default:
				return p
			}
		}
		sources = append(sources, slices.Clip(slices.Clone(terms)))
	}
	p.sources = sources
	p.literals = slices.Clone(literals)
	return p
}

// prepareJSON learns where a prepared INSERT JSON's partition key comes
// from: its document's bind marker, read at each EXECUTE, or a literal
// document, read now.
func (c *Classifier) prepareJSON(p *Prepared, st *cql.Statement, t *schema.Table) *Prepared {
	switch term := st.JSONTerm; term.Kind {
	case cql.TermPositional, cql.TermNamed:
		p.jsonIndex = int32(term.Index) + 1
		return p
	case cql.TermLiteral:
		c.comps, c.spans, c.cols = c.comps[:0], c.spans[:0], c.cols[:0]
		doc, err := schema.AppendLiteral(nil, textType, term.Text)
		if err != nil || !c.sourcesFromJSON(doc, t) {
			return p
		}
		p.literals = slices.Clone(c.comps)
		for _, sp := range c.spans {
			p.sources = append(p.sources, []pkSource{{index: -1, start: uint32(sp[0]), end: uint32(sp[1])}})
		}
	}
	return p
}

// executeInto adds a prepared statement with its bound values to the
// classification, alone or as a batch child.
func (c *Classifier) executeInto(p *Prepared, values *frame.Values, snap *schema.Snapshot, inBatch bool) {
	if c.c.Table == nil {
		c.c.Keyspace, c.c.Table = p.keyspace, p.tableName
	}
	if !inBatch {
		c.c.Op, c.c.Pinned = p.op, true
	}
	c.c.LWT = c.c.LWT || p.lwt
	switch {
	case p.op == OpNone:
		c.c.Pinned = false
		return
	case p.internal:
		c.c.Internal, c.c.Pinned = true, false
		return
	}
	t := snap.Table(p.keyspace, p.tableName)
	if t != nil && p.jsonIndex > 0 {
		c.c.Counter = c.c.Counter || t.Counter
		if !c.c.Pinned {
			return
		}
		c.comps, c.spans, c.cols = c.comps[:0], c.spans[:0], c.cols[:0]
		v, ok := values.At(int(p.jsonIndex - 1))
		if !ok || v.Kind != frame.ValueSet || !c.sourcesFromJSON(v.Bytes, t) || !c.addPartitions(t) {
			c.c.Pinned = false
		}
		return
	}
	if t == nil || len(p.sources) != len(t.PartitionKey) {
		c.c.Pinned = false
		return
	}
	c.c.Counter = c.c.Counter || t.Counter
	if !c.c.Pinned {
		return
	}
	n := 1
	for _, terms := range p.sources {
		n = mulBounded(n, len(terms))
	}
	if n > 0 && !c.fits(t, n) {
		c.c.Pinned = false
		return
	}
	c.comps, c.spans, c.cols = c.comps[:0], c.spans[:0], c.cols[:0]
	for _, terms := range p.sources {
		c.cols = append(c.cols, len(c.spans))
		for _, src := range terms {
			start := len(c.comps)
			if src.index < 0 {
				c.comps = append(c.comps, p.literals[src.start:src.end]...)
			} else {
				v, ok := values.At(int(src.index))
				if !ok || v.Kind != frame.ValueSet {
					c.c.Pinned = false
					return
				}
				c.comps = append(c.comps, v.Bytes...)
			}
			c.spans = append(c.spans, [2]int{start, len(c.comps)})
		}
	}
	c.cols = append(c.cols, len(c.spans))
	if !c.addPartitions(t) {
		c.c.Pinned = false
	}
}

// batch classifies a BATCH. A child statement reg does not hold ends it,
// noted as Unprepared.
func (c *Classifier) batch(b *frame.Batch, reg *Registry, snap *schema.Snapshot) {
	c.c.Op, c.c.Batch, c.c.Pinned = OpWrite, true, true
	c.c.Logged = b.Type == frame.BatchLogged
	for {
		child, ok := b.Next()
		if !ok {
			break
		}
		if child.Prepared {
			p := reg.get(child.ID)
			if p == nil {
				c.c.Unprepared = child.ID
				return
			}
			p = reg.resolve(child.ID, p, snap, c)
			c.c.BatchPrepared = append(c.c.BatchPrepared, p)
			c.executeInto(p, &child.Values, snap, true)
			continue
		}
		st := c.rec.Recognize(child.Text)
		c.statement(st, c.keyspaceOf(st.Keyspace, b.Keyspace), snap, &child.Values, true)
	}
	if !c.c.Pinned {
		c.c.Partitions = c.c.Partitions[:0]
	}
}
