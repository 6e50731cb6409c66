package frame

// ScyllaDB's USING TIMEOUT clause, which Cassandra does not have.
//
// Supported: the clause as ScyllaDB's drivers append it to their own
// queries, last in the statement: USING TIMEOUT and a duration literal
// (digits and unit letters, such as 30000ms or 1m30s), in any case, with any
// spacing, and an optional final semicolon. Not supported: the clause
// anywhere else, or combined with TTL or TIMESTAMP (USING ... AND TIMEOUT),
// which TrimUsingTimeout leaves alone.

// TrimUsingTimeout returns the length of q without a trailing USING TIMEOUT
// clause, and whether q ends with one.
func TrimUsingTimeout(q []byte) (int, bool) {
	i := trimSpaceBack(q, len(q))
	if i > 0 && q[i-1] == ';' {
		i = trimSpaceBack(q, i-1)
	}
	// The duration: a number and its units, 30000ms or 1h2m3s.
	j := i
	for j > 0 && (isDigit(q[j-1]) || isLetter(q[j-1])) {
		j--
	}
	if j == i || !isDigit(q[j]) {
		return len(q), false
	}
	k, ok := wordBack(q, trimSpaceBack(q, j), j, "timeout")
	if !ok {
		return len(q), false
	}
	k, ok = wordBack(q, trimSpaceBack(q, k), k, "using")
	if n := trimSpaceBack(q, k); ok && n > 0 {
		return n, true
	}
	return len(q), false
}

// wordBack reports whether q[:end] ends with word (in any case) as a whole
// word preceded by space, with space between it and after (end < after),
// and returns where the word starts.
func wordBack(q []byte, end, after int, word string) (int, bool) {
	start := end - len(word)
	if end == after || start < 1 || !isSpace(q[start-1]) {
		return 0, false
	}
	for i := range len(word) {
		if c := q[start+i] | 0x20; c != word[i] {
			return 0, false
		}
	}
	return start, true
}

// trimSpaceBack returns the end of q[:i] without trailing white space.
func trimSpaceBack(q []byte, i int) int {
	for i > 0 && isSpace(q[i-1]) {
		i--
	}
	return i
}

func isSpace(c byte) bool  { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
func isDigit(c byte) bool  { return '0' <= c && c <= '9' }
func isLetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }
