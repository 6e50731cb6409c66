package loader

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/cqlguard/cqlguard/ring"
)

// fakeRows replays rows through Scan and MapScan the way *gocql.Iter
// does: Scan by position, MapScan by column name.
type fakeRows struct {
	cols []string
	rows [][]any
	err  error
	scan error // set when a row does not fit the destinations
}

func (r *fakeRows) next() ([]any, bool) {
	if r.err != nil || r.scan != nil || len(r.rows) == 0 {
		return nil, false
	}
	row := r.rows[0]
	r.rows = r.rows[1:]
	return row, true
}

func (r *fakeRows) Scan(dest ...any) bool {
	row, ok := r.next()
	if !ok {
		return false
	}
	if len(row) != len(dest) {
		r.scan = fmt.Errorf("row has %d values for %d destinations", len(row), len(dest))
		return false
	}
	for i, v := range row {
		d := reflect.ValueOf(dest[i]).Elem()
		if v == nil {
			d.SetZero()
			continue
		}
		d.Set(reflect.ValueOf(v))
	}
	return true
}

func (r *fakeRows) MapScan(m map[string]any) bool {
	row, ok := r.next()
	if !ok {
		return false
	}
	for i, c := range r.cols {
		m[c] = row[i]
	}
	return true
}

func (r *fakeRows) Close() error {
	if r.err != nil {
		return r.err
	}
	return r.scan
}

// invalid is the server's Invalid error, as for a table it lacks.
type invalid struct{}

func (invalid) Code() int       { return gocql.ErrCodeInvalid }
func (invalid) Message() string { return "table does not exist" }
func (invalid) Error() string   { return "unconfigured table" }

var _ gocql.RequestError = invalid{}

// table is one system table's answer on a node: columns and rows, or an
// error.
type table struct {
	cols []string
	rows [][]any
	err  error
}

// node is what one host answers each of Loader's queries with.
type node map[string]table

// fakeCluster answers Loader's queries per host, in the order listed.
type fakeCluster struct {
	order []host
	nodes map[string]node
	asked []string // the hosts asked, in order
}

func (f *fakeCluster) hosts() []host { return f.order }

func (f *fakeCluster) query(_ context.Context, h host, stmt string) rows {
	f.asked = append(f.asked, h.id+": "+stmt)
	n, ok := f.nodes[h.id]
	if !ok {
		return &fakeRows{err: gocql.ErrNoConnections}
	}
	t, ok := n[stmt]
	if !ok {
		return &fakeRows{err: fmt.Errorf("unexpected query %q", stmt)}
	}
	return &fakeRows{cols: t.cols, rows: t.rows, err: t.err}
}

func hostAt(id, addr string) host { return host{id, netip.MustParseAddrPort(addr)} }

func id(n byte) gocql.UUID { return gocql.UUID{15: n} }

func ip(s string) net.IP { return net.ParseIP(s) }

var (
	localCols   = []string{"key", "host_id", "data_center", "rack", "tokens", "rpc_address", "rpc_port", "partitioner"}
	peersV2Cols = []string{"peer", "peer_port", "host_id", "data_center", "rack", "tokens", "native_address", "native_port"}
	peersCols   = []string{"peer", "host_id", "data_center", "rack", "tokens", "rpc_address"}
)

const murmur3 = "org.apache.cassandra.dht.Murmur3Partitioner"

// cassandra5 is a node of a three-node Cassandra 5.0 cluster, 127.0.0.2 to
// .4, one token each, as seen from 127.0.0.2, with keyspaces.
func cassandra5(keyspaces ...[]any) node {
	if keyspaces == nil {
		keyspaces = [][]any{
			{"system", map[string]string{"class": "org.apache.cassandra.locator.LocalStrategy"}},
			{"ks", map[string]string{"class": "org.apache.cassandra.locator.SimpleStrategy", "replication_factor": "2"}},
		}
	}
	return node{
		selectLocal: {cols: localCols, rows: [][]any{
			{"local", id(2), "dc1", "rack1", []string{"-100"}, ip("127.0.0.2"), 9042, murmur3},
		}},
		selectPeersV2: {cols: peersV2Cols, rows: [][]any{
			{ip("127.0.0.4"), 7000, id(4), "dc1", "rack1", []string{"100"}, ip("127.0.0.4"), 9042},
			{ip("127.0.0.3"), 7000, id(3), "dc1", "rack1", []string{"0"}, ip("127.0.0.3"), 9042},
		}},
		selectKeyspaces:   {rows: keyspaces},
		selectScyllaSpace: {err: invalid{}},
	}
}

// describe renders a ring's nodes and the replicas of keyspace ks at
// tokens, for comparison.
func describe(r *ring.Ring, ks string, tokens ...int64) string {
	if r == nil {
		return "<nil>"
	}
	var b strings.Builder
	for _, n := range r.Nodes() {
		fmt.Fprintf(&b, "%s %s %s/%s %v; ", n.Addr, n.HostID[len(n.HostID)-2:], n.Datacenter, n.Rack, n.Tokens)
	}
	for _, t := range tokens {
		fmt.Fprintf(&b, "%d:", t)
		for _, i := range r.Replicas(ks, t) {
			fmt.Fprintf(&b, " %s", r.Nodes()[i].Addr.Addr())
		}
		b.WriteString("; ")
	}
	return strings.TrimSuffix(b.String(), "; ")
}

