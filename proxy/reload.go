package proxy

import (
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/ratelimit"
)

// reloader is the state of configuration reloads.
type reloader struct {
	mu sync.Mutex // serializes reloads
	// last is the configuration last applied, to report what a reload
	// cannot apply.
	last        config.Config
	success     prometheus.Counter
	failure     prometheus.Counter
	lastSuccess prometheus.Gauge
}

// initLimits resolves p.cfg's limits, builds their limiter and registers
// the reload metrics with reg. New calls it.
func (p *Proxy) initLimits(reg prometheus.Registerer) error {
	l, err := newLimits(p.cfg.Limits)
	if err != nil {
		return err
	}
	lim, err := ratelimit.New(p.limiterConfig(l))
	if err != nil {
		return fmt.Errorf("limits: %w", err)
	}
	p.makeUnits(l, p.cfg.Limits)
	p.limits.Store(l)
	p.limiter.Store(lim)

	r := &p.reload
	r.last = p.cfg
	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cqlguard_config_reloads_total",
		Help: "Configuration reloads (SIGHUP or file change), by result.",
	}, []string{"result"})
	r.success = reloads.WithLabelValues("success")
	r.failure = reloads.WithLabelValues("failure")
	r.lastSuccess = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "cqlguard_config_last_reload_success_timestamp_seconds",
		Help: "When the configuration was last loaded successfully, at start or on reload, in Unix seconds.",
	})
	r.lastSuccess.SetToCurrentTime()
	reg.MustRegister(reloads, r.lastSuccess)
	return nil
}

// Reload applies cfg, the configuration file loaded again, as far as it
// can change while running: the limits section, the tables of hot_reads,
// clients, request_units, and the certificates,
// which are read again even when their paths did not change, since a
// reload is how a renewed certificate takes effect. Requests see the new
// limits as soon as it returns, and the old ones until then.
//
// If the limiter's own settings changed (limits.algorithm, limits.memory,
// or limits.burst with the token-bucket algorithm), a new limiter replaces
// the old one and counting starts afresh, which lets every partition
// through for up to a second or a burst. Other settings take effect on
// restart only; those that changed are logged.
//
// A configuration that is not valid, or whose certificates do not load,
// changes nothing: the error is logged, counted and returned.
func (p *Proxy) Reload(cfg config.Config) error {
	r := &p.reload
	r.mu.Lock()
	defer r.mu.Unlock()
	err := cfg.Validate()
	if err == nil {
		err = checkCoordination(cfg.Coordination)
	}
	if err == nil {
		err = p.applyLimits(cfg.Limits)
	}
	if err == nil {
		err = p.loadTLS(cfg.TLS)
	}
	if err == nil {
		err = p.loadUpstreamTLS(cfg.UpstreamTLS)
	}
	if err == nil {
		err = p.applyCoordination(cfg.Coordination)
	}
	var cc *clientClasses
	if err == nil {
		cc, err = newClientClasses(cfg.Clients, cfg.RequestUnits, p.clients.Load(), p.clientMetrics, p.elapsed())
	}
	if err == nil {
		p.hotReads.apply(cfg.HotReads)
		p.clients.Store(cc)
	}
	if err != nil {
		p.ReloadFailed(cfg.File(), err)
		return err
	}
	for _, key := range restartOnlyChanges(r.last, cfg) {
		p.log.Warn().Str("config", cfg.File()).Str("key", key).
			Msg("setting differs from the running configuration and takes effect on restart only")
	}
	r.last = cfg
	r.success.Inc()
	r.lastSuccess.SetToCurrentTime()
	l := cfg.Limits
	p.log.Info().Str("config", cfg.File()).Bool("dry_run", l.DryRun).Int("keyspaces", len(l.Keyspaces)).
		Msg("configuration reloaded")
	return nil
}

// ReloadFailed records that the configuration file at path could not be
// loaded again, with err, which names the file and line: it is logged and
// counted as a failed reload, and the running configuration stays.
func (p *Proxy) ReloadFailed(path string, err error) {
	p.reload.failure.Inc()
	p.log.Error().Err(err).Str("config", path).Msg("configuration not reloaded; the previous one stays in effect")
}

// applyLimits swaps in the limits of cfg, and a new limiter if they need
// one.
func (p *Proxy) applyLimits(cfg config.LimitsConfig) error {
	l, err := newLimits(cfg)
	if err != nil {
		return err
	}
	if old := p.limits.Load(); !sameLimiter(old.limiter, l.limiter) {
		lim, err := ratelimit.New(p.limiterConfig(l))
		if err != nil {
			return fmt.Errorf("limits: %w", err)
		}
		// Between the two stores a request may pair the new limiter with
		// the old limits; either is a valid configuration.
		p.limiterStats.retire(p.limiter.Swap(lim))
		p.log.Warn().Str("algorithm", cfg.Algorithm).Int64("memory_bytes", int64(cfg.Memory)).Float64("burst_seconds", cfg.Burst).
			Msg("rate limiter replaced: partition counts start again from zero")
	}
	p.makeUnits(l, cfg)
	p.limits.Store(l)
	return nil
}

// makeUnits makes the partitions' budgets in request units, the first
// time l sets one, with as much memory as the limiter's tables.
func (p *Proxy) makeUnits(l *limits, cfg config.LimitsConfig) {
	if l.units && p.units.Load() == nil {
		p.units.Store(ratelimit.NewUnits(int(cfg.Memory)))
	}
}

// limiterConfig is l's limiter configuration on the proxy's clock, which
// the request path passes to the limiter with each decision.
func (p *Proxy) limiterConfig(l *limits) ratelimit.Config {
	cfg := l.limiter
	cfg.Clock = p.clock
	return cfg
}

// restartOnlyChanges returns the keys, such as "listen" or "schema.refresh",
// whose values differ between a and b, apart from the limits section, which
// reloads apply.
func restartOnlyChanges(a, b config.Config) []string {
	a.Limits, b.Limits = config.LimitsConfig{}, config.LimitsConfig{}
	a.TLS, b.TLS = config.TLSConfig{}, config.TLSConfig{}
	a.UpstreamTLS, b.UpstreamTLS = config.UpstreamTLSConfig{}, config.UpstreamTLSConfig{}
	a.Coordination, b.Coordination = config.CoordinationConfig{}, config.CoordinationConfig{}
	a.HotReads.Keyspaces, b.HotReads.Keyspaces = nil, nil
	a.Clients, b.Clients = config.ClientsConfig{}, config.ClientsConfig{}
	a.RequestUnits, b.RequestUnits = config.RequestUnitsConfig{}, config.RequestUnitsConfig{}
	return changedKeys("", reflect.ValueOf(a), reflect.ValueOf(b), nil)
}

func changedKeys(prefix string, a, b reflect.Value, out []string) []string {
	t := a.Type()
	for i := range t.NumField() {
		if !t.Field(i).IsExported() {
			continue
		}
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		name = prefix + name
		fa, fb := a.Field(i), b.Field(i)
		if fa.Kind() == reflect.Struct {
			out = changedKeys(name+".", fa, fb, out)
			continue
		}
		if !reflect.DeepEqual(fa.Interface(), fb.Interface()) {
			out = append(out, name)
		}
	}
	return out
}
