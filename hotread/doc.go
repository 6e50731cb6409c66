// Package hotread lets the proxy answer repeated reads of a hot partition
// without asking the cluster each time: identical reads in flight together
// reach the upstream once, and an answer may be served again for a short
// while if nothing was written to its partition since.
//
// A [Read] is the identity of a read request: every field that can change
// the bytes of its answer, and the partition it reads. [Generations] counts
// the writes to each partition, each table and everything, in fixed memory;
// the [Gen] a read started at says which writes it may have seen, and an
// answer is only good for reads at the same Gen. A [Cache] holds answers to
// reads for a short time, bounded in bytes. [Flights] is the table of reads
// in flight that identical reads join, so that only the first is forwarded
// and the others wait for its answer.
//
// The package knows bytes and keys only: it knows nothing of sockets,
// frames or CQL, nor which reads are hot enough to be worth it. The proxy
// decides that, says which partition a read reads, and says when a
// partition, a table or anything was written.
package hotread
