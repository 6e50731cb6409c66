package proxy

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/cqlguard/cqlguard/ring"
)

// A ring view prefers the local datacenter's replicas, named or taken from
// the upstreams, and falls back to the others when a partition has none
// there.
func TestRingViewLocalDatacenter(t *testing.T) {
	node := func(ip, dc string, token int64) ring.Node {
		return ring.Node{HostID: ip, Addr: netip.MustParseAddrPort(ip + ":9042"), Datacenter: dc, Rack: "r1", Tokens: []int64{token}}
	}
	nodes := []ring.Node{node("10.0.0.1", "east", -100), node("10.0.0.2", "east", 0), node("10.1.0.1", "west", 100)}
	repl := func(m map[string]string) ring.Replication {
		r, err := ring.ParseReplication(m)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	const nts = "org.apache.cassandra.locator.NetworkTopologyStrategy"
	r, err := ring.New(nodes, map[string]ring.Replication{
		"both":     repl(map[string]string{"class": nts, "east": "2", "west": "1"}),
		"westonly": repl(map[string]string{"class": nts, "west": "1"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, local string
		upstreams   []string
		keyspace    string
		want        []string
	}{
		{"local named", "west", nil, "both", []string{"10.1.0.1:9042"}},
		{"local from the upstreams", "", []string{"10.0.0.2:9042"}, "both", []string{"10.0.0.1:9042", "10.0.0.2:9042"}},
		{"no replica in the local datacenter", "east", nil, "westonly", []string{"10.1.0.1:9042"}},
		{"no local datacenter known", "", nil, "both", []string{"10.0.0.1:9042", "10.0.0.2:9042", "10.1.0.1:9042"}},
		{"unknown keyspace", "east", nil, "other", nil},
	}
	for _, tc := range cases {
		v := newRingView(r, tc.local, tc.upstreams)
		got := v.replicas(nil, tc.keyspace, -1000)
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: replicas %v, want %v", tc.name, got, tc.want)
		}
		if n := testing.AllocsPerRun(100, func() { got = v.replicas(got[:0], tc.keyspace, 50) }); n != 0 {
			t.Errorf("%s: replicas allocates %v times", tc.name, n)
		}
	}
}
