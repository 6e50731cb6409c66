package cql

// The lexer of CQL text, shared by the statement recogniser (recognize.go)
// and by the literal parser in package schema.
//
// Supported, following Cassandra's Lexer.g: identifiers (a letter, then
// letters, digits and underscores), quoted identifiers ("..." with ""
// standing for "), string literals ('...' with '' standing for ', and
// $$...$$), integers and floats (digits, an optional fraction and an
// optional exponent; the sign is a '-' token of its own, which the parser
// joins to the number when they touch; .5 too, which Cassandra refuses and
// the literal parser does), durations (a number run together
// with unit letters, 1h30m, kept whole and not checked), uuids, blobs
// (0x...), bind markers (? and :name, see below) and punctuation, with the
// two-byte operators <=, >= and != as one token, skipping white space and
// comments (--, // and /* */).
//
// A ':' followed by an identifier is a named marker, except where it
// separates a map key or a user type field from its value: inside braces,
// after a token that ends a value. Cassandra's lexer leaves that to its
// parser; the recogniser skips over literals it does not parse, so it needs
// the lexer to tell them apart.
//
// Not supported: ISO 8601 durations (P1D), which lex as identifiers;
// non-ASCII letters in identifiers, which Cassandra refuses too. An
// unterminated string, quoted identifier or $$ string is a Bad token that
// runs to the end of the text; a blob or uuid run together with an
// identifier byte is Bad too.

// Kind is the kind of a token.
type Kind uint8

// Token kinds.
const (
	EOF        Kind = iota
	Word            // an identifier or keyword
	QuotedName      // a "quoted identifier"
	String          // a 'string' or $$string$$
	Number          // an integer or float, without its sign
	Duration        // a number run together with unit letters
	UUID
	Blob   // 0x and hex digits
	Marker // ? or :name (Text includes the colon; see Lexer for where)
	Punct
	Bad // unterminated, or a literal run together with an identifier
)

// Token is one token of CQL text. Text is the token as written, a slice of
// the lexer's source; Start and End are its offsets there.
type Token struct {
	Kind       Kind
	Text       []byte
	Start, End int
}

// IsWord reports whether t is the keyword w, given in lower case, in any
// case.
func (t Token) IsWord(w string) bool {
	if t.Kind != Word || len(t.Text) != len(w) {
		return false
	}
	for i := range len(w) {
		if t.Text[i]|0x20 != w[i] {
			return false
		}
	}
	return true
}

// IsPunct reports whether t is the one-byte punctuation c.
func (t Token) IsPunct(c byte) bool {
	return t.Kind == Punct && len(t.Text) == 1 && t.Text[0] == c
}

// Content returns a String's or QuotedName's text without its quotes, and
// whether it holds a doubled quote, which stands for one and which the
// caller must undo. A $$ string holds no escapes.
func (t Token) Content() (b []byte, doubled bool) {
	switch {
	case t.Kind == String && len(t.Text) >= 4 && t.Text[0] == '$':
		return t.Text[2 : len(t.Text)-2], false
	case (t.Kind == String || t.Kind == QuotedName) && len(t.Text) >= 2:
		b = t.Text[1 : len(t.Text)-1]
		for i := 0; i+1 < len(b); i++ {
			if b[i] == t.Text[0] {
				return b, true
			}
		}
		return b, false
	}
	return nil, false
}

// Lexer splits CQL text into tokens. The zero value lexes nothing; Reset
// gives it a text. It does not allocate.
type Lexer struct {
	src []byte
	pos int
	// lastEnd is the end of the token scanned last, prevEnd of the one
	// before: End's answer, as Next and Peek may have scanned.
	lastEnd, prevEnd int
	peeked           bool
	ahead            Token
	// lastEnds is whether the token scanned last ends a value; braces is a
	// stack of open brackets, a bit each, set for a brace, and depth its
	// height. They tell a marker from a separator.
	lastEnds bool
	braces   uint64
	depth    int
	// casts has a bit per open parenthesis that began a term and has held
	// only what a type holds (words other than literals, <, > and commas):
	// a type hint, (int) :x, after which a value is still to come.
	casts uint64
}

// Reset makes the lexer read src from its start.
func (l *Lexer) Reset(src []byte) { *l = Lexer{src: src} }

