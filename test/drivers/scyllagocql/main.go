// Command scyllagocql exercises a CQL endpoint with ScyllaDB's fork of gocql
// (github.com/scylladb/gocql, which keeps the module path
// github.com/gocql/gocql; go.mod replaces one with the other), as an
// application does with the driver's defaults.
//
// Usage: scyllagocql driver|limits. "driver" checks what a transparent proxy
// must preserve (see driver.go); "limits" floods a limited partition and
// reports what each refusal cost (see limits.go).
//
// Environment: CQL_HOST (127.0.0.1), CQL_PORT (9042), CQL_USER and
// CQL_PASSWORD (cassandra / cassandra), CQL_PROTOCOL (empty: the driver
// negotiates; the fork speaks protocol v5 without its segments, as ScyllaDB
// does, so only v3 and v4 work with Cassandra), CQL_COMPRESSION (none or
// snappy; none), CQL_OPT_IN (1: the driver opts in to SCYLLA_RATE_LIMIT_ERROR
// as it does whenever a server advertises it; 0: the server's SUPPORTED
// reaches the driver without it, as from a server that does not advertise
// it, so the driver does not opt in). The subcommands read more.
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/gocql/gocql"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: scyllagocql driver|limits")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "driver":
		err = runDriver()
	case "limits":
		err = runLimits()
	default:
		fmt.Fprintf(os.Stderr, "scyllagocql: %s: want driver or limits\n", os.Args[1])
		os.Exit(2)
	}
	if err != nil {
		fmt.Printf("FAIL %v\n", err)
		os.Exit(1)
	}
}

// envOr returns the environment variable name, or def when it is unset or
// empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// envInt returns the environment variable name as an integer, or def when
// it is unset or empty; a value that does not parse is a usage error.
func envInt(name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s=%s: not an integer\n", name, v)
		os.Exit(2)
	}
	return n
}

// newCluster returns the settings of a session to CQL_HOST:CQL_PORT as
// CQL_USER, otherwise the driver's defaults (among them no retry policy
// and statements not idempotent), but for longer timeouts on a shared
// machine. d dials every connection.
func newCluster(d *dialer) (*gocql.ClusterConfig, error) {
	c := gocql.NewCluster(envOr("CQL_HOST", "127.0.0.1"))
	c.Port = envInt("CQL_PORT", 9042)
	c.ProtoVersion = envInt("CQL_PROTOCOL", 0)
	c.Authenticator = gocql.PasswordAuthenticator{
		Username: envOr("CQL_USER", "cassandra"),
		Password: envOr("CQL_PASSWORD", "cassandra"),
	}
	c.Timeout = 20 * time.Second
	c.ConnectTimeout = 10 * time.Second
	c.Consistency = gocql.One
	switch comp := envOr("CQL_COMPRESSION", "none"); comp {
	case "none":
	case "snappy":
		c.Compressor = gocql.SnappyCompressor{}
	default:
		return nil, fmt.Errorf("CQL_COMPRESSION=%s: want none or snappy", comp)
	}
	switch optIn := envOr("CQL_OPT_IN", "1"); optIn {
	case "1":
	case "0":
		d.hideRateLimitError = true
	default:
		return nil, fmt.Errorf("CQL_OPT_IN=%s: want 1 or 0", optIn)
	}
	c.Dialer = d
	return c, nil
}
