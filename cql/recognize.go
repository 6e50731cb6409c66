package cql

// A recogniser of CQL statements: just enough of CQL to say which table a
// statement touches, whether it reads or writes, and which partition key
// restrictions it carries.
//
// Supported: SELECT, INSERT (VALUES and JSON), UPDATE and DELETE, with
// comments, any keyword case, quoted identifiers, keyspace.table or the
// connection's keyspace, IF (lightweight transactions), USING TTL and
// TIMESTAMP, bind markers (? and :name) anywhere, and BEGIN ... APPLY BATCH
// texts (see Statements). WHERE relations col = term and col IN (terms)
// are recorded; any other relation on a column is recorded as not pinning
// it (ranges, CONTAINS, token(...)). Terms are literals (strings, $$
// strings$$, numbers, uuids, blobs, booleans, NaN, Infinity, collections,
// tuples and UDT literals, kept as their text), bind markers, either after
// a type hint ((bigint) 42 stands for 42), or anything else (function
// calls, arithmetic), which pins nothing.
//
// Not supported, and so reported as StmtOther: USE (see StmtUse), DDL,
// permissions, and anything else. The recogniser never guesses: what it
// does not understand pins no partition.

import (
	"bytes"
)

// StatementKind is the kind of a recognised statement.
type StatementKind uint8

// Statement kinds.
const (
	StmtOther StatementKind = iota
	StmtSelect
	StmtInsert
	StmtUpdate
	StmtDelete
	StmtUse
	StmtBatch // BEGIN ... APPLY BATCH: use Statements to walk its children
)

// TermKind says what a restriction's term is.
type TermKind uint8

// Term kinds.
const (
	TermLiteral    TermKind = iota // Text is the literal as written
	TermPositional                 // a ? marker; Index is its position among the statement's markers
	TermNamed                      // a :name marker; Text is the name, lower-cased unless quoted
	TermOther                      // a function call or other expression: pins nothing
)

// Term is one value a partition key column is restricted to.
type Term struct {
	Kind  TermKind
	Text  []byte
	Index int
}

// Restriction is what a statement says of one column.
type Restriction struct {
	Column []byte // lower-cased unless quoted
	Terms  []Term // one for =, several for IN
	// Pinned is false when the column is restricted other than by = or IN
	// of plain terms, or when the restriction is duplicated.
	Pinned bool
}

// Statement is what the recogniser learned of one statement. Its slices
// point into the query text or into the Recognizer, and are valid until the
// Recognizer's next call.
type Statement struct {
	Kind      StatementKind
	Keyspace  []byte // empty when unqualified; lower-cased unless quoted
	Table     []byte
	LWT       bool // has an IF clause (IF NOT EXISTS, IF EXISTS, IF cond)
	JSON      bool // INSERT ... JSON: JSONValue holds the literal
	JSONValue []byte
	// JSONTerm is INSERT ... JSON's document: a string literal as written,
	// or a bind marker.
	JSONTerm     Term
	Restrictions []Restriction
	// Markers is how many bind markers the statement has.
	Markers int
	// WithoutTimeout is the length of the text without a trailing USING
	// TIMEOUT clause (timeout.go), or 0 when it has none.
	WithoutTimeout int
}

// Recognizer parses statements, reusing its buffers so that recognising
// allocates nothing once they have grown.
type Recognizer struct {
	lex    Lexer
	names  []byte // lower-cased identifiers
	terms  []Term
	rs     []Restriction
	stmt   Statement
	marker int // next positional marker index
	// from is the table a SELECT names, kept even when the rest of the
	// statement is not understood.
	fromKeyspace, fromTable []byte
	fromOK                  bool
}

