package ring

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// node builds a node named id, its address derived from its place in a
// test's list by the caller.
func node(id, dc, rack string, tokens ...int64) Node {
	return Node{HostID: id, Datacenter: dc, Rack: rack, Tokens: tokens}
}

// withAddrs gives each node a distinct loopback address.
func withAddrs(nodes []Node) []Node {
	for i := range nodes {
		nodes[i].Addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 1, byte(i + 1)}), 9042)
	}
	return nodes
}

// names renders replica indexes as the host ids of r's nodes.
func names(r *Ring, replicas []int32) string {
	s := make([]string, len(replicas))
	for i, n := range replicas {
		s[i] = r.Nodes()[n].HostID
	}
	return strings.Join(s, " ")
}

func simple(rf string) Replication {
	return mustParse(map[string]string{"class": "SimpleStrategy", "replication_factor": rf})
}

func nts(kv ...string) Replication {
	m := map[string]string{"class": "NetworkTopologyStrategy"}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return mustParse(m)
}

func mustParse(m map[string]string) Replication {
	r, err := ParseReplication(m)
	if err != nil {
		panic(err)
	}
	return r
}

// threeNodes is one datacenter, one rack, two tokens each:
// 0 a, 100 b, 200 c, 300 a, 400 b, 500 c.
var threeNodes = []Node{
	node("a", "dc1", "r1", 300, 0),
	node("b", "dc1", "r1", 100, 400),
	node("c", "dc1", "r1", 200, 500),
}

// racks is two datacenters, one token each, in ring order:
// 0 a1 (dc1 r1), 10 a2 (dc1 r1), 20 c1 (dc2 r1), 30 b1 (dc1 r2), 40 c2 (dc2 r1).
// dc1 has two racks for three nodes, dc2 one rack for two.
var racks = []Node{
	node("a1", "dc1", "r1", 0),
	node("a2", "dc1", "r1", 10),
	node("b1", "dc1", "r2", 30),
	node("c1", "dc2", "r1", 20),
	node("c2", "dc2", "r1", 40),
}

// distinctRacks is one datacenter whose first three nodes round the ring
// share a rack: 0 x1 (r1), 10 x2 (r1), 20 x3 (r1), 30 y (r2), 40 z (r3).
var distinctRacks = []Node{
	node("x1", "dc1", "r1", 0),
	node("x2", "dc1", "r1", 10),
	node("x3", "dc1", "r1", 20),
	node("y", "dc1", "r2", 30),
	node("z", "dc1", "r3", 40),
}