// Src returns the text being lexed.
func (l *Lexer) Src() []byte { return l.src }

// Peek returns the next token without consuming it.
func (l *Lexer) Peek() Token {
	if !l.peeked {
		l.ahead = l.scan()
		l.peeked = true
	}
	return l.ahead
}

// Next consumes and returns the next token.
func (l *Lexer) Next() Token {
	if l.peeked {
		l.peeked = false
		return l.ahead
	}
	return l.scan()
}

// End returns the offset after the token Next returned last: where the
// text read so far ends, without the space and comments after it.
func (l *Lexer) End() int {
	if l.peeked {
		return l.prevEnd
	}
	return l.lastEnd
}

func (l *Lexer) scan() Token {
	i := SkipSpace(l.src, l.pos)
	kind, end := l.bounds(i)
	l.pos = end
	l.prevEnd, l.lastEnd = l.lastEnd, end
	l.track(kind, l.src[i:end])
	return Token{Kind: kind, Text: l.src[i:end], Start: i, End: end}
}

// track follows brackets and whether the last token ended a value.
func (l *Lexer) track(kind Kind, text []byte) {
	if l.casts != 0 {
		if d := l.depth - 1; d >= 0 && d < 64 && l.casts&(1<<d) != 0 && !typeToken(kind, text) {
			l.casts &^= 1 << d
		}
	}
	if kind != Punct {
		l.lastEnds = kind != EOF && kind != Bad
		return
	}
	if len(text) != 1 {
		l.lastEnds = false
		return
	}
	switch c := text[0]; c {
	case '{', '[', '(':
		if l.depth < 64 {
			l.braces &^= 1 << l.depth
			l.casts &^= 1 << l.depth
			if c == '{' {
				l.braces |= 1 << l.depth
			}
			if c == '(' && !l.lastEnds {
				l.casts |= 1 << l.depth
			}
		}
		l.depth++
		l.lastEnds = false
	case '}', ']', ')':
		cast := false
		if l.depth > 0 {
			l.depth--
			if d := l.depth; d < 64 && c == ')' && l.casts&(1<<d) != 0 {
				cast = true
				l.casts &^= 1 << d
			}
		}
		l.lastEnds = !cast
	default:
		l.lastEnds = false
	}
}

// typeToken reports whether a token can be part of a type in a type hint.
func typeToken(kind Kind, text []byte) bool {
	t := Token{Kind: kind, Text: text}
	switch kind {
	case Word:
		return !t.IsWord("true") && !t.IsWord("false") && !t.IsWord("null") && !t.IsWord("nan") && !t.IsWord("infinity")
	case QuotedName:
		return true
	}
	return t.IsPunct('<') || t.IsPunct('>') || t.IsPunct(',') || t.IsPunct('.') || t.IsPunct(')')
}

// inBraces reports whether the innermost open bracket is a brace.
func (l *Lexer) inBraces() bool {
	d := l.depth - 1
	return d >= 0 && d < 64 && l.braces&(1<<d) != 0
}

// bounds reads the token that starts at i, which is not white space, and
// returns its kind and end. It returns scalars rather than a Token, which
// the lexer's callers would copy for every token.
func (l *Lexer) bounds(i int) (Kind, int) {
	src := l.src
	if i >= len(src) {
		return EOF, i
	}
	c := src[i]
	kind, end := Punct, i+1
	switch {
	case c == '\'' || c == '"':
		kind, end = String, skipQuoted(src, i)
		if c == '"' {
			kind = QuotedName
		}
	case c == '$' && at(src, i+1, '$'):
		kind, end = Bad, len(src)
		for j := i + 2; j+1 < len(src); j++ {
			if src[j] == '$' && src[j+1] == '$' {
				kind, end = String, j+2
				break
			}
		}
	case isUUIDAt(src, i):
		kind, end = UUID, i+36
	case c == '0' && i+1 < len(src) && src[i+1]|0x20 == 'x':
		kind, end = Blob, i+2
		for end < len(src) && isHex(src[end]) {
			end++
		}
	case isDigit(c) || c == '.' && i+1 < len(src) && isDigit(src[i+1]):
		kind, end = Number, scanNumber(src, i)
		if end < len(src) && isIdentByte(src[end]) {
			kind = Duration
			for end < len(src) && isIdentByte(src[end]) {
				end++
			}
		}
	case isLetter(c):
		kind, end = Word, i+1
		for end < len(src) && isIdentByte(src[end]) {
			end++
		}
	case c == '?':
		kind = Marker
	case c == ':':
		// A named marker, unless a separator in a map or user type literal.
		if l.inBraces() && l.lastEnds {
			break
		}
		j := SkipSpace(src, i+1)
		if j < len(src) && (isLetter(src[j]) || src[j] == '"') {
			if k, e := l.bounds(j); k == Word || k == QuotedName {
				kind, end = Marker, e
			}
		}
	case (c == '<' || c == '>' || c == '!') && at(src, i+1, '='):
		end = i + 2
	}
	if end > len(src) {
		kind, end = Bad, len(src)
	}
	if (kind == Blob || kind == UUID) && end < len(src) && isIdentByte(src[end]) {
		kind = Bad
	}
	return kind, end
}

