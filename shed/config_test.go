package shed

import (
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"latency defaults", LatencyConfig{}.Validate()},
		{"queue defaults", QueueConfig{}.Validate()},
		{"controller defaults", ControllerConfig{}.Validate()},
	} {
		if tc.err != nil {
			t.Errorf("%s: %v", tc.name, tc.err)
		}
	}
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"short window", LatencyConfig{Short: time.Microsecond}.Validate()},
		{"long window", LatencyConfig{Short: time.Second, Long: time.Second}.Validate()},
		{"quantile", LatencyConfig{Quantile: 1}.Validate()},
		{"min samples", LatencyConfig{MinSamples: -1}.Validate()},
		{"queue target", QueueConfig{Target: time.Second}.Validate()},
		{"queue interval", QueueConfig{Interval: time.Microsecond}.Validate()},
		{"ratio below", ControllerConfig{RatioBelow: 1.5}.Validate()},
		{"ratio recover", ControllerConfig{RatioBelow: 0.5, RatioRecover: 0.4}.Validate()},
		{"rise", ControllerConfig{Rise: -time.Second}.Validate()},
		{"floor", ControllerConfig{Floor: -time.Millisecond}.Validate()},
		{"confirm", ControllerConfig{Confirm: time.Microsecond}.Validate()},
		{"trace", ControllerConfig{Trace: -1}.Validate()},
		{"tier", ControllerConfig{Tiers: []int{3, 10}}.Validate()},
	} {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}
