package frame

// The lexer of the CQL recogniser (cql.go): identifiers, quoted
// identifiers, string literals ('...' and $$...$$), numbers (with a sign
// handled by the parser, fractions, exponents and duration units), uuids,
// blobs (0x...), bind markers (? and :name) and punctuation, skipping white
// space and comments (--, // and /* */).

type tokenKind uint8

const (
	tokEOF tokenKind = iota
	tokWord
	tokQuotedIdent
	tokString
	tokNumber
	tokUUID
	tokBlob
	tokMarker
	tokPunct
	tokBad // an unterminated string or identifier
)

type token struct {
	kind       tokenKind
	text       []byte
	start, end int
	nameKind   tokenKind // for :name markers, the kind of the name
}

// isWord reports whether t is the keyword w (lower case), in any case.
func (t token) isWord(w string) bool {
	if t.kind != tokWord || len(t.text) != len(w) {
		return false
	}
	for i := range len(w) {
		if t.text[i]|0x20 != w[i] {
			return false
		}
	}
	return true
}

func (t token) isPunct(c byte) bool {
	return t.kind == tokPunct && len(t.text) == 1 && t.text[0] == c
}

type lexer struct {
	src    []byte
	pos    int
	peeked bool
	ahead  token
}

func (l *lexer) peek() token {
	if !l.peeked {
		l.ahead = l.scan()
		l.peeked = true
	}
	return l.ahead
}

func (l *lexer) next() token {
	if l.peeked {
		l.peeked = false
		return l.ahead
	}
	return l.scan()
}

func (l *lexer) scan() token {
	l.pos = skipSpace(l.src, l.pos)
	start := l.pos
	if start >= len(l.src) {
		return token{kind: tokEOF, start: start, end: start}
	}
	c := l.src[start]
	kind := tokPunct
	end := start + 1
	switch {
	case c == '\'':
		kind, end = tokString, skipQuoted(l.src, start)
	case c == '"':
		kind, end = tokQuotedIdent, skipQuoted(l.src, start)
	case c == '$' && start+1 < len(l.src) && l.src[start+1] == '$':
		kind, end = tokBad, len(l.src)
		for i := start + 2; i+1 < len(l.src); i++ {
			if l.src[i] == '$' && l.src[i+1] == '$' {
				kind, end = tokString, i+2
				break
			}
		}
	case isUUIDAt(l.src, start):
		kind, end = tokUUID, start+36
	case c == '0' && start+1 < len(l.src) && l.src[start+1]|0x20 == 'x':
		kind, end = tokBlob, start+2
		for end < len(l.src) && isHex(l.src[end]) {
			end++
		}
	case c >= '0' && c <= '9' || c == '.' && start+1 < len(l.src) && l.src[start+1] >= '0' && l.src[start+1] <= '9':
		kind, end = tokNumber, l.number(start)
	case c == '_' || c|0x20 >= 'a' && c|0x20 <= 'z':
		kind, end = tokWord, start
		for end < len(l.src) && isIdentByte(l.src[end]) {
			end++
		}
	case c == '?':
		kind = tokMarker
	case c == ':' && start+1 < len(l.src) && (isIdentByte(l.src[start+1]) || l.src[start+1] == '"'):
		kind = tokMarker
		l.pos = start + 1
		name := l.scan()
		return token{kind: tokMarker, text: l.src[start:name.end], start: start, end: name.end, nameKind: name.kind}
	case (c == '<' || c == '>' || c == '!') && start+1 < len(l.src) && l.src[start+1] == '=':
		end = start + 2
	}
	if end > len(l.src) {
		kind, end = tokBad, len(l.src)
	}
	l.pos = end
	return token{kind: kind, text: l.src[start:end], start: start, end: end}
}

// number scans digits, a fraction, an exponent and duration units (1h30m).
func (l *lexer) number(i int) int {
	src := l.src
	for i < len(src) && (src[i] >= '0' && src[i] <= '9' || src[i] == '.') {
		i++
	}
	if i < len(src) && src[i]|0x20 == 'e' {
		j := i + 1
		if j < len(src) && (src[j] == '+' || src[j] == '-') {
			j++
		}
		if j < len(src) && src[j] >= '0' && src[j] <= '9' {
			i = j
			for i < len(src) && src[i] >= '0' && src[i] <= '9' {
				i++
			}
		}
	}
	// Duration units: letters and digits run together (1h30m, 12mo, 3µs is
	// not supported).
	for i < len(src) && isIdentByte(src[i]) {
		i++
	}
	return i
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c|0x20 >= 'a' && c|0x20 <= 'f'
}

// isUUIDAt reports whether a uuid (8-4-4-4-12 hex digits) starts at i and
// is not part of a longer word.
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
	return i+36 == len(b) || !isIdentByte(b[i+36])
}
