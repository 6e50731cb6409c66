package config

import (
	"strings"
	"testing"
)

func TestSheddingErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text string
		want string // "" for none
	}{
		{"shedding: {enabled: true}", ""},
		{"shedding: {enabled: true, max_price: 4}", ""},
		{"shedding: {enabled: true, max_price: 1}", ""},
		{"shedding: {enabled: true, max_price: 0.5}", `cqlguard.yaml:1: shedding.max_price: 0.5 is neither 0 nor at least 1`},
		{"shedding: {enabled: true, max_price: -2}", `cqlguard.yaml:1: shedding.max_price: -2 is neither 0 nor at least 1`},
		{"shedding: {error: retry}", `cqlguard.yaml:1: shedding.error: "retry" is neither "overloaded" nor "config_error"`},
		{"shedding: {update_every: 0s}", `cqlguard.yaml:1: shedding.update_every: 0s must be positive`},
		{"shedding: {ratio_below: 2}", `cqlguard.yaml:1: shedding.ratio_below: ratio below 2 is outside (0, 1)`},
		{"shedding: {rise: 1us}", `cqlguard.yaml:1: shedding.rise: rise 1µs is under 1ms`},
		{"shedding: {latency_floor: 1ns, confirm: 500ms}", ""},
		{"shedding: {latency_floor: -1ms}", `cqlguard.yaml:1: shedding.latency_floor: floor -1ms is negative`},
		{"shedding: {confirm: 10us}", `cqlguard.yaml:1: shedding.confirm: confirm 10µs is under 1ms`},
		{"shedding: {quantile: 1}", `cqlguard.yaml:1: shedding.quantile: quantile 1 is outside (0, 1)`},
		{"shedding: {short_window: 20s}", `cqlguard.yaml:1: shedding.short_window: long window 30s is under twice the short window 20s`},
		{"shedding: {queue_target: 1s}", `cqlguard.yaml:1: shedding.queue_target: queue target 1s is not under the interval 100ms`},
		{"shedding: {ratio_below: 0.7, ratio_recover: 0.6}", `cqlguard.yaml:1: shedding: ratio recover 0.6 is outside [ratio below 0.7, 1]`},
		{"shedding:\n  short_window: 2s\n  long_window: 3s", `cqlguard.yaml:1: shedding: long window 3s is under twice the short window 2s`},
	} {
		cfg, err := Parse("cqlguard.yaml", []byte(tc.text+"\n"))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.text, err)
		case tc.want == "" && strings.Contains(tc.text, "max_price: 4") && !cfg.Shedding.Pricing():
			t.Errorf("%s: not pricing", tc.text)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want %q", tc.text, err, tc.want)
		}
	}
}
