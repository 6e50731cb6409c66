package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/apache/cassandra-gocql-driver/v2/lz4"
	"github.com/apache/cassandra-gocql-driver/v2/snappy"
)

// recordingDialer remembers every address the driver dials.
type recordingDialer struct {
	mu    sync.Mutex
	addrs []string
	d     net.Dialer
}

func (r *recordingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	r.mu.Lock()
	r.addrs = append(r.addrs, addr)
	r.mu.Unlock()
	return r.d.DialContext(ctx, network, addr)
}

func (r *recordingDialer) dialed() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.addrs)
	slices.Sort(out)
	return slices.Compact(out)
}

// hostRecorder is a host filter that remembers every host the driver
// learned of, and lets them all through.
type hostRecorder struct {
	mu    sync.Mutex
	hosts []string
}

func (h *hostRecorder) Accept(host *gocql.HostInfo) bool {
	h.mu.Lock()
	h.hosts = append(h.hosts, host.ConnectAddress().String())
	h.mu.Unlock()
	return true
}

func (h *hostRecorder) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := slices.Clone(h.hosts)
	slices.Sort(out)
	return slices.Compact(out)
}

func newCluster(host string, proto int, comp gocql.Compressor, d *recordingDialer, h *hostRecorder) *gocql.ClusterConfig {
	c := gocql.NewCluster(host)
	c.ProtoVersion = proto
	c.Compressor = comp
	c.Authenticator = gocql.PasswordAuthenticator{Username: user, Password: password}
	c.Dialer = d
	c.HostFilter = h
	c.Timeout = 20 * time.Second
	c.ConnectTimeout = 10 * time.Second
	c.Consistency = gocql.One
	return c
}

func TestGocqlThroughProxy(t *testing.T) {
	skipUnlessEnabled(t)
	variants := []struct {
		proto int
		name  string
		comp  gocql.Compressor
	}{
		{4, "none", nil},
		{4, "lz4", lz4.LZ4Compressor{}},
		{4, "snappy", snappy.SnappyCompressor{}},
		{5, "none", nil},
		{5, "lz4", lz4.LZ4Compressor{}},
	}
	for _, v := range variants {
		t.Run(fmt.Sprintf("v%d-%s", v.proto, v.name), func(t *testing.T) {
			exerciseGocql(t, proxyAddr, v.proto, v.comp, fmt.Sprintf("cqlguard_go_v%d_%s", v.proto, v.name))
		})
	}
}