// Each placement below was worked out by hand from the walk
// NetworkTopologyStrategy's and SimpleStrategy's calculateNaturalReplicas
// make in Cassandra 5.0.
func TestReplicas(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		nodes []Node
		repl  Replication
		token int64
		want  string
	}{
		// SimpleStrategy: the next distinct nodes clockwise.
		{"simple inside a range", threeNodes, simple("2"), 50, "b c"},
		{"simple token equal to a node's token is that node's", threeNodes, simple("2"), 100, "b c"},
		{"simple just past a node's token", threeNodes, simple("2"), 101, "c a"},
		{"simple first token", threeNodes, simple("2"), 0, "a b"},
		{"simple wraps past the last token", threeNodes, simple("2"), 501, "a b"},
		{"simple max token wraps", threeNodes, simple("2"), math.MaxInt64, "a b"},
		{"simple min token is in the wrapping range", threeNodes, simple("2"), math.MinInt64, "a b"},
		{"simple walk wraps round the ring", threeNodes, simple("3"), 450, "c a b"},
		{"simple factor over the nodes", threeNodes, simple("5"), 50, "b c a"},
		{"simple factor 1", threeNodes, simple("1"), 250, "a"},
		{"simple factor 0", threeNodes, simple("0"), 250, ""},
		{"simple transient replica left out", threeNodes, simple("3/1"), 50, "b c"},

		// NetworkTopologyStrategy, dc1 two racks (a1 a2 | b1), dc2 one (c1 c2).
		{"nts distinct racks first", racks, nts("dc1", "2"), 0, "a1 b1"},
		{"nts a rack repeat where racks are too few", racks, nts("dc1", "3"), 0, "a1 a2 b1"},
		{"nts two datacenters interleaved", racks, nts("dc1", "2", "dc2", "2"), 15, "c1 b1 c2 a1"},
		{"nts factor over a datacenter's nodes", racks, nts("dc1", "5"), 35, "a1 a2 b1"},
		{"nts token equal to a node's token", racks, nts("dc1", "1", "dc2", "1"), 30, "b1 c2"},
		{"nts wraps past the last token", racks, nts("dc1", "1", "dc2", "1"), 41, "a1 c1"},
		{"nts min token", racks, nts("dc1", "1", "dc2", "1"), math.MinInt64, "a1 c1"},
		// 3/1 in dc1: three replicas a1 a2 b1 (one rack repeat allowed), the
		// last of them transient; a walk for factor 2 would give a1 b1.
		{"nts transient replica left out", racks, nts("dc1", "3/1"), 0, "a1 a2"},
		{"nts datacenter without nodes", racks, nts("dc3", "2"), 0, ""},
		{"nts datacenter of factor 0", racks, nts("dc1", "0", "dc2", "1"), 0, "c1"},
		{"nts replication_factor shorthand", racks, nts("replication_factor", "1"), 0, "a1 c1"},
		{"nts shorthand and a named datacenter", racks, nts("replication_factor", "1", "dc2", "0"), 0, "a1"},
		{"nts racks skipped until distinct", distinctRacks, nts("dc1", "3"), 0, "x1 y z"},
		{"nts racks from a rack's second node", distinctRacks, nts("dc1", "3"), 10, "x2 y z"},
		{"nts racks wrapping", distinctRacks, nts("dc1", "3"), 35, "z x1 y"},
		// Factor 4 over three racks: one repeat, taken by the first node
		// met in a used rack.
		{"nts one repeat", distinctRacks, nts("dc1", "4"), 0, "x1 x2 y z"},

		{"everywhere", racks, mustParse(map[string]string{"class": "EverywhereStrategy"}), 25, "a1 a2 b1 c1 c2"},
		{"local", racks, mustParse(map[string]string{"class": "LocalStrategy"}), 25, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := New(withAddrs(slices.Clone(tt.nodes)), map[string]Replication{"ks": tt.repl})
			if err != nil {
				t.Fatal(err)
			}
			if got := names(r, r.Replicas("ks", tt.token)); got != tt.want {
				t.Errorf("Replicas(%d) = %q, want %q (%v)", tt.token, got, tt.want, tt.repl)
			}
		})
	}
}

func TestOwner(t *testing.T) {
	t.Parallel()
	r, err := New(slices.Clone(threeNodes), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		token int64
		want  string
	}{
		{math.MinInt64, "a"}, {-1, "a"}, {0, "a"}, {1, "b"}, {100, "b"}, {299, "a"},
		{300, "a"}, {301, "b"}, {500, "c"}, {501, "a"}, {math.MaxInt64, "a"},
	} {
		if got := r.Nodes()[r.Owner(tt.token)].HostID; got != tt.want {
			t.Errorf("Owner(%d) = %s, want %s", tt.token, got, tt.want)
		}
	}
	if r.Tokens() != 6 {
		t.Errorf("Tokens() = %d, want 6", r.Tokens())
	}
}

func TestPlacementLookups(t *testing.T) {
	t.Parallel()
	r, err := New(slices.Clone(racks), map[string]Replication{
		"a": nts("dc1", "2"), "b": nts("dc1", "2"), "local": {Strategy: LocalStrategy},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Placement("a") != r.Placement("b") {
		t.Error("keyspaces of the same replication do not share a placement")
	}
	if got := r.Placement("a").Replication().String(); got != `{class: NetworkTopologyStrategy, "dc1": 2}` {
		t.Errorf("Replication() = %s", got)
	}
	for _, ks := range []string{"local", "missing"} {
		if r.Placement(ks) != nil || r.Replicas(ks, 0) != nil {
			t.Errorf("keyspace %s has a placement", ks)
		}
	}
	// The shared slice cannot be appended to over the next range's.
	got := r.Replicas("a", 0)
	if cap(got) != len(got) {
		t.Errorf("replicas have capacity %d beyond their %d", cap(got), len(got))
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		nodes []Node
		want  string
	}{
		{"no nodes", nil, "no nodes"},
		{"no tokens", []Node{node("a", "dc1", "r1")}, "has no tokens"},
		{"same host id", []Node{node("a", "dc1", "r1", 1), node("a", "dc1", "r1", 2)}, "same host id"},
		{"token owned twice", []Node{node("a", "dc1", "r1", 1), node("b", "dc1", "r1", 1)}, "both own token 1"},
		{"token listed twice", []Node{node("a", "dc1", "r1", 1, 1)}, "token 1 twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := New(tt.nodes, nil)
			if r != nil || err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New = %v, %v; want nil and an error with %q", r, err, tt.want)
			}
		})
	}
}

