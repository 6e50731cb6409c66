// Command cql runs CQL statements through gocql, the driver cqlguard's
// tests use, for machines without cqlsh. The statements come from the
// arguments, or else from standard input, one per line or over several
// lines ending with a semicolon.
//
//	cql -host 127.0.0.2:9042 -user cassandra -password cassandra "SELECT release_version FROM system.local"
//
// With -repeat N each statement runs N times, one after another, and cql
// prints how many were answered and how many got each error, instead of
// stopping at the first: a way to see a rate limit refuse.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

func main() {
	host := flag.String("host", "127.0.0.1:9042", "address of the node or proxy, `host:port`")
	user := flag.String("user", "", "user name (PasswordAuthenticator); empty: no login")
	password := flag.String("password", "", "the user's password")
	repeat := flag.Int("repeat", 1, "run each statement `N` times and count the outcomes")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: cql [flags] [STATEMENT ...]\n\nRuns each statement, from the arguments or else from standard input.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()

	stmts := flag.Args()
	if len(stmts) == 0 {
		var err error
		if stmts, err = readStatements(os.Stdin); err != nil {
			fmt.Fprintln(os.Stderr, "cql: reading statements:", err)
			os.Exit(2)
		}
	}
	if err := run(os.Stdout, *host, *user, *password, *repeat, stmts); err != nil {
		fmt.Fprintln(os.Stderr, "cql:", err)
		os.Exit(1)
	}
}

// readStatements splits r into statements: a statement ends at a line
// whose last character is a semicolon, and blank lines and lines starting
// with "--" are skipped.
func readStatements(r io.Reader) ([]string, error) {
	var stmts []string
	var cur strings.Builder
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "--") {
			continue
		}
		if cur.Len() > 0 {
			cur.WriteByte(' ')
		}
		cur.WriteString(line)
		if strings.HasSuffix(line, ";") {
			stmts = append(stmts, strings.TrimSuffix(cur.String(), ";"))
			cur.Reset()
		}
	}
	if cur.Len() > 0 {
		stmts = append(stmts, cur.String())
	}
	return stmts, sc.Err()
}

func run(w io.Writer, hostPort, user, password string, repeat int, stmts []string) error {
	host, portText, err := net.SplitHostPort(hostPort)
	if err != nil {
		return fmt.Errorf("-host %q: %w", hostPort, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return fmt.Errorf("-host %q: port: %w", hostPort, err)
	}
	c := gocql.NewCluster(host)
	c.Port = port
	c.Consistency = gocql.One
	c.Timeout = 10 * time.Second
	c.ConnectTimeout = 10 * time.Second
	if user != "" {
		c.Authenticator = gocql.PasswordAuthenticator{Username: user, Password: password}
	}
	s, err := c.CreateSession()
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", hostPort, err)
	}
	defer s.Close()

	for _, stmt := range stmts {
		if repeat <= 1 {
			if err := runOnce(w, s, stmt); err != nil {
				return fmt.Errorf("%s: %w", stmt, err)
			}
			continue
		}
		counts := map[string]int{}
		for range repeat {
			counts[outcome(s.Query(stmt).Exec())]++
		}
		printCounts(w, counts)
	}
	return nil
}

// runOnce runs stmt and prints the rows it returns, a line each.
func runOnce(w io.Writer, s *gocql.Session, stmt string) error {
	iter := s.Query(stmt).Iter()
	cols := iter.Columns()
	for {
		row := map[string]any{}
		if !iter.MapScan(row) {
			break
		}
		fields := make([]string, len(cols))
		for i, col := range cols {
			fields[i] = fmt.Sprint(row[col.Name])
		}
		fmt.Fprintln(w, strings.Join(fields, " | "))
	}
	return iter.Close()
}

// outcome names what a request got: "ok", or its error with the code the
// server answered with, so that refusals of one kind count together.
func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	var re gocql.RequestError
	if errors.As(err, &re) {
		return fmt.Sprintf("error 0x%04x: %s", re.Code(), re.Message())
	}
	return "error: " + err.Error()
}

// printCounts prints each outcome with its count, "ok" first.
func printCounts(w io.Writer, counts map[string]int) {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if (keys[i] == "ok") != (keys[j] == "ok") {
			return keys[i] == "ok"
		}
		return keys[i] < keys[j]
	})
	for _, k := range keys {
		fmt.Fprintf(w, "%d %s\n", counts[k], k)
	}
}