// Release drops the Recognizer's references into the text it last parsed,
// and buffers a large one grew, so that a large request can be freed while
// its connection is idle.
func (r *Recognizer) Release() {
	r.lex.Reset(nil)
	r.fromKeyspace, r.fromTable, r.fromOK = nil, nil, false
	// Scratch space an IN list of thousands grew is let go of, not only
	// cleared: an idle connection keeps what an ordinary statement needs.
	const keep = 256
	if cap(r.terms) > keep {
		r.terms = nil
	}
	if cap(r.rs) > keep {
		r.rs = nil
	}
	if cap(r.names) > keep {
		r.names = nil
	}
	clear(r.terms[:cap(r.terms)])
	clear(r.rs[:cap(r.rs)])
	r.stmt = Statement{}
}

// Recognize parses q, the text of a QUERY, PREPARE or of one statement of
// an inline batch.
func (r *Recognizer) Recognize(q []byte) *Statement {
	r.names = r.names[:0]
	r.terms = r.terms[:0]
	r.rs = r.rs[:0]
	r.marker = 0
	r.stmt = Statement{}
	r.fromKeyspace, r.fromTable, r.fromOK = nil, nil, false
	r.lex.Reset(q)
	r.statement()
	return &r.stmt
}

// From reports the keyspace (empty when unqualified) and table of the
// SELECT the last Recognize read, even where what follows the table was
// not understood: drivers' queries of the system tables are told apart by
// it alone.
func (r *Recognizer) From() (keyspace, table []byte, ok bool) {
	return r.fromKeyspace, r.fromTable, r.fromOK
}

// Statements calls fn for each statement of an inline BEGIN ... APPLY BATCH
// text, with markers numbered across the whole batch, and reports whether
// q was such a batch. fn's Statement is valid only during the call.
func (r *Recognizer) Statements(q []byte, fn func(*Statement)) bool {
	r.lex.Reset(q)
	r.marker = 0
	t := r.lex.Next()
	if !t.IsWord("begin") {
		return false
	}
	t = r.lex.Next()
	if t.IsWord("unlogged") || t.IsWord("logged") || t.IsWord("counter") {
		t = r.lex.Next()
	}
	if !t.IsWord("batch") {
		return false
	}
	// USING TIMESTAMP applies to the whole batch; its marker counts.
	if r.lex.Peek().IsWord("using") {
		r.skipUsing()
	}
	for {
		p := r.lex.Peek()
		if p.Kind == EOF {
			return true
		}
		if p.IsWord("apply") {
			return true
		}
		if p.IsPunct(';') {
			r.lex.Next()
			continue
		}
		r.names = r.names[:0]
		r.terms = r.terms[:0]
		r.rs = r.rs[:0]
		r.stmt = Statement{}
		start := r.marker
		r.statement()
		r.stmt.Markers = r.marker - start
		fn(&r.stmt)
		if r.stmt.Kind == StmtOther {
			return true
		}
	}
}

// statement parses one statement at the lexer's position.
func (r *Recognizer) statement() {
	t := r.lex.Next()
	switch {
	case t.IsWord("select"):
		r.stmt.Kind = StmtSelect
		r.selectStmt()
	case t.IsWord("insert"):
		r.stmt.Kind = StmtInsert
		r.insertStmt()
	case t.IsWord("update"):
		r.stmt.Kind = StmtUpdate
		r.updateStmt()
	case t.IsWord("delete"):
		r.stmt.Kind = StmtDelete
		r.deleteStmt()
	case t.IsWord("use"):
		if ks, ok := r.ident(r.lex.Next()); ok {
			r.stmt.Kind = StmtUse
			r.stmt.Keyspace = ks
		}
		return
	case t.IsWord("begin"):
		r.stmt.Kind = StmtBatch
		return
	default:
		r.stmt.Kind = StmtOther
		return
	}
	if r.stmt.Kind != StmtOther {
		r.stmt.Restrictions = r.rs
		r.stmt.Markers = r.marker
	}
}

func (r *Recognizer) fail() { r.stmt = Statement{Kind: StmtOther} }

