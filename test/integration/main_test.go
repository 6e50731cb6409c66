// Package integration runs real drivers through cqlguard against a real
// Apache Cassandra 5, started by test/cassandra/cassandra.sh. The tests run
// when CQLGUARD_INTEGRATION=1 (make test sets it) and skip otherwise.
//
// A run that selects only tests in front of the fake node or against the
// three-node cluster (withoutCassandra) starts no single node. The cluster,
// test/cassandra/cluster.sh on 127.0.1.1 to 127.0.1.3, starts when the
// first test asks for it (useCluster) and stops after the run.
//
// Cassandra listens on 127.0.0.2:9042 and the proxy on 127.0.0.1:9042: a
// driver that slipped past the proxy would dial 127.0.0.2, which the tests
// watch for.
package integration

import (
	"context"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/classify"
	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/proxy"
)

const (
	cassandraAddr = "127.0.0.2:9042"
	proxyHost     = "127.0.0.1"
	proxyAddr     = proxyHost + ":9042"
	user          = "cassandra"
	password      = "cassandra"
)

var enabled = os.Getenv("CQLGUARD_INTEGRATION") == "1"

// repoRoot is the repository's top directory.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func TestMain(m *testing.M) {
	if !enabled {
		fmt.Println("integration tests skipped: set CQLGUARD_INTEGRATION=1 (make test does)")
		os.Exit(m.Run())
	}
	flag.Parse()
	var code int
	if needsCassandra() {
		code = runWithCassandra(m)
	} else {
		code = m.Run()
	}
	stopClusterIfUsed()
	os.Exit(code)
}

// withoutCassandra are the tests that need no single node: those in front
// of the fake node and those against the three-node cluster. A -run that
// selects none but these starts no single node.
var withoutCassandra = map[string]bool{"TestPrometheus": true, "TestScaleOut": true, "TestClusterCounters": true, "TestDriversRoutedOnCluster": true}

// needsCassandra reports whether -run selects a test of this package that
// is not in withoutCassandra, or cannot tell. The tests' names come from
// the package's source, as testing.M does not list them.
func needsCassandra() bool {
	run := flag.Lookup("test.run").Value.String()
	if run == "" {
		return true
	}
	// Only the top level of the pattern selects top-level tests.
	re, err := regexp.Compile(strings.SplitN(run, "/", 2)[0])
	if err != nil {
		return true
	}
	files, err := filepath.Glob(filepath.Join(repoRoot(), "test", "integration", "*_test.go"))
	if err != nil || len(files) == 0 {
		return true
	}
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			return true
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Name.Name == "TestMain" {
				continue
			}
			if re.MatchString(fn.Name.Name) && !withoutCassandra[fn.Name.Name] {
				return true
			}
		}
	}
	return false
}

func runWithCassandra(m *testing.M) int {
	script := filepath.Join(repoRoot(), "test", "cassandra", "cassandra.sh")
	start := exec.Command("bash", script, "start")
	start.Stdout, start.Stderr = os.Stdout, os.Stderr
	if err := start.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "starting Cassandra:", err)
		return 1
	}
	if os.Getenv("CQLGUARD_KEEP_CASSANDRA") != "1" {
		defer func() {
			stop := exec.Command("bash", script, "stop")
			stop.Stdout, stop.Stderr = os.Stdout, os.Stderr
			stop.Run()
		}()
	}
	_, stop, err := startProxy(config.Config{Listen: proxyAddr, Upstreams: []string{cassandraAddr}}, proxy.WithObserver(observed.add))
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting cqlguard:", err)
		return 1
	}
	defer stop()
	return m.Run()
}

// startProxy runs a proxy in this process with cfg over the defaults, and
// returns a function that drains it.
func startProxy(over config.Config, opts ...proxy.Option) (addr string, stop func(), err error) {
	// Listening first lets over.Listen name port 0 and the proxy advertise
	// the port it serves on.
	ln, err := net.Listen("tcp", over.Listen)
	if err != nil {
		return "", nil, err
	}
	cfg := config.Default()
	cfg.Listen = ln.Addr().String()
	cfg.Advertise = over.Advertise
	cfg.Upstreams = over.Upstreams
	if over.Mode != "" {
		cfg.Mode = over.Mode
	}
	cfg.Peers = over.Peers
	cfg.TLS = over.TLS
	cfg.UpstreamTLS = over.UpstreamTLS
	// The proxy reads the schema with the test cluster's superuser, so
	// that it can classify inline statements.
	cfg.Schema.Username = user
	cfg.Schema.PasswordEnv = "CQLGUARD_TEST_PASSWORD"
	os.Setenv(cfg.Schema.PasswordEnv, password)
	level := zerolog.WarnLevel
	if os.Getenv("CQLGUARD_DEBUG") == "1" {
		level = zerolog.DebugLevel
	}
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).Level(level).With().Timestamp().Str("proxy", cfg.Listen).Logger()
	p, err := proxy.New(cfg, log, prometheus.NewRegistry(), opts...)
	if err != nil {
		ln.Close()
		return "", nil, err
	}
	go p.Serve(ln)
	return cfg.Listen, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Shutdown(ctx)
	}, nil
}

// fileProxy is a proxy serving in this process from a configuration file.
type fileProxy struct {
	cfg  config.Config
	port string
	reg  *prometheus.Registry
	seen *classLog // the classifications of the watched keyspace's requests
}

