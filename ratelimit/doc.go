// Package ratelimit counts operations per partition and decides, for each
// one, whether a partition is hot enough that the operation should be
// refused.
//
// A [Limiter] keeps its counters in fixed-size tables, one per shard, chosen
// by token; the memory they use is set once by [Config.MemoryBytes] and does
// not grow with the number of partitions or tables. A counter is keyed by a
// partition token and a [Label], which the caller assigns: typically one
// label for the reads and one for the writes of each table. Decisions take
// no lock shared between partitions, so that they scale with cores.
//
// Two algorithms are available. [AlgorithmScylla] reproduces ScyllaDB's
// per-partition rate limiter: lossy counting, counters halved at every
// wall-clock second, and probabilistic rejection above twice the limit, so
// that a cqlguard in front of a cluster behaves like the cluster would.
// [AlgorithmTokenBucket] is an exact token bucket per partition, for
// deployments that want a hard rate and a configurable burst.
//
// The package knows tokens and labels only; mapping a request to them is the
// caller's business.
package ratelimit