// tableName parses [keyspace.]table.
func (r *Recognizer) tableName() bool {
	first, ok := r.ident(r.lex.Next())
	if !ok {
		return false
	}
	if r.lex.Peek().IsPunct('.') {
		r.lex.Next()
		second, ok := r.ident(r.lex.Next())
		if !ok {
			return false
		}
		r.stmt.Keyspace, r.stmt.Table = first, second
		return true
	}
	r.stmt.Table = first
	return true
}

func (r *Recognizer) selectStmt() {
	// Selectors may hold markers and parentheses; skip to FROM at depth 0.
	if !r.skipUntilWord("from") {
		r.fail()
		return
	}
	if !r.tableName() {
		r.fail()
		return
	}
	r.fromKeyspace, r.fromTable, r.fromOK = r.stmt.Keyspace, r.stmt.Table, true
	if r.lex.Peek().IsWord("where") {
		r.lex.Next()
		if !r.where() {
			r.fail()
			return
		}
	}
	r.skipRest()
}

func (r *Recognizer) insertStmt() {
	if !r.lex.Next().IsWord("into") || !r.tableName() {
		r.fail()
		return
	}
	t := r.lex.Next()
	if t.IsWord("json") {
		r.stmt.JSON = true
		v := r.lex.Next()
		switch v.Kind {
		case String:
			r.stmt.JSONValue = v.Text
			r.stmt.JSONTerm = Term{Kind: TermLiteral, Text: v.Text}
		case Marker:
			r.stmt.JSONTerm = r.countMarker(v)
		default:
			r.stmt.JSONTerm = Term{Kind: TermOther}
		}
		r.skipRest()
		return
	}
	if !t.IsPunct('(') {
		r.fail()
		return
	}
	first := len(r.rs)
	for {
		name, ok := r.ident(r.lex.Next())
		if !ok {
			r.fail()
			return
		}
		r.rs = append(r.rs, Restriction{Column: name, Pinned: true})
		sep := r.lex.Next()
		if sep.IsPunct(')') {
			break
		}
		if !sep.IsPunct(',') {
			r.fail()
			return
		}
	}
	if !r.lex.Next().IsWord("values") || !r.lex.Next().IsPunct('(') {
		r.fail()
		return
	}
	for i := first; ; i++ {
		term, ok := r.term()
		if !ok || i >= len(r.rs) {
			r.fail()
			return
		}
		r.terms = append(r.terms, term)
		n := len(r.terms)
		r.rs[i].Terms = r.terms[n-1 : n : n]
		if term.Kind == TermOther {
			r.rs[i].Pinned = false
		}
		sep := r.lex.Next()
		if sep.IsPunct(')') {
			if i != len(r.rs)-1 {
				r.fail()
				return
			}
			break
		}
		if !sep.IsPunct(',') {
			r.fail()
			return
		}
	}
	r.skipRest()
}

func (r *Recognizer) updateStmt() {
	if !r.tableName() {
		r.fail()
		return
	}
	if !r.skipUntilWord("where") {
		r.fail()
		return
	}
	if !r.where() {
		r.fail()
		return
	}
	r.skipRest()
}

func (r *Recognizer) deleteStmt() {
	if !r.skipUntilWord("from") || !r.tableName() {
		r.fail()
		return
	}
	if !r.skipUntilWord("where") || !r.where() {
		r.fail()
		return
	}
	r.skipRest()
}

// where parses relations joined by AND, up to the end of the WHERE clause.
func (r *Recognizer) where() bool {
	for {
		if !r.relation() {
			return false
		}
		if !r.lex.Peek().IsWord("and") {
			break
		}
		r.lex.Next()
	}
	return true
}

