package frame

// Terms of the recogniser: literals, bind markers, type hints and what
// pins nothing (see cql.go).

// term parses one term, reporting false on a syntax it cannot follow.
func (r *Recognizer) term() (Term, bool) {
	t := r.lex.next()
	switch t.kind {
	case tokString, tokNumber, tokUUID, tokBlob:
		return r.maybeExpr(Term{Kind: TermLiteral, Text: t.text})
	case tokMarker:
		return r.maybeExpr(r.countMarker(t))
	case tokWord:
		switch {
		case isLiteralWord(t):
			return r.maybeExpr(Term{Kind: TermLiteral, Text: t.text})
		case r.lex.peek().isPunct('('):
			// A function call: computed by the server.
			r.lex.next()
			if !r.skipBalanced() {
				return Term{}, false
			}
			return Term{Kind: TermOther}, true
		}
		return Term{Kind: TermOther}, true
	case tokPunct:
		switch t.text[0] {
		case '-':
			// A negative number, or -NaN/-Infinity.
			n := r.lex.next()
			if n.kind == tokNumber || n.isWord("nan") || n.isWord("infinity") {
				return r.maybeExpr(Term{Kind: TermLiteral, Text: r.lex.src[t.start:n.end]})
			}
			return Term{}, false
		case '[', '{', '(':
			// A collection, tuple or UDT literal (or a cast, for '('): keep
			// its text, and count the markers inside.
			start, end := t.start, t.end
			depth := 1
			marked := false
			// A type, as in a type hint, is words, <, > and commas, and
			// starts with a word that is no literal.
			typeLike := t.text[0] == '(' && r.lex.peek().kind == tokWord && !isLiteralWord(r.lex.peek())
			for depth > 0 {
				n := r.lex.next()
				end = n.end
				switch {
				case n.kind == tokEOF:
					return Term{}, false
				case n.kind == tokMarker:
					r.countMarker(n)
					marked = true
				case n.isPunct('[') || n.isPunct('{') || n.isPunct('('):
					depth++
				case n.isPunct(']') || n.isPunct('}') || n.isPunct(')'):
					depth--
				}
				if depth > 0 && n.kind != tokWord && !n.isPunct('<') && !n.isPunct('>') && !n.isPunct(',') {
					typeLike = false
				}
			}
			if marked {
				return Term{Kind: TermOther}, true
			}
			if typeLike {
				// (type) term: a type hint. Where the server accepts it,
				// the value it gives the column is the term's as the
				// column's type, so the term stands for itself; where it
				// does not, the request fails whatever is counted.
				inner, ok := r.term()
				if !ok {
					return Term{}, false
				}
				return inner, true
			}
			return r.maybeExpr(Term{Kind: TermLiteral, Text: r.lex.src[start:end]})
		}
	}
	return Term{}, false
}

// isLiteralWord reports whether t is a word that is a literal.
func isLiteralWord(t token) bool {
	return t.isWord("true") || t.isWord("false") || t.isWord("nan") || t.isWord("infinity") || t.isWord("null")
}

// maybeExpr turns a term followed by arithmetic into TermOther.
func (r *Recognizer) maybeExpr(t Term) (Term, bool) {
	p := r.lex.peek()
	if p.isPunct('+') || p.isPunct('-') || p.isPunct('*') || p.isPunct('/') || p.isPunct('%') {
		r.lex.next()
		if _, ok := r.term(); !ok {
			return Term{}, false
		}
		return Term{Kind: TermOther}, true
	}
	return t, true
}

// countMarker numbers a bind marker.
func (r *Recognizer) countMarker(t token) Term {
	if len(t.text) > 1 {
		// :name; a named marker also takes a position.
		name, _ := r.ident(token{kind: t.nameKind, text: t.text[1:]})
		r.marker++
		return Term{Kind: TermNamed, Text: name, Index: r.marker - 1}
	}
	r.marker++
	return Term{Kind: TermPositional, Index: r.marker - 1}
}
