package integration

import (
	"fmt"
	"testing"
)

// TestJavaDriverThroughProxy runs the Apache Cassandra Java driver 4.x
// client (test/drivers/java) through the proxy, at protocol v5 and v4 with
// each compression the driver offers there.
func TestJavaDriverThroughProxy(t *testing.T) {
	skipUnlessEnabled(t)
	for _, v := range []struct{ proto, comp string }{{"5", "none"}, {"5", "lz4"}, {"4", "snappy"}} {
		t.Run(fmt.Sprintf("v%s-%s", v.proto, v.comp), func(t *testing.T) {
			runDriver(t, "java", "CQL_PROTOCOL="+v.proto, "CQL_COMPRESSION="+v.comp,
				fmt.Sprintf("CQL_KEYSPACE=cqlguard_java_v%s_%s", v.proto, v.comp))
		})
	}
}
