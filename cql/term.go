package cql

// Terms of the recogniser: literals, bind markers, type hints and what
// pins nothing (see cql.go).

// term parses one term, reporting false on a syntax it cannot follow.
func (r *Recognizer) term() (Term, bool) {
	t := r.lex.Next()
	switch t.Kind {
	case String, Number, Duration, UUID, Blob:
		return r.maybeExpr(Term{Kind: TermLiteral, Text: t.Text})
	case Marker:
		return r.maybeExpr(r.countMarker(t))
	case Word:
		switch {
		case isLiteralWord(t):
			return r.maybeExpr(Term{Kind: TermLiteral, Text: t.Text})
		case r.lex.Peek().IsPunct('('):
			// A function call: computed by the server.
			r.lex.Next()
			if !r.skipBalanced() {
				return Term{}, false
			}
			return Term{Kind: TermOther}, true
		}
		return Term{Kind: TermOther}, true
	case Punct:
		switch t.Text[0] {
		case '-':
			// A negative number or duration, or -NaN/-Infinity.
			n := r.lex.Next()
			if n.Kind == Number || n.Kind == Duration || n.IsWord("nan") || n.IsWord("infinity") {
				return r.maybeExpr(Term{Kind: TermLiteral, Text: r.lex.Src()[t.Start:n.End]})
			}
			return Term{}, false
		case '[', '{', '(':
			// A collection, tuple or UDT literal (or a cast, for '('): keep
			// its text, and count the markers inside.
			start, end := t.Start, t.End
			depth := 1
			marked := false
			// A type, as in a type hint, is words, <, > and commas, and
			// starts with a word that is no literal.
			typeLike := t.Text[0] == '(' && r.lex.Peek().Kind == Word && !isLiteralWord(r.lex.Peek())
			for depth > 0 {
				n := r.lex.Next()
				end = n.End
				switch {
				case n.Kind == EOF:
					return Term{}, false
				case n.Kind == Marker:
					r.countMarker(n)
					marked = true
				case n.IsPunct('[') || n.IsPunct('{') || n.IsPunct('('):
					depth++
				case n.IsPunct(']') || n.IsPunct('}') || n.IsPunct(')'):
					depth--
				}
				if depth > 0 && n.Kind != Word && !n.IsPunct('<') && !n.IsPunct('>') && !n.IsPunct(',') {
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
			return r.maybeExpr(Term{Kind: TermLiteral, Text: r.lex.Src()[start:end]})
		}
	}
	return Term{}, false
}

// isLiteralWord reports whether t is a word that is a literal.
func isLiteralWord(t Token) bool {
	return t.IsWord("true") || t.IsWord("false") || t.IsWord("nan") || t.IsWord("infinity") || t.IsWord("null")
}

// maybeExpr turns a term followed by arithmetic into TermOther.
func (r *Recognizer) maybeExpr(t Term) (Term, bool) {
	if p := r.lex.Peek(); p.Kind == Punct && len(p.Text) == 1 && isOperator(p.Text[0]) {
		r.lex.Next()
		if _, ok := r.term(); !ok {
			return Term{}, false
		}
		return Term{Kind: TermOther}, true
	}
	return t, true
}

// countMarker numbers a bind marker.
func (r *Recognizer) countMarker(t Token) Term {
	if len(t.Text) > 1 {
		// :name; a named marker also takes a position.
		name, _ := r.ident(r.lex.MarkerName(t))
		r.marker++
		return Term{Kind: TermNamed, Text: name, Index: r.marker - 1}
	}
	r.marker++
	return Term{Kind: TermPositional, Index: r.marker - 1}
}

// isOperator reports whether c is an arithmetic operator.
func isOperator(c byte) bool {
	return c == '+' || c == '-' || c == '*' || c == '/' || c == '%'
}