// exerciseGocql runs gocql through the proxy at addr, on protocol proto
// with compression comp, in keyspace ks (dropped and made afresh), and
// checks that the driver learns of and dials the proxy alone.
func exerciseGocql(t *testing.T, addr string, proto int, comp gocql.Compressor, ks string) {
	t.Helper()
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	dialer, hosts := &recordingDialer{}, &hostRecorder{}
	cluster := newCluster(addr, proto, comp, dialer, hosts)
	s, err := cluster.CreateSession()
	if err != nil {
		t.Fatalf("connecting through the proxy: %v", err)
	}
	defer s.Close()
	must := func(step, stmt string, args ...any) {
		t.Helper()
		if err := s.Query(stmt, args...).Exec(); err != nil {
			t.Fatalf("%s: %s: %v", step, stmt, err)
		}
	}

	// The connection through the proxy negotiated what the driver asked for:
	// Cassandra's own view of its clients says so.
	iter := s.Query("SELECT protocol_version, client_options FROM system_views.clients").Iter()
	var version int
	var options map[string]string
	negotiated := false
	var seen []string
	for iter.Scan(&version, &options) {
		seen = append(seen, fmt.Sprint(version, options))
		wantComp := ""
		if comp != nil {
			wantComp = comp.Name()
		}
		if version == proto && options["COMPRESSION"] == wantComp {
			negotiated = true
		}
	}
	if err := iter.Close(); err != nil || !negotiated {
		t.Fatalf("no connection with protocol v%d and compression %v in system_views.clients: %v (%v)", proto, comp, seen, err)
	}

	must("drop keyspace", "DROP KEYSPACE IF EXISTS "+ks)
	must("create keyspace", "CREATE KEYSPACE "+ks+" WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}")
	must("create table", "CREATE TABLE "+ks+".t (a int, b text, c int, v text, PRIMARY KEY ((a, b), c))")

	// Inline literals and bound values.
	must("inline insert", "INSERT INTO "+ks+".t (a, b, c, v) VALUES (1, 'x', 1, 'inline')")
	must("bound insert", "INSERT INTO "+ks+".t (a, b, c, v) VALUES (?, ?, ?, ?)", 1, "x", 2, "bound")
	var v string
	if err := s.Query("SELECT v FROM " + ks + ".t WHERE a = 1 AND b = 'x' AND c = 1").Scan(&v); err != nil || v != "inline" {
		t.Fatalf("inline select: %q, %v", v, err)
	}
	if err := s.Query("SELECT v FROM "+ks+".t WHERE a = ? AND b = ? AND c = ?", 1, "x", 2).Scan(&v); err != nil || v != "bound" {
		t.Fatalf("prepared select: %q, %v", v, err)
	}

	// Batches, logged and unlogged.
	for i, typ := range []gocql.BatchType{gocql.UnloggedBatch, gocql.LoggedBatch} {
		b := s.Batch(typ)
		for c := range 5 {
			b.Query("INSERT INTO "+ks+".t (a, b, c, v) VALUES (?, ?, ?, ?)", 2+i, "batch", c, fmt.Sprint("b", c))
		}
		if err := b.Exec(); err != nil {
			t.Fatalf("batch %v: %v", typ, err)
		}
		var n int
		if err := s.Query("SELECT count(*) FROM "+ks+".t WHERE a = ? AND b = ?", 2+i, "batch").Scan(&n); err != nil || n != 5 {
			t.Fatalf("batch %v read back %d rows, %v", typ, n, err)
		}
	}

	// Paging over 6,000 rows of one partition.
	const rows = 6000
	var wg sync.WaitGroup
	errs := make(chan error, rows)
	work := make(chan int)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range work {
				if err := s.Query("INSERT INTO "+ks+".t (a, b, c, v) VALUES (?, ?, ?, ?)", 9, "paged", c, "p").Exec(); err != nil {
					errs <- err
				}
			}
		}()
	}
	for c := range rows {
		work <- c
	}
	close(work)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatalf("inserting rows to page: %v", err)
	}
	iter = s.Query("SELECT c FROM "+ks+".t WHERE a = ? AND b = ?", 9, "paged").PageSize(500).Iter()
	var c, got int
	for iter.Scan(&c) {
		if c != got {
			t.Fatalf("paging: row %d has c=%d", got, c)
		}
		got++
	}
	if err := iter.Close(); err != nil || got != rows {
		t.Fatalf("paging: %d of %d rows, %v", got, rows, err)
	}

	// USE: gocql sends it on every connection when a keyspace is set.
	kcluster := newCluster(addr, proto, comp, dialer, hosts)
	kcluster.Keyspace = ks
	ks2, err := kcluster.CreateSession()
	if err != nil {
		t.Fatalf("connecting with keyspace (USE): %v", err)
	}
	if err := ks2.Query("SELECT v FROM t WHERE a = 1 AND b = 'x' AND c = 1").Scan(&v); err != nil || v != "inline" {
		t.Fatalf("unqualified select after USE: %q, %v", v, err)
	}
	ks2.Close()

	// Errors reach the driver unchanged.
	err = s.Query("SELECT * FROM " + ks + ".missing_table").Exec()
	var reqErr gocql.RequestError
	if !errors.As(err, &reqErr) || reqErr.Code() != 0x2200 || !strings.Contains(reqErr.Message(), "missing_table") {
		t.Fatalf("missing table: want Invalid (0x2200) naming the table, got %v", err)
	}
	err = s.Query("SELEC nonsense").Exec()
	if !errors.As(err, &reqErr) || reqErr.Code() != 0x2000 {
		t.Fatalf("syntax error: want SyntaxError (0x2000), got %v", err)
	}

	must("drop keyspace", "DROP KEYSPACE "+ks)

	// The driver saw the proxy and nothing else.
	if got := hosts.seen(); !slices.Equal(got, []string{host}) {
		t.Errorf("driver learned of hosts %v, want only the proxy %s", got, host)
	}
	if got := dialer.dialed(); !slices.Equal(got, []string{addr}) {
		t.Errorf("driver dialed %v, want only the proxy %s", got, addr)
	}
}
