package ring

import (
	"errors"
	"strings"
	"testing"
)

func TestParseReplication(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		m       map[string]string
		want    string // Replication.String
		wantErr string
	}{
		{"simple as stored", map[string]string{"class": "org.apache.cassandra.locator.SimpleStrategy", "replication_factor": "3"},
			"{class: SimpleStrategy, replication_factor: 3}", ""},
		{"simple short name", map[string]string{"class": "SimpleStrategy", "replication_factor": "1"},
			"{class: SimpleStrategy, replication_factor: 1}", ""},
		{"simple transient", map[string]string{"class": "SimpleStrategy", "replication_factor": "3/1"},
			"{class: SimpleStrategy, replication_factor: 3/1}", ""},
		{"simple ignores other options", map[string]string{"class": "SimpleStrategy", "replication_factor": "2", "dc1": "x"},
			"{class: SimpleStrategy, replication_factor: 2}", ""},
		{"nts as stored", map[string]string{"class": "org.apache.cassandra.locator.NetworkTopologyStrategy", "dc1": "3", "DC 2": "2"},
			`{class: NetworkTopologyStrategy, "DC 2": 2, "dc1": 3}`, ""},
		{"nts shorthand", map[string]string{"class": "NetworkTopologyStrategy", "replication_factor": "3"},
			"{class: NetworkTopologyStrategy, replication_factor: 3}", ""},
		{"nts shorthand with a datacenter", map[string]string{"class": "NetworkTopologyStrategy", "replication_factor": "3", "dc1": "1/0"},
			`{class: NetworkTopologyStrategy, replication_factor: 3, "dc1": 1}`, ""},
		{"nts no datacenters", map[string]string{"class": "NetworkTopologyStrategy"},
			"{class: NetworkTopologyStrategy}", ""},
		{"local", map[string]string{"class": "org.apache.cassandra.locator.LocalStrategy"}, "{class: LocalStrategy}", ""},
		{"everywhere", map[string]string{"class": "org.apache.cassandra.locator.EverywhereStrategy"}, "{class: EverywhereStrategy}", ""},

		{"no class", map[string]string{"replication_factor": "3"}, "", "no class"},
		{"unknown class", map[string]string{"class": "com.example.SimpleStrategy"}, "", "unknown replication strategy"},
		{"old strategy", map[string]string{"class": "org.apache.cassandra.locator.OldNetworkTopologyStrategy"}, "", "unknown replication strategy"},
		{"simple without factor", map[string]string{"class": "SimpleStrategy"}, "", "without replication_factor"},
		{"simple bad factor", map[string]string{"class": "SimpleStrategy", "replication_factor": "three"}, "", `"three"`},
		{"nts bad factor", map[string]string{"class": "NetworkTopologyStrategy", "dc1": "3", "dc2": "-1"}, "", "dc2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := ParseReplication(tt.m)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseReplication = %v, %v; want an error with %q", r, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := r.String(); got != tt.want {
				t.Errorf("ParseReplication = %s, want %s", got, tt.want)
			}
		})
	}
	if _, err := ParseReplication(map[string]string{"class": "X"}); !errors.Is(err, ErrUnknownStrategy) {
		t.Errorf("unknown class: %v does not wrap ErrUnknownStrategy", err)
	}
}

func TestParseFactor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want Factor
		ok   bool
	}{
		{"0", Factor{}, true},
		{"3", Factor{3, 0}, true},
		{"007", Factor{7, 0}, true},
		{"3/1", Factor{3, 1}, true},
		{"3/0", Factor{3, 0}, true},
		{"3/2", Factor{3, 2}, true},
		{"1048576", Factor{1 << 20, 0}, true},
		{"3/3", Factor{}, false}, // no full replica
		{"0/1", Factor{}, false},
		{"", Factor{}, false},
		{"-1", Factor{}, false},
		{"+3", Factor{}, false},
		{" 3", Factor{}, false},
		{"3/", Factor{}, false},
		{"/1", Factor{}, false},
		{"3/1/1", Factor{}, false},
		{"1048577", Factor{}, false},
		{"99999999999999999999", Factor{}, false},
	}
	for _, tt := range tests {
		got, err := ParseFactor(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseFactor(%q) = %v, %v; want %v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}
