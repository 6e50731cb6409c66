// Command probe exits 0 and prints release_version when a CQL node accepts a
// login and answers a query; test/cassandra/cassandra.sh uses it to wait for
// Cassandra and for its cqlsh-check.
package main

import (
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
	c.DisableInitialHostLookup = true
	s, err := c.CreateSession()
	if err != nil {
		fail(err)
	}
	defer s.Close()
	var v string
	if err := s.Query("SELECT release_version FROM system.local").Scan(&v); err != nil {
		fail(err)
	}
	fmt.Println(v)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "probe:", err)
	os.Exit(1)
}
