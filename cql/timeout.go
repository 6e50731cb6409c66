package cql

// ScyllaDB's USING TIMEOUT clause, which Cassandra does not have.
//
// Supported: the clause as ScyllaDB's drivers append it to their own
// queries, last in a SELECT, INSERT, UPDATE or DELETE: USING TIMEOUT and a
// duration (30000ms, 1m30s) or a number, in any case, with any spacing and
// comments, and an optional final semicolon. Not supported: the clause
// anywhere else (UPDATE t USING TIMEOUT 5s SET ...), or combined with TTL or
// TIMESTAMP (USING TTL 5 AND TIMEOUT 5s), which are left in place.

// trailingTimeout notes, after the USING of a clause at depth 0 whose
// statement text before it ends at end, whether the clause is a USING
// TIMEOUT that ends the text.
func (r *Recognizer) trailingTimeout(end int) {
	if !r.lex.Peek().IsWord("timeout") {
		return
	}
	r.lex.Next()
	d := r.lex.Peek()
	if d.Kind != Duration && d.Kind != Number {
		return
	}
	src := r.lex.Src()
	i := SkipSpace(src, d.End)
	if i < len(src) && src[i] == ';' {
		i = SkipSpace(src, i+1)
	}
	if i == len(src) && end > 0 {
		r.stmt.WithoutTimeout = end
	}
}