// MarkerName returns a named marker's name token (Word or QuotedName), for
// a Marker token t of the lexer's text.
func (l *Lexer) MarkerName(t Token) Token {
	if t.Kind != Marker || len(t.Text) < 2 {
		return Token{}
	}
	i := SkipSpace(l.src, t.Start+1)
	kind, end := l.bounds(i)
	return Token{Kind: kind, Text: l.src[i:end], Start: i, End: end}
}

// scanNumber returns the end of the integer or float at src[i], a digit or
// a '.' before one: digits, then a fraction, then an exponent.
func scanNumber(src []byte, i int) int {
	for i < len(src) && isDigit(src[i]) {
		i++
	}
	if i < len(src) && src[i] == '.' {
		i++
		for i < len(src) && isDigit(src[i]) {
			i++
		}
	}
	if i < len(src) && src[i]|0x20 == 'e' {
		j := i + 1
		if j < len(src) && (src[j] == '+' || src[j] == '-') {
			j++
		}
		if j < len(src) && isDigit(src[j]) {
			for i = j; i < len(src) && isDigit(src[i]); i++ {
			}
		}
	}
	return i
}

// skipQuoted returns the index after the quoted literal or identifier that
// starts at q[i], or len(q)+1 if it is not closed; a doubled quote stands
// for itself.
func skipQuoted(q []byte, i int) int {
	quote := q[i]
	for j := i + 1; j < len(q); j++ {
		if q[j] == quote {
			if j+1 < len(q) && q[j+1] == quote {
				j++
				continue
			}
			return j + 1
		}
	}
	return len(q) + 1
}

// SkipSpace returns the offset of the first byte at or after i that is not
// white space or in a comment.
func SkipSpace(q []byte, i int) int {
	for i < len(q) {
		switch c := q[i]; {
		case IsSpace(c):
			i++
		case c == '-' && at(q, i+1, '-'), c == '/' && at(q, i+1, '/'):
			for i < len(q) && q[i] != '\n' {
				i++
			}
		case c == '/' && at(q, i+1, '*'):
			i += 2
			for i+1 < len(q) && !(q[i] == '*' && q[i+1] == '/') {
				i++
			}
			i += 2
		default:
			return i
		}
	}
	return len(q)
}

func at(b []byte, i int, c byte) bool { return i < len(b) && b[i] == c }

// IsSpace reports whether c is white space between CQL tokens.
func IsSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isDigit(c byte) bool  { return '0' <= c && c <= '9' }
func isLetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }
func isHex(c byte) bool    { return isDigit(c) || 'a' <= c|0x20 && c|0x20 <= 'f' }

func isIdentByte(c byte) bool { return isLetter(c) || isDigit(c) || c == '_' }

// isUUIDAt reports whether a uuid (8-4-4-4-12 hex digits) starts at i and
// is not the end of a longer word.
func isUUIDAt(b []byte, i int) bool {
	if len(b)-i < 36 || (i > 0 && isIdentByte(b[i-1])) {
		return false
	}
	for k := range 36 {
		c := b[i+k]
		switch k {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !isHex(c) {
				return false
			}
		}
	}
	return true
}
