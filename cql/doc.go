// Package cql reads CQL text: one lexer (lexer.go), and on it a recogniser
// of statements (recognize.go, term.go) that says which table a statement
// touches, whether it reads or writes, which terms restrict its partition
// key, which table a SELECT reads, and where a trailing USING TIMEOUT
// clause starts (timeout.go). Package schema's literal parser reads
// literals with the same lexer.
//
// It knows text, not bytes on the wire (package frame), nor a table's
// columns and types, nor how a literal serializes (package schema): a term
// is handed on as the text it was written as. Nothing in it allocates once
// a Recognizer's buffers have grown.
package cql