func TestNewLeavesOutKeyspaces(t *testing.T) {
	t.Parallel()
	r, err := New(slices.Clone(threeNodes), map[string]Replication{
		"good":    simple("3"),
		"unknown": {Strategy: 99},
	})
	if r == nil || err == nil || !strings.Contains(err.Error(), "keyspace unknown left out") {
		t.Fatalf("New = %v, %v; want a ring and an error naming keyspace unknown", r, err)
	}
	if r.Placement("good") == nil || r.Placement("unknown") != nil {
		t.Error("want good placed and unknown left out")
	}
}

func TestNewLimitsReplicas(t *testing.T) {
	t.Parallel()
	// 4,096 nodes of 256 tokens each with every node a replica would
	// hold 2^32 entries.
	nodes := make([]Node, 4096)
	for i := range nodes {
		tokens := make([]int64, 256)
		for j := range tokens {
			tokens[j] = int64(i*256 + j)
		}
		nodes[i] = Node{HostID: fmt.Sprint(i), Tokens: tokens}
	}
	r, err := New(nodes, map[string]Replication{"huge": simple("5000"), "everywhere": {Strategy: EverywhereStrategy}})
	if r == nil || err == nil || !strings.Contains(err.Error(), "keyspace huge left out") {
		t.Fatalf("New = %v, %v; want a ring and an error naming keyspace huge", r, err)
	}
	if got := len(r.Replicas("everywhere", 7)); got != 4096 {
		t.Errorf("everywhere has %d replicas, want 4096", got)
	}
}

func TestNewCopiesNodes(t *testing.T) {
	t.Parallel()
	nodes := []Node{node("a", "dc1", "r1", 10, 20)}
	r, err := New(nodes, nil)
	if err != nil {
		t.Fatal(err)
	}
	nodes[0].HostID = "changed"
	nodes[0].Tokens[0] = 99
	if n := r.Nodes()[0]; n.HostID != "a" || n.Tokens[0] != 10 {
		t.Errorf("the ring sees its caller's changes: %+v", n)
	}
}

