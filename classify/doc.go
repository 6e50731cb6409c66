// Package classify says what a request frame touches: for a QUERY,
// EXECUTE or BATCH, the table of its (first) statement, whether it reads
// or writes, and the partitions it reads or writes, each a table and a
// token; for a PREPARE, what the statement will touch once executed. A
// [Classifier] classifies one connection's requests, one at a time, into a
// [Classification] it reuses, allocating nothing in steady state. A
// [Registry] remembers, for every connection, what was learned of each
// statement prepared: its table and operation, where each partition key
// component comes from, and its text, with which a statement the schema
// did not know yet is resolved later, and another node can be asked to
// prepare it.
//
// What cannot be pinned to partitions (a scan, a token range, a partition
// key computed by a function, a table the schema does not know yet, more
// partitions than the bound) is reported as not pinned, never guessed; a
// statement of the system keyspaces is marked internal.
//
// It reads frame bodies with package frame, statements with package cql,
// and tables, literals and tokens with package schema; it knows nothing of
// sockets, compression, limits or what is done with a request. The caller
// decompresses the body, says which keyspace the connection is in (the
// upstream's answer to a USE), hands the schema snapshot and the bound on
// partitions, and answers an EXECUTE of a statement the registry does not
// hold.
package classify
