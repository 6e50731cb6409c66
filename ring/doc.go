// Package ring says which nodes of a Cassandra or ScyllaDB cluster hold a
// token, so that the proxy can send a request to a replica of its
// partition, and which shard of a ScyllaDB node serves it.
//
// A [Ring] is the cluster's nodes ([Node]: host id, CQL address,
// datacenter, rack, tokens) and, for each keyspace, a [Placement]: the
// replicas of every token range, computed by [New] as Cassandra 5.0
// computes natural replicas for the keyspace's [Replication]
// (SimpleStrategy, NetworkTopologyStrategy with its racks,
// EverywhereStrategy; LocalStrategy has no placement). A lookup is a
// binary search over the ring's tokens and a slice of a precomputed
// array, and allocates nothing. Building a ring is cheap enough to redo on
// every topology or schema change: 300 nodes of 256 tokens each, with
// four distinct placements, take 33 to 77 ms and 12 MB on a busy 2-core
// machine (go test -run '^$' -bench New -count 3 ./ring), 30 nodes of 16
// tokens each under 0.25 ms. [ParseReplication] reads a replication map as
// system_schema.keyspaces stores it. [Sharding] is a ScyllaDB node's split
// of its tokens among its shards, read from its SUPPORTED options by
// [ParseSharding]; [Sharding.ShardOf] gives a token's shard and
// [Sharding.ShardOfPort] the shard a connection to the shard-aware port
// lands on. Package ring/loader reads a ring from a cluster's system
// tables.
//
// The package knows tokens, nodes and replication maps only: the caller
// computes a request's token (package schema), picks among the replicas,
// dials them, and tells which are up. Replicas are the natural ones:
// nodes joining, leaving or moving, and so pending ranges, are not
// modelled, and with transient replication only full replicas are listed.
// Any number of tokens per node works, one included.
//
// Not handled: partitioners other than Murmur3Partitioner (a token is an
// int64); ScyllaDB keyspaces that use tablets, whose tables' tokens are
// placed by tablet and not by the ring, so that ring/loader leaves them
// out and they have no placement (Cassandra has no tablets); and
// strategies other than the four above, whose keyspaces New leaves out.
package ring
