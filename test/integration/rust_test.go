package integration

import "testing"

// TestRustDriverThroughProxy runs ScyllaDB's Rust driver client
// (test/drivers/rust) through the proxy with each compression the driver
// offers; it speaks only protocol v4.
//
// The driver takes a server advertising SCYLLA_RATE_LIMIT_ERROR, as the
// proxy does, for ScyllaDB, and appends ScyllaDB's USING TIMEOUT to its
// schema and topology queries; the proxy drops the clause, which Cassandra
// refuses, so the driver runs as it is configured out of the box.
func TestRustDriverThroughProxy(t *testing.T) {
	skipUnlessEnabled(t)
	for _, comp := range []string{"none", "lz4", "snappy"} {
		t.Run("v4-"+comp, func(t *testing.T) {
			runDriver(t, "rust", "CQL_COMPRESSION="+comp, "CQL_KEYSPACE=cqlguard_rust_"+comp)
		})
	}
}