func TestLoad(t *testing.T) {
	t.Parallel()
	h2, h3 := hostAt("h2", "127.0.0.2:9042"), hostAt("h3", "127.0.0.3:9042")
	edit := func(n node, stmt string, fn func(t *table)) node {
		n = maps.Clone(n)
		tb := n[stmt]
		tb.rows = append([][]any(nil), tb.rows...)
		fn(&tb)
		n[stmt] = tb
		return n
	}
	threeNodes := "127.0.0.2:9042 02 dc1/rack1 [-100]; 127.0.0.3:9042 03 dc1/rack1 [0]; 127.0.0.4:9042 04 dc1/rack1 [100]"
	tests := []struct {
		name    string
		cluster fakeCluster
		ks      string
		tokens  []int64
		want    string
		wantErr string   // substring of Load's error; "" for none
		absent  []string // keyspaces the ring must not place
	}{
		{
			name:    "cassandra 5: nodes in address order, replicas",
			cluster: fakeCluster{order: []host{h2}, nodes: map[string]node{"h2": cassandra5()}},
			ks:      "ks", tokens: []int64{-100, -99, 100, 101},
			want: threeNodes + "; -100: 127.0.0.2 127.0.0.3; -99: 127.0.0.3 127.0.0.4; 100: 127.0.0.4 127.0.0.2; 101: 127.0.0.2 127.0.0.3",
		},
		{
			name:    "local strategy has no replicas",
			cluster: fakeCluster{order: []host{h2}, nodes: map[string]node{"h2": cassandra5()}},
			ks:      "system", tokens: []int64{0},
			want: threeNodes + "; 0:",
		},
		{
			name: "system.peers where peers_v2 is missing, port of the host read from",
			cluster: fakeCluster{order: []host{hostAt("h2", "127.0.0.2:19042")}, nodes: map[string]node{"h2": edit(edit(cassandra5(), selectPeersV2, func(t *table) {
				*t = table{err: invalid{}}
			}), selectPeers, func(t *table) {
				*t = table{cols: peersCols, rows: [][]any{
					{ip("10.0.0.3"), id(3), "dc1", "rack1", []string{"0"}, ip("127.0.0.3")},
					{ip("127.0.0.4"), id(4), "dc1", "rack1", []string{"100"}, ip("0.0.0.0")},
				}}
			})}},
			ks:   "ks",
			want: "127.0.0.2:9042 02 dc1/rack1 [-100]; 127.0.0.3:19042 03 dc1/rack1 [0]; 127.0.0.4:19042 04 dc1/rack1 [100]",
		},
		{
			name: "unspecified or missing addresses and ports fall back",
			cluster: fakeCluster{order: []host{hostAt("h2", "127.0.0.2:9043")}, nodes: map[string]node{"h2": edit(edit(cassandra5(), selectLocal, func(t *table) {
				t.rows[0] = []any{"local", id(2), "dc1", "rack1", []string{"-100"}, ip("0.0.0.0"), nil, murmur3}
			}), selectPeersV2, func(t *table) {
				t.rows[0] = []any{ip("127.0.0.4"), 7000, id(4), "dc1", "rack1", []string{"100"}, ip("::"), 0}
				t.rows[1] = []any{ip("127.0.0.3"), 7000, id(3), "dc1", "rack1", []string{"0"}, nil, 9999}
			})}},
			ks:   "ks",
			want: "127.0.0.2:9043 02 dc1/rack1 [-100]; 127.0.0.3:9999 03 dc1/rack1 [0]; 127.0.0.4:9043 04 dc1/rack1 [100]",
		},
		{
			name: "peers it cannot place are left out",
			cluster: fakeCluster{order: []host{h2}, nodes: map[string]node{"h2": edit(cassandra5(), selectPeersV2, func(t *table) {
				t.rows = append(t.rows,
					[]any{ip("127.0.0.5"), 7000, id(5), "dc1", "rack1", nil, ip("127.0.0.5"), 9042},
					[]any{ip("127.0.0.6"), 7000, gocql.UUID{}, nil, "rack1", []string{"7"}, ip("127.0.0.6"), 9042},
					[]any{ip("127.0.0.7"), 7000, id(7), "dc1", "rack1", []string{"x"}, ip("127.0.0.7"), 9042},
					[]any{ip("127.0.0.8"), 7000, id(3), "dc1", "rack1", []string{"8"}, ip("127.0.0.8"), 9042},
				)
			})}},
			ks:   "ks",
			want: threeNodes,
			wantErr: "peer 127.0.0.5 in the peers of 127.0.0.2:9042 left out: no tokens\n" +
				"ring: peer 127.0.0.6 in the peers of 127.0.0.2:9042 left out: no host_id, data_center\n" +
				"ring: peer 127.0.0.7 in the peers of 127.0.0.2:9042 left out: token \"x\" is not a Murmur3Partitioner token\n" +
				"ring: peer 127.0.0.8 in the peers of 127.0.0.2:9042 left out: host id 00000000-0000-0000-0000-000000000003 already seen at peer 127.0.0.3",
		},
		{
			name: "keyspaces it cannot place are left out, tablets keyspaces silently",
			cluster: fakeCluster{order: []host{h2}, nodes: map[string]node{"h2": edit(cassandra5(
				[]any{"ks", map[string]string{"class": "SimpleStrategy", "replication_factor": "1"}},
				[]any{"odd", map[string]string{"class": "com.example.Custom"}},
				[]any{"bad", map[string]string{"class": "SimpleStrategy", "replication_factor": "two"}},
				[]any{"tablets", map[string]string{"class": "NetworkTopologyStrategy", "dc1": "3"}},
				[]any{"vnodes", map[string]string{"class": "NetworkTopologyStrategy", "dc1": "3"}},
			), selectScyllaSpace, func(t *table) {
				*t = table{rows: [][]any{{"tablets", &[]int{0}[0]}, {"vnodes", nil}}}
			})}},
			ks: "vnodes", tokens: []int64{0},
			want:   threeNodes + "; 0: 127.0.0.3 127.0.0.4 127.0.0.2",
			absent: []string{"tablets", "odd", "bad"},
			wantErr: "ring: keyspace bad left out: replication: replication factor \"two\": not a count\n" +
				"ring: keyspace odd left out: replication: class \"com.example.Custom\": unknown replication strategy",
		},
		{
			name: "a host that fails is passed over for the next",
			cluster: fakeCluster{order: []host{h3, h2}, nodes: map[string]node{
				"h3": edit(cassandra5(), selectLocal, func(t *table) { *t = table{err: errors.New("overloaded")} }),
				"h2": cassandra5(),
			}},
			ks:   "ks",
			want: threeNodes,
		},
		{
			name: "no host answers",
			cluster: fakeCluster{order: []host{h2, h3}, nodes: map[string]node{
				"h2": edit(cassandra5(), selectPeersV2, func(t *table) { *t = table{err: errors.New("timeout")} }),
			}},
			want: "<nil>",
			wantErr: "ring: reading from 127.0.0.2:9042: reading system.peers_v2: timeout\n" +
				"ring: reading from 127.0.0.3:9042: reading system.local: gocql: no hosts available in the pool",
		},
		{
			name:    "no hosts",
			cluster: fakeCluster{},
			want:    "<nil>", wantErr: "no hosts",
		},
		{
			name: "another partitioner",
			cluster: fakeCluster{order: []host{h2}, nodes: map[string]node{"h2": edit(cassandra5(), selectLocal, func(t *table) {
				t.rows[0] = []any{"local", id(2), "dc1", "rack1", []string{"-100"}, ip("127.0.0.2"), 9042, "org.apache.cassandra.dht.RandomPartitioner"}
			})}},
			want: "<nil>", wantErr: "partitioner org.apache.cassandra.dht.RandomPartitioner",
		},
		{
			name: "a token owned twice",
			cluster: fakeCluster{order: []host{h2}, nodes: map[string]node{"h2": edit(cassandra5(), selectPeersV2, func(t *table) {
				t.rows[0] = []any{ip("127.0.0.4"), 7000, id(4), "dc1", "rack1", []string{"0"}, ip("127.0.0.4"), 9042}
			})}},
			want: "<nil>", wantErr: "both own token 0",
		},
		{
			name: "system.local without its row",
			cluster: fakeCluster{order: []host{h2}, nodes: map[string]node{"h2": edit(cassandra5(), selectLocal, func(t *table) {
				t.rows = nil
			})}},
			want: "<nil>", wantErr: "system.local has 0 rows",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := (&Loader{q: &tt.cluster}).Load(context.Background())
			if got := describe(r, tt.ks, tt.tokens...); got != tt.want {
				t.Errorf("ring:\n got %s\nwant %s", got, tt.want)
			}
			for _, ks := range tt.absent {
				if r.Placement(ks) != nil {
					t.Errorf("keyspace %s is placed", ks)
				}
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Load: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Load error:\n got %v\nwant one with %s", err, tt.wantErr)
			}
		})
	}
}

// TestLoadReadsOneHost: every table is read from the same host.
func TestLoadReadsOneHost(t *testing.T) {
	t.Parallel()
	f := &fakeCluster{
		order: []host{hostAt("h2", "127.0.0.2:9042"), hostAt("h3", "127.0.0.3:9042")},
		nodes: map[string]node{"h2": cassandra5(), "h3": cassandra5()},
	}
	if _, err := (&Loader{q: f}).Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"h2: " + selectLocal, "h2: " + selectPeersV2, "h2: " + selectKeyspaces, "h2: " + selectScyllaSpace}
	if !reflect.DeepEqual(f.asked, want) {
		t.Errorf("queries:\n got %q\nwant %q", f.asked, want)
	}
}
