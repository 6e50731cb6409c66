// Command probe exits 0 and prints release_version when a CQL node accepts a
// login and answers a query; test/cassandra/cassandra.sh uses it to wait for
// Cassandra, for its cqlsh-check and, with -nodes, to wait for a cluster.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

func main() {
	addr := flag.String("addr", "127.0.0.2:9042", "node address")
	user := flag.String("user", "cassandra", "login")
	password := flag.String("password", "cassandra", "password")
	nodes := flag.Int("nodes", 0, "also require that the node sees this many nodes UP, itself included (0: do not check)")
	flag.Parse()
	host, portStr, err := net.SplitHostPort(*addr)
	if err != nil {
		fail(err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		fail(err)
	}
	c := gocql.NewCluster(host)
	c.Port = port
	c.Authenticator = gocql.PasswordAuthenticator{Username: *user, Password: *password}
	c.ConnectTimeout = 3 * time.Second
	c.Timeout = 5 * time.Second
	c.NumConns = 1
	// The node alone: the queries below ask for its own view of the ring.
	c.DisableInitialHostLookup = true
	c.HostFilter = gocql.WhiteListHostFilter(host)
	s, err := c.CreateSession()
	if err != nil {
		fail(err)
	}
	defer s.Close()
	var v string
	if err := s.Query("SELECT release_version FROM system.local").Scan(&v); err != nil {
		fail(err)
	}
	if *nodes > 0 {
		if err := seesUp(s, *nodes); err != nil {
			fail(err)
		}
	}
	fmt.Println(v)
}

// seesUp returns nil when the node knows n−1 peers that own tokens and
// reads at consistency ALL a partition of system_distributed, which keeps
// three replicas: the node sends such a read only when it believes every
// replica UP, and it succeeds only when each of them answers. With up to
// three nodes the replicas are all of them.
func seesUp(s *gocql.Session, n int) error {
	var peer string
	var tokens []string
	peers := 0
	iter := s.Query("SELECT peer, tokens FROM system.peers_v2").Iter()
	for iter.Scan(&peer, &tokens) {
		if len(tokens) > 0 {
			peers++
		}
	}
	if err := iter.Close(); err != nil {
		return fmt.Errorf("reading system.peers_v2: %w", err)
	}
	if peers != n-1 {
		return fmt.Errorf("the node knows %d peers with tokens, want %d", peers, n-1)
	}
	err := s.Query("SELECT id FROM system_distributed.repair_history WHERE keyspace_name = 'cqlguard_probe' AND columnfamily_name = 'probe' LIMIT 1").
		Consistency(gocql.All).Exec()
	var unavailable *gocql.RequestErrUnavailable
	if errors.As(err, &unavailable) {
		return fmt.Errorf("the node sees %d of the %d replicas of system_distributed UP", unavailable.Alive, unavailable.Required)
	}
	if err != nil {
		return fmt.Errorf("reading system_distributed at consistency ALL: %w", err)
	}
	return nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "probe:", err)
	os.Exit(1)
}