// relation parses one relation, recording = and IN on a single column.
func (r *Recognizer) relation() bool {
	t := r.lex.Next()
	if t.IsPunct('(') || t.IsWord("token") {
		return r.skipRelation(t)
	}
	name, ok := r.ident(t)
	if !ok {
		return false
	}
	op := r.lex.Next()
	switch {
	case op.IsPunct('='):
		term, ok := r.term()
		if !ok {
			return false
		}
		r.terms = append(r.terms, term)
		r.addRestriction(name, len(r.terms)-1, term.Kind != TermOther)
		return true
	case op.IsWord("in"):
		return r.inRelation(name)
	case op.Kind == Punct || op.IsWord("contains") || op.IsWord("like"):
		// <, <=, >, >=, !=, CONTAINS [KEY], LIKE: a range or a filter.
		if r.lex.Peek().IsWord("key") {
			r.lex.Next()
		}
		if _, ok := r.term(); !ok {
			return false
		}
		r.addRestriction(name, len(r.terms), false)
		return true
	case op.IsWord("is"):
		// IS NOT NULL, in materialized view definitions.
		r.lex.Next()
		r.lex.Next()
		r.addRestriction(name, len(r.terms), false)
		return true
	}
	return false
}

// skipRelation skips a multi-column or token relation, t its first
// token: clustering columns or a token range, which pins nothing. Its
// markers are counted.
func (r *Recognizer) skipRelation(t Token) bool {
	if t.IsWord("token") {
		if !r.lex.Next().IsPunct('(') {
			return false
		}
	}
	if !r.skipBalanced() {
		return false
	}
	op := r.lex.Next()
	if op.Kind != Punct && !op.IsWord("in") {
		return false
	}
	if op.IsWord("in") || r.lex.Peek().IsPunct('(') {
		r.lex.Next()
		return r.skipBalanced()
	}
	_, ok := r.term()
	return ok
}

// inRelation parses the list of name IN, recording its terms.
func (r *Recognizer) inRelation(name []byte) bool {
	next := r.lex.Peek()
	if next.Kind == Marker {
		// IN ? binds a whole list: the partitions are not known here.
		r.lex.Next()
		r.countMarker(next)
		r.addRestriction(name, len(r.terms), false)
		return true
	}
	if !r.lex.Next().IsPunct('(') {
		return false
	}
	first := len(r.terms)
	pinned := true
	if r.lex.Peek().IsPunct(')') {
		r.lex.Next()
	} else {
		for {
			term, ok := r.term()
			if !ok {
				return false
			}
			r.terms = append(r.terms, term)
			pinned = pinned && term.Kind != TermOther
			sep := r.lex.Next()
			if sep.IsPunct(')') {
				break
			}
			if !sep.IsPunct(',') {
				return false
			}
		}
	}
	r.addRestriction(name, first, pinned)
	return true
}

// addRestriction records the terms r.terms[first:] for column name. The
// slice stays valid when r.terms grows later: growing copies, and the old
// array keeps what was written.
func (r *Recognizer) addRestriction(name []byte, first int, pinned bool) {
	// A column restricted twice pins nothing: Cassandra refuses it anyway.
	for i := range r.rs {
		if bytes.Equal(r.rs[i].Column, name) {
			r.rs[i].Pinned = false
			pinned = false
		}
	}
	n := len(r.terms)
	r.rs = append(r.rs, Restriction{Column: name, Pinned: pinned, Terms: r.terms[first:n:n]})
}

// ident returns an identifier token's name: lower-cased when unquoted (CQL
// folds them), as written when quoted ("" stands for ").
func (r *Recognizer) ident(t Token) ([]byte, bool) {
	switch t.Kind {
	case Word:
		for _, c := range t.Text {
			if c >= 'A' && c <= 'Z' {
				start := len(r.names)
				for _, c := range t.Text {
					if c >= 'A' && c <= 'Z' {
						c += 'a' - 'A'
					}
					r.names = append(r.names, c)
				}
				return r.names[start:len(r.names):len(r.names)], true
			}
		}
		return t.Text, true
	case QuotedName:
		body := t.Text[1 : len(t.Text)-1]
		if bytes.IndexByte(body, '"') < 0 {
			return body, true
		}
		start := len(r.names)
		for i := 0; i < len(body); i++ {
			r.names = append(r.names, body[i])
			if body[i] == '"' {
				i++
			}
		}
		return r.names[start:len(r.names):len(r.names)], true
	}
	return nil, false
}