func TestReplicasDoNotAllocate(t *testing.T) {
	r, err := New(randomNodes(rand.New(rand.NewPCG(1, 2)), 30, 16, 2, 3), map[string]Replication{
		"s": simple("3"), "n": nts("dc0", "3", "dc1", "2"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ks := []byte("n")
	var sink int
	allocs := testing.AllocsPerRun(1000, func() {
		for _, tok := range []int64{math.MinInt64, -5, 0, 12345, math.MaxInt64} {
			sink += len(r.Replicas(string(ks), tok)) + len(r.Placement("s").Replicas(tok)) + r.Owner(tok)
		}
	})
	if allocs != 0 {
		t.Errorf("lookups allocate %v times", allocs)
	}
	_ = sink
}

// randomNodes returns n nodes of v random tokens each, spread round robin
// over dcs datacenters and, within each, racks racks.
func randomNodes(rng *rand.Rand, n, v, dcs, racks int) []Node {
	seen := make(map[int64]bool)
	nodes := make([]Node, n)
	for i := range nodes {
		tokens := make([]int64, v)
		for j := range tokens {
			t := int64(rng.Uint64())
			for seen[t] {
				t = int64(rng.Uint64())
			}
			seen[t] = true
			tokens[j] = t
		}
		nodes[i] = Node{
			HostID:     fmt.Sprintf("n%d", i),
			Addr:       netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 9042),
			Datacenter: fmt.Sprintf("dc%d", i%dcs),
			Rack:       fmt.Sprintf("r%d", i/dcs%racks),
			Tokens:     tokens,
		}
	}
	return nodes
}

// reference computes the full replicas of token t by following Cassandra
// 5.0's calculateNaturalReplicas step by step for every replica, full and
// transient, then keeping the full ones: a slow, plain second version of
// the walk that New precomputes.
func reference(nodes []Node, repl Replication, t int64) []string {
	type owned struct {
		token int64
		node  *Node
	}
	var ring []owned
	for i := range nodes {
		for _, tok := range nodes[i].Tokens {
			ring = append(ring, owned{tok, &nodes[i]})
		}
	}
	slices.SortFunc(ring, func(a, b owned) int { return cmp.Compare(a.token, b.token) })
	start := 0
	for start < len(ring) && ring[start].token < t {
		start++
	}
	walk := func(yield func(*Node) bool) {
		for i := range ring {
			if !yield(ring[(start+i)%len(ring)].node) {
				return
			}
		}
	}
	var full []string
	switch repl.Strategy {
	case EverywhereStrategy:
		for _, n := range nodes {
			full = append(full, n.HostID)
		}
	case SimpleStrategy:
		var taken []string
		for n := range walk {
			if len(taken) == repl.Factor.All {
				break
			}
			if !slices.Contains(taken, n.HostID) {
				if len(taken) < repl.Factor.Full() {
					full = append(full, n.HostID)
				}
				taken = append(taken, n.HostID)
			}
		}
	case NetworkTopologyStrategy:
		type dcState struct{ rfLeft, repeats, transients int }
		dcNodes, dcRacks := map[string]int{}, map[string]map[string]bool{}
		for _, n := range nodes {
			dcNodes[n.Datacenter]++
			if dcRacks[n.Datacenter] == nil {
				dcRacks[n.Datacenter] = map[string]bool{}
			}
			dcRacks[n.Datacenter][n.Rack] = true
		}
		dcs := map[string]*dcState{}
		for dc, count := range dcNodes {
			f, ok := repl.Datacenters[dc]
			if !ok {
				f = repl.Factor
			}
			if f.All <= 0 {
				continue
			}
			left := min(f.All, count)
			dcs[dc] = &dcState{rfLeft: left, repeats: f.All - len(dcRacks[dc]), transients: max(f.Transient-(f.All-left), 0)}
		}
		taken := map[string]bool{}
		seenRacks := map[[2]string]bool{}
		for n := range walk {
			s := dcs[n.Datacenter]
			if s == nil || s.rfLeft == 0 || taken[n.HostID] {
				continue
			}
			isFull := s.rfLeft > s.transients
			loc := [2]string{n.Datacenter, n.Rack}
			if !seenRacks[loc] {
				seenRacks[loc] = true
			} else if s.repeats > 0 {
				s.repeats--
			} else {
				continue
			}
			s.rfLeft--
			taken[n.HostID] = true
			if isFull {
				full = append(full, n.HostID)
			}
		}
	}
	return full
}

// TestReplicasMatchReference compares New's placements with reference on
// random rings, at every ring token, either side of it, and at random
// tokens.
func TestReplicasMatchReference(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	repls := []Replication{
		simple("1"), simple("3"), simple("3/1"), simple("9"),
		nts("dc0", "3"), nts("dc0", "3", "dc1", "2"), nts("dc0", "5/2", "dc1", "1"),
		nts("dc0", "2", "dc1", "4"), nts("replication_factor", "2", "dc2", "3"),
		{Strategy: EverywhereStrategy},
	}
	for round := range 40 {
		n := 1 + rng.IntN(9)
		nodes := randomNodes(rng, n, 1+rng.IntN(8), 1+rng.IntN(3), 1+rng.IntN(4))
		// Some nodes in a rack of their own, so that racks are uneven.
		for i := range nodes {
			if rng.IntN(4) == 0 {
				nodes[i].Rack = "odd"
			}
		}
		keyspaces := make(map[string]Replication)
		for i, repl := range repls {
			keyspaces[fmt.Sprint(i)] = repl
		}
		r, err := New(nodes, keyspaces)
		if err != nil {
			t.Fatal(err)
		}
		var tokens []int64
		for _, nd := range nodes {
			for _, tok := range nd.Tokens {
				tokens = append(tokens, tok, tok-1, tok+1)
			}
		}
		tokens = append(tokens, math.MinInt64, math.MaxInt64, int64(rng.Uint64()))
		for i, repl := range repls {
			for _, tok := range tokens {
				want := strings.Join(reference(nodes, repl, tok), " ")
				if got := names(r, r.Replicas(fmt.Sprint(i), tok)); got != want {
					t.Fatalf("round %d, %v, token %d: Replicas = %q, reference %q\nnodes %+v", round, repl, tok, got, want, nodes)
				}
			}
		}
	}
}
