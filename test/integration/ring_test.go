package integration

import (
	"context"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/cqlguard/cqlguard/ring"
	ringloader "github.com/cqlguard/cqlguard/ring/loader"
	"github.com/cqlguard/cqlguard/schema/loader"
)

// ringKeyspaces are keyspaces of the replications the ring places, each
// with a factor over the one node's count. (Cassandra refuses a
// datacenter it does not know.)
var ringKeyspaces = map[string]string{
	"cqlguard_ring_simple":    `{'class': 'SimpleStrategy', 'replication_factor': 3}`,
	"cqlguard_ring_nts":       `{'class': 'NetworkTopologyStrategy', 'datacenter1': 3}`,
	"cqlguard_ring_shorthand": `{'class': 'NetworkTopologyStrategy', 'replication_factor': 2}`,
}

// loadRing reads the ring through a session on upstreams, as the proxy
// dials them, and returns it with the session.
func loadRing(t *testing.T, upstreams ...string) (*ring.Ring, *gocql.Session) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := loader.Dial(ctx, loader.DialConfig{Upstreams: upstreams, Username: user, Password: password, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(s.Close)
	r, err := ringloader.New(s).Load(ctx)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return r, s
}

// checkPlacements checks that every keyspace of the ring has, at each of
// its nodes' tokens, either side of them and at the ends of the token
// range, distinct replicas as many as its replication asks of the ring's
// nodes, and that LocalStrategy keyspaces have none. It holds on any
// cluster without transient replication.
func checkPlacements(t *testing.T, r *ring.Ring, s *gocql.Session) {
	t.Helper()
	perDC := make(map[string]int)
	for _, n := range r.Nodes() {
		perDC[n.Datacenter]++
	}
	var tokens []int64
	for _, n := range r.Nodes() {
		for _, tok := range n.Tokens {
			tokens = append(tokens, tok, tok-1, tok+1)
		}
	}
	tokens = append(tokens, math.MinInt64, math.MaxInt64)
	var (
		ks string
		m  map[string]string
	)
	it := s.Query("SELECT keyspace_name, replication FROM system_schema.keyspaces").Iter()
	for it.Scan(&ks, &m) {
		repl, err := ring.ParseReplication(m)
		if err != nil {
			t.Errorf("keyspace %s: %v", ks, err)
			continue
		}
		want := 0
		switch repl.Strategy {
		case ring.SimpleStrategy:
			want = min(repl.Factor.All, len(r.Nodes()))
		case ring.NetworkTopologyStrategy:
			for dc, n := range perDC {
				f, ok := repl.Datacenters[dc]
				if !ok {
					f = repl.Factor
				}
				want += min(f.All, n)
			}
		}
		for _, tok := range tokens {
			got := r.Replicas(ks, tok)
			if len(got) != want || len(slices.Compact(slices.Sorted(slices.Values(got)))) != want {
				t.Errorf("keyspace %s %v: token %d has replicas %v, want %d distinct", ks, repl, tok, got, want)
				break
			}
		}
		m = nil
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestRingLoad(t *testing.T) {
	skipUnlessEnabled(t)
	_, s := loadRing(t, cassandraAddr)
	for ks, repl := range ringKeyspaces {
		for _, stmt := range []string{"DROP KEYSPACE IF EXISTS " + ks, "CREATE KEYSPACE " + ks + " WITH replication = " + repl} {
			if err := s.Query(stmt).Exec(); err != nil {
				t.Fatalf("%s: %v", stmt, err)
			}
		}
		t.Cleanup(func() { s.Query("DROP KEYSPACE IF EXISTS " + ks).Exec() })
	}
	// Read again now that the keyspaces exist.
	r, _ := loadRing(t, cassandraAddr)

	var (
		hostID   gocql.UUID
		dc, rack string
		tokens   []string
	)
	if err := s.Query("SELECT host_id, data_center, rack, tokens FROM system.local").Scan(&hostID, &dc, &rack, &tokens); err != nil {
		t.Fatal(err)
	}
	if len(r.Nodes()) != 1 {
		t.Fatalf("ring of %d nodes, want 1: %+v", len(r.Nodes()), r.Nodes())
	}
	n := r.Nodes()[0]
	if n.HostID != hostID.String() || n.Addr != netip.MustParseAddrPort(cassandraAddr) || n.Datacenter != dc || n.Rack != rack {
		t.Errorf("node %+v; system.local says host id %s, %s/%s", n, hostID, dc, rack)
	}
	want := make([]int64, len(tokens))
	for i, s := range tokens {
		want[i], _ = strconv.ParseInt(s, 10, 64)
	}
	if got := slices.Sorted(slices.Values(n.Tokens)); !slices.Equal(got, slices.Sorted(slices.Values(want))) || r.Tokens() != len(want) {
		t.Errorf("tokens %v, system.local says %v", got, want)
	}
	t.Logf("node %s %s %s/%s, %d tokens", n.Addr, n.HostID, n.Datacenter, n.Rack, len(n.Tokens))

	// One node holds every token of every keyspace it places, whatever the
	// factor; Cassandra expands the shorthand into datacenter1.
	for ks := range ringKeyspaces {
		p := r.Placement(ks)
		if p == nil {
			t.Errorf("keyspace %s has no placement", ks)
			continue
		}
		t.Logf("%s: %v", ks, p.Replication())
	}
	if got := r.Placement("cqlguard_ring_shorthand").Replication().Datacenters[dc]; got != (ring.Factor{All: 2}) {
		t.Errorf("shorthand keyspace stored with %v in %s, want 2", got, dc)
	}
	if r.Placement("system") != nil {
		t.Error("keyspace system (LocalStrategy) has a placement")
	}
	checkPlacements(t, r, s)
	for ks := range ringKeyspaces {
		if got := r.Replicas(ks, 42); !slices.Equal(got, []int32{0}) {
			t.Errorf("keyspace %s: replicas of 42 are %v, want [0]", ks, got)
		}
	}
}
