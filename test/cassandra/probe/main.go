// Command probe exits 0 when a CQL node accepts a login and answers a query;
// test/cassandra/cassandra.sh uses it to wait for Cassandra.
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
	host, port, err := net.SplitHostPort(*addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	c := gocql.NewCluster(host)
	c.Port, _ = strconv.Atoi(port)
	c.Authenticator = gocql.PasswordAuthenticator{Username: *user, Password: *password}
	c.ConnectTimeout = 2 * time.Second
	c.Timeout = 5 * time.Second
	c.DisableInitialHostLookup = true
	s, err := c.CreateSession()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer s.Close()
	var v string
	if err := s.Query("SELECT release_version FROM system.local").Scan(&v); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(v)
}
