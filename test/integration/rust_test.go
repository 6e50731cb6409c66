package integration

import "testing"

// TestRustDriverThroughProxy runs ScyllaDB's Rust driver client
// (test/drivers/rust) through the proxy with each compression the driver
// offers; it speaks only protocol v4.
//
// The driver takes a server advertising SCYLLA_RATE_LIMIT_ERROR, as the
// proxy does, for ScyllaDB, and then appends USING TIMEOUT to its schema
// and topology queries, which Cassandra refuses as a syntax error: its
// metadata falls back to the contact point alone and every schema change
// fails awaiting agreement. The compression runs turn that clause off
// (CQL_METADATA_USING_TIMEOUT=off); "defaults" runs the driver as
// configured out of the box.
func TestRustDriverThroughProxy(t *testing.T) {
	skipUnlessEnabled(t)
	for _, comp := range []string{"none", "lz4", "snappy"} {
		t.Run("v4-"+comp, func(t *testing.T) {
			runDriver(t, "rust", "CQL_COMPRESSION="+comp, "CQL_METADATA_USING_TIMEOUT=off",
				"CQL_KEYSPACE=cqlguard_rust_"+comp)
		})
	}
	t.Run("defaults", func(t *testing.T) {
		t.Skip("the proxy passes the driver's USING TIMEOUT on system_schema queries to Cassandra, which refuses it")
		runDriver(t, "rust", "CQL_KEYSPACE=cqlguard_rust_defaults")
	})
}
