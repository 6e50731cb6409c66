package config

import (
	"strings"
	"testing"
)

// A class matched on STARTUP options alone, which any client can send, is
// warned of when it is more privileged than the default class, by tier or
// by budget; the warning names the file, the line, the class and the keys.
// Classes that match on a user or an address too, or that give no more
// than the default, are not.
func TestClientClassWarnings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		text string
		want []string // substrings of the one warning; none for no warning
	}{
		{name: "a lower tier, on an application name",
			text: "clients:\n  classes:\n    - name: checkout\n      tier: 0\n      match: {application_names: [checkout]}\n",
			want: []string{"cqlguard.yaml:5: clients.classes.0.match: class checkout is matched on application_names alone", "any client can claim it", "default class default (tier 0 against 1)"}},
		{name: "every asserted key",
			text: "clients:\n  classes:\n    - name: vip\n      tier: 0\n      match:\n        application_names: [a]\n        client_ids: [b]\n        driver_names: [c]\n",
			want: []string{"cqlguard.yaml:5:", "class vip is matched on application_names and client_ids and driver_names alone"}},
		{name: "no budget where the default has one",
			text: "clients:\n  default: {max_units_per_second: 100}\n  classes:\n    - name: batch\n      tier: 5\n      match: {driver_names: [gocql]}\n",
			want: []string{"cqlguard.yaml:6: clients.classes.0.match: class batch", "driver_names", "(no budget against max_units_per_second 100)"}},
		{name: "a larger budget",
			text: "clients:\n  default: {name: others, max_units_per_second: 100}\n  classes:\n    - name: reports\n      match: {client_ids: [r1]}\n      max_units_per_second: 500\n",
			want: []string{"class reports is matched on client_ids alone", "default class others (max_units_per_second 500 against 100)"}},
		{name: "tier and budget both",
			text: "clients:\n  default: {tier: 3, max_units_per_second: 100}\n  classes:\n    - {name: a, tier: 2, match: {application_names: [a]}}\n",
			want: []string{"cqlguard.yaml:4:", "(tier 2 against 3, no budget against max_units_per_second 100)"}},
		{name: "the second class, after one that is fine",
			text: "clients:\n  classes:\n    - {name: ok, tier: 0, match: {users: [svc]}}\n    - {name: vip, tier: 0, match: {application_names: [vip]}}\n",
			want: []string{"cqlguard.yaml:4: clients.classes.1.match: class vip"}},
		{name: "with a user too",
			text: "clients:\n  classes:\n    - {name: checkout, tier: 0, match: {users: [checkout_svc], application_names: [checkout]}}\n"},
		{name: "with an address too",
			text: "clients:\n  classes:\n    - {name: checkout, tier: 0, match: {addresses: [10.0.0.0/8], application_names: [checkout]}}\n"},
		{name: "a higher tier and a budget",
			text: "clients:\n  classes:\n    - {name: reports, tier: 5, max_units_per_second: 2000, match: {application_names: [reports]}}\n"},
		{name: "the same tier and no budget, like the default",
			text: "clients:\n  classes:\n    - {name: reports, match: {application_names: [reports]}}\n"},
		{name: "a smaller budget than the default's",
			text: "clients:\n  default: {max_units_per_second: 100}\n  classes:\n    - {name: reports, max_units_per_second: 50, match: {application_names: [reports]}}\n"},
		{name: "a budget where the default has none, the same tier",
			text: "clients:\n  classes:\n    - {name: reports, tier: 1, max_units_per_second: 50, match: {application_names: [reports]}}\n"},
		{name: "empty lists are not set",
			text: "clients:\n  classes:\n    - {name: all, tier: 0, match: {users: [], application_names: []}}\n"},
		{name: "the example file", text: mustRead(t, "../config.example.yaml")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			data := []byte(tt.text)
			c, err := Parse("cqlguard.yaml", data)
			if err != nil {
				t.Fatal(err)
			}
			got := Warnings(&c, data)
			if tt.want == nil {
				if len(got) != 0 {
					t.Errorf("warnings %q, want none", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("warnings %q, want one", got)
			}
			for _, w := range tt.want {
				if !strings.Contains(got[0], w) {
					t.Errorf("warning %q does not hold %q", got[0], w)
				}
			}
		})
	}
}
