package config

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cqlguard/cqlguard/shed"
)

// SheddingConfig turns latency-driven shedding on: when an upstream node's
// short-term latency rises well above its long-term level, or requests
// keep waiting inside the proxy, the requests of the least important
// client tiers (clients) are answered at once with an error instead of
// being forwarded, as few as needed, tier 0 never. Restart only.
type SheddingConfig struct {
	// Enabled turns it on; off by default.
	Enabled bool `yaml:"enabled"`
	// DryRun computes and reports everything and sheds nothing; so does
	// limits.dry_run.
	DryRun bool `yaml:"dry_run"`
	// Error is what a shed request is answered with: "overloaded" (the
	// protocol's Overloaded, which drivers resend to another node: the
	// Python drivers any request, the others only idempotent ones) or
	// "config_error" (not retried by default). See the table in
	// docs/configuration.md.
	Error string `yaml:"error"`
	// MaxPrice, over 1, prices instead of refusing: a request of a class
	// with a budget (clients: max_units_per_second) is forwarded while its
	// tier is being shed, and its class is charged 1 + (MaxPrice - 1) x
	// the tier's shed fraction times its request units, so that the
	// class's budget refuses it sooner. Classes without a budget are shed
	// as before. 0 (the default) or 1: refuse.
	MaxPrice float64 `yaml:"max_price"`
	// ShortWindow and LongWindow are the upstream latency windows whose
	// Quantile's ratio (long over short) is the latency signal; MinSamples
	// answers a window needs before it counts. Zero: the defaults.
	ShortWindow Duration `yaml:"short_window"`
	LongWindow  Duration `yaml:"long_window"`
	Quantile    float64  `yaml:"quantile"`
	MinSamples  int      `yaml:"min_samples"`
	// RatioBelow is the ratio under which shedding rises, RatioRecover
	// the one from which it falls; between them none starts, and shedding
	// under way that counts as an overload (Confirm) rises while a tier is
	// partly let through.
	RatioBelow   float64 `yaml:"ratio_below"`
	RatioRecover float64 `yaml:"ratio_recover"`
	// LatencyFloor is the short-term quantile under which a node is not
	// slow, whatever its ratio; 1ns: the ratio alone decides.
	LatencyFloor Duration `yaml:"latency_floor"`
	// Confirm is how long the signals must be clearly unhealthy (the
	// ratio under RatioBelow, or the queue standing) before shedding
	// counts as an overload; shedding healthy again sooner was a false
	// start and ends at once, instead of falling over Fall.
	Confirm Duration `yaml:"confirm"`
	// QueueTarget and QueueInterval: a queue stands when no request of an
	// interval waited inside the proxy (for max_in_flight) less than the
	// target.
	QueueTarget   Duration `yaml:"queue_target"`
	QueueInterval Duration `yaml:"queue_interval"`
	// Rise and Fall are how long shedding takes to take one more tier
	// entirely, and to give one back.
	Rise Duration `yaml:"rise"`
	Fall Duration `yaml:"fall"`
	// UpdateEvery is how often the signals are read and shedding moved.
	UpdateEvery Duration `yaml:"update_every"`
}

// Pricing reports whether shedding raises the price of requests of
// classes with budgets instead of refusing them.
func (c SheddingConfig) Pricing() bool { return c.MaxPrice > 1 }

// Shedding errors.
const (
	ShedOverloaded  = "overloaded"
	ShedConfigError = "config_error"
)

func defaultShedding() SheddingConfig {
	return SheddingConfig{Error: ShedOverloaded, UpdateEvery: Duration(100 * time.Millisecond)}
}

// Latency returns the shed package's latency settings.
func (c SheddingConfig) Latency() shed.LatencyConfig {
	return shed.LatencyConfig{Short: time.Duration(c.ShortWindow), Long: time.Duration(c.LongWindow), Quantile: c.Quantile, MinSamples: c.MinSamples}
}

