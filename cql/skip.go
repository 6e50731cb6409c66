package cql

// What the recogniser skips over without recording it (see recognize.go):
// balanced brackets, USING clauses and the rest of a statement, counting
// the bind markers on the way so that later markers keep their positions.

// skipUntilWord skips to the keyword w at parenthesis depth 0, counting
// markers, and consumes it.
func (r *Recognizer) skipUntilWord(w string) bool { return r.skip(0, w) }

// skipBalanced skips to the parenthesis closing one already consumed.
func (r *Recognizer) skipBalanced() bool { return r.skip(1, "") }

// skip reads tokens from bracket depth depth, counting markers, to the
// keyword w at depth 0, or with w empty to the bracket that brings the
// depth to 0, and consumes it; false at the end of the text.
func (r *Recognizer) skip(depth int, w string) bool {
	for {
		t := r.lex.Next()
		switch {
		case t.Kind == EOF:
			return false
		case t.Kind == Marker:
			r.countMarker(t)
		case t.IsPunct('(') || t.IsPunct('[') || t.IsPunct('{'):
			depth++
		case t.IsPunct(')') || t.IsPunct(']') || t.IsPunct('}'):
			depth--
			if w == "" && depth == 0 {
				return true
			}
		case w != "" && depth == 0 && t.IsWord(w):
			return true
		}
	}
}

// skipUsing skips USING TTL x AND TIMESTAMP y, counting markers.
func (r *Recognizer) skipUsing() {
	r.lex.Next() // USING
	for {
		r.lex.Next() // TTL or TIMESTAMP
		if t := r.lex.Next(); t.Kind == Marker {
			r.countMarker(t)
		}
		if !r.lex.Peek().IsWord("and") {
			return
		}
		r.lex.Next()
	}
}

// skipRest reads to the end of the statement (a ';' or APPLY BATCH),
// noting IF clauses and counting markers.
func (r *Recognizer) skipRest() {
	depth := 0
	for {
		p := r.lex.Peek()
		switch {
		case p.Kind == EOF:
			return
		case depth == 0 && (p.IsPunct(';') || p.IsWord("apply")):
			return
		}
		end := r.lex.End()
		t := r.lex.Next()
		switch {
		case t.Kind == Marker:
			r.countMarker(t)
		case t.IsPunct('(') || t.IsPunct('[') || t.IsPunct('{'):
			depth++
		case t.IsPunct(')') || t.IsPunct(']') || t.IsPunct('}'):
			depth--
		case depth == 0 && t.IsWord("using"):
			r.trailingTimeout(end)
		case depth == 0 && t.IsWord("if"):
			if r.stmt.Kind != StmtSelect {
				r.stmt.LWT = true
			}
		}
	}
}
