package cluster

import (
	"math"
	"testing"
)

func TestSnapshotSince(t *testing.T) {
	t.Parallel()
	kv := Table{"ks", "kv"}
	other := Table{"ks", "other"}
	before := Snapshot{
		"a": {Tables: map[Table]Counts{kv: {10, 20, 30, 40}}, PeerResponses: 5},
		"b": {Tables: map[Table]Counts{kv: {1, 1, 1, 1}}},
	}
	after := Snapshot{
		"a": {Tables: map[Table]Counts{kv: {110, 220, 130, 240}, other: {1, 2, 3, 4}}, PeerResponses: 8},
		"b": {Tables: map[Table]Counts{kv: {1, 1, 1, 1}}, PeerResponses: 100},
		"c": {Tables: map[Table]Counts{kv: {7, 0, 7, 0}}, PeerResponses: 1},
	}
	d := after.Since(before)
	for _, tc := range []struct {
		host  string
		table Table
		want  Counts
		peer  int64
	}{
		{"a", kv, Counts{100, 200, 100, 200}, 3},
		{"a", other, Counts{1, 2, 3, 4}, 3},
		{"b", kv, Counts{}, 100},
		{"c", kv, Counts{7, 0, 7, 0}, 1}, // no snapshot before: counted from zero
	} {
		if got := d[tc.host].Tables[tc.table]; got != tc.want {
			t.Errorf("%s %v: %+v, want %+v", tc.host, tc.table, got, tc.want)
		}
		if got := d[tc.host].PeerResponses; got != tc.peer {
			t.Errorf("%s: %d peer responses, want %d", tc.host, got, tc.peer)
		}
	}
	if got, want := d.Total(kv), (Counts{107, 200, 107, 200}); got != want {
		t.Errorf("total: %+v, want %+v", got, want)
	}
}

func TestReplicaShare(t *testing.T) {
	t.Parallel()
	kv := Table{"ks", "kv"}
	node := func(c Counts, peer int64) Node { return Node{Tables: map[Table]Counts{kv: c}, PeerResponses: peer} }
	for _, tc := range []struct {
		name string
		s    Snapshot
		want float64
	}{
		{"every request at its replica", Snapshot{"a": node(Counts{50, 50, 50, 50}, 0), "b": node(Counts{25, 25, 25, 25}, 0)}, 1},
		{"two thirds hop", Snapshot{
			"a": node(Counts{100, 100, 150, 150}, 140),
			"b": node(Counts{100, 100, 50, 50}, 130),
			"c": node(Counts{100, 100, 100, 100}, 130),
		}, 1 - 400.0/600},
		{"every request hops", Snapshot{"a": node(Counts{10, 0, 0, 0}, 10), "b": node(Counts{0, 0, 10, 0}, 0)}, 0},
	} {
		if got := tc.s.ReplicaShare(); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := (Snapshot{"a": node(Counts{}, 3)}).ReplicaShare(); !math.IsNaN(got) {
		t.Errorf("no requests: %v, want NaN", got)
	}
}