// Queue returns the shed package's queue settings.
func (c SheddingConfig) Queue() shed.QueueConfig {
	return shed.QueueConfig{Target: time.Duration(c.QueueTarget), Interval: time.Duration(c.QueueInterval)}
}

// Controller returns the shed package's controller settings for the tiers
// that carry traffic.
func (c SheddingConfig) Controller(tiers []int) shed.ControllerConfig {
	return shed.ControllerConfig{RatioBelow: c.RatioBelow, RatioRecover: c.RatioRecover,
		Floor: time.Duration(c.LatencyFloor), Confirm: time.Duration(c.Confirm),
		Rise: time.Duration(c.Rise), Fall: time.Duration(c.Fall), Tiers: tiers}
}

// validate checks the shedding section.
func (c *SheddingConfig) validate(ps *problems) {
	bad := func(err error, key string) { ps.add(err, "shedding", key) }
	switch c.Error {
	case ShedOverloaded, ShedConfigError:
	default:
		bad(fmt.Errorf("%q is neither %q nor %q", c.Error, ShedOverloaded, ShedConfigError), "error")
	}
	if c.MaxPrice < 0 || c.MaxPrice > 0 && c.MaxPrice < 1 || math.IsNaN(c.MaxPrice) || math.IsInf(c.MaxPrice, 0) {
		bad(fmt.Errorf("%v is neither 0 nor at least 1", c.MaxPrice), "max_price")
	}
	if c.UpdateEvery <= 0 {
		bad(fmt.Errorf("%s must be positive", time.Duration(c.UpdateEvery)), "update_every")
	}
	// Each setting is checked alone, against the defaults of the others,
	// so that its error names its own key and line; what is wrong only in
	// combination is the section's.
	lat := func(edit func(*shed.LatencyConfig)) error {
		var l shed.LatencyConfig
		edit(&l)
		return l.Validate()
	}
	queue := func(edit func(*shed.QueueConfig)) error {
		var q shed.QueueConfig
		edit(&q)
		return q.Validate()
	}
	ctl := func(edit func(*shed.ControllerConfig)) error {
		var k shed.ControllerConfig
		edit(&k)
		return k.Validate()
	}
	n := len(*ps)
	for _, f := range []struct {
		key string
		err error
	}{
		{"short_window", lat(func(l *shed.LatencyConfig) { l.Short = time.Duration(c.ShortWindow) })},
		{"long_window", lat(func(l *shed.LatencyConfig) { l.Long = time.Duration(c.LongWindow) })},
		{"quantile", lat(func(l *shed.LatencyConfig) { l.Quantile = c.Quantile })},
		{"min_samples", lat(func(l *shed.LatencyConfig) { l.MinSamples = c.MinSamples })},
		{"queue_target", queue(func(q *shed.QueueConfig) { q.Target = time.Duration(c.QueueTarget) })},
		{"queue_interval", queue(func(q *shed.QueueConfig) { q.Interval = time.Duration(c.QueueInterval) })},
		{"ratio_below", ctl(func(k *shed.ControllerConfig) { k.RatioBelow = c.RatioBelow })},
		{"ratio_recover", ctl(func(k *shed.ControllerConfig) { k.RatioRecover = c.RatioRecover })},
		{"latency_floor", ctl(func(k *shed.ControllerConfig) { k.Floor = time.Duration(c.LatencyFloor) })},
		{"confirm", ctl(func(k *shed.ControllerConfig) { k.Confirm = time.Duration(c.Confirm) })},
		{"rise", ctl(func(k *shed.ControllerConfig) { k.Rise = time.Duration(c.Rise) })},
		{"fall", ctl(func(k *shed.ControllerConfig) { k.Fall = time.Duration(c.Fall) })},
	} {
		if f.err != nil {
			bad(f.err, f.key)
		}
	}
	if len(*ps) > n {
		return
	}
	if err := errors.Join(c.Latency().Validate(), c.Queue().Validate(), c.Controller(nil).Validate()); err != nil {
		ps.add(err, "shedding")
	}
}