// serveFile runs a proxy, until the test ends, from a configuration file
// holding a listen line on a free port and then body, loaded as cqlguard
// loads it, watching the requests of keyspace watched.
func serveFile(t *testing.T, body, watched string) *fileProxy {
	t.Helper()
	os.Setenv("CQLGUARD_TEST_PASSWORD", password)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fp := &fileProxy{reg: prometheus.NewRegistry(), seen: &classLog{watched: map[string]bool{watched: true}, byTable: map[string][]observation{}}}
	_, fp.port, _ = net.SplitHostPort(ln.Addr().String())
	path := filepath.Join(t.TempDir(), "cqlguard.yaml")
	if err := os.WriteFile(path, []byte("listen: "+ln.Addr().String()+"\n"+body), 0o600); err != nil {
		ln.Close()
		t.Fatal(err)
	}
	if fp.cfg, err = config.Load(path); err != nil {
		ln.Close()
		t.Fatal(err)
	}
	serveProxy(t, ln, fp.cfg, fp.reg, proxy.WithObserver(fp.seen.add))
	return fp
}

// serveProxy runs a proxy in this process with cfg on ln, logging warnings,
// and drains it when the test ends.
func serveProxy(t *testing.T, ln net.Listener, cfg config.Config, reg *prometheus.Registry, opts ...proxy.Option) *proxy.Proxy {
	t.Helper()
	p, err := proxy.New(cfg, zerolog.New(os.Stderr).Level(zerolog.WarnLevel), reg, opts...)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	go p.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Shutdown(ctx)
	})
	return p
}

// floodGocql sends n writes and then n reads of partition 50 of table
// (k int, c int) through s, counting into write and read the requests
// answered and those refused, the errors refused accepts; any other error
// fails the test, which names want. It returns how long the flood took.
func floodGocql(t *testing.T, s *gocql.Session, table string, n int, write, read *struct{ Accepted, Refused int },
	refused func(op string, err error) bool, want string) (seconds float64) {
	t.Helper()
	start := time.Now()
	for _, op := range []struct {
		name   string
		stmt   string
		counts *struct{ Accepted, Refused int }
	}{
		{"write", "INSERT INTO " + table + " (k, c) VALUES (50, ?)", write},
		{"read", "SELECT c FROM " + table + " WHERE k = 50 AND c = ?", read},
	} {
		for i := range n {
			switch err := s.Query(op.stmt, i).Exec(); {
			case err == nil:
				op.counts.Accepted++
			case refused(op.name, err):
				if op.counts.Refused == 0 {
					t.Logf("refused %s: %T: %v", op.name, err, err)
				}
				op.counts.Refused++
			default:
				t.Fatalf("%s: %T: %v; want %s", op.name, err, err, want)
			}
		}
	}
	return time.Since(start).Seconds()
}

// sessionThrough opens a gocql session on addr, one connection, as the test
// cluster's superuser, with edit's changes to the settings, and runs stmts
// (keyspaces and tables) on it.
func sessionThrough(t *testing.T, addr string, edit func(*gocql.ClusterConfig), stmts ...string) *gocql.Session {
	t.Helper()
	c := gocql.NewCluster(addr)
	c.Authenticator = gocql.PasswordAuthenticator{Username: user, Password: password}
	c.NumConns = 1
	edit(c)
	s, err := c.CreateSession()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range stmts {
		if err := s.Query(q).Exec(); err != nil {
			s.Close()
			t.Fatalf("%s: %v", q, err)
		}
	}
	return s
}

func skipUnlessEnabled(t *testing.T) {
	t.Helper()
	if !enabled {
		t.Skip("set CQLGUARD_INTEGRATION=1")
	}
}

// observed records the classifications of the shared proxy's requests to
// the keyspaces tests watch.
var observed = &classLog{watched: map[string]bool{}, byTable: map[string][]observation{}}

// observation is one request's classification, copied out of the proxy's
// reused buffers.
type observation struct {
	op     classify.Op
	pinned bool
	tokens []int64
}

// classLog keeps the observations of requests to watched keyspaces, by
// table.
type classLog struct {
	mu      sync.Mutex
	watched map[string]bool
	byTable map[string][]observation // by keyspace.table
}

// watch starts recording requests to keyspace.
func (l *classLog) watch(keyspace string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.watched[keyspace] = true
}

// take returns what was recorded for keyspace.table since the last take,
// and forgets it.
func (l *classLog) take(keyspace, table string) []observation {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := keyspace + "." + table
	out := l.byTable[key]
	delete(l.byTable, key)
	return out
}

// takeForwarded returns how many reads and writes of keyspace.table were
// recorded since the last take, and forgets them: the requests the proxy
// let through, as the observer sees none it refused or shed.
func (l *classLog) takeForwarded(keyspace, table string) int {
	n := 0
	for _, o := range l.take(keyspace, table) {
		if o.op == classify.OpRead || o.op == classify.OpWrite {
			n++
		}
	}
	return n
}

func (l *classLog) add(c *classify.Classification) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.watched[string(c.Keyspace)] {
		return
	}
	o := observation{op: c.Op, pinned: c.Pinned}
	for _, p := range c.Partitions {
		o.tokens = append(o.tokens, p.Token)
	}
	key := string(c.Keyspace) + "." + string(c.Table)
	l.byTable[key] = append(l.byTable[key], o)
}
