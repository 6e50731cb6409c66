package proxy

import (
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

// init registers the reload metrics with reg; cfg is the configuration
// the proxy starts with.
func (r *reloader) init(reg prometheus.Registerer, cfg config.Config) {
	r.last = cfg
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
}

// Reload applies cfg, the configuration file loaded again, as far as it
// can change while running: the limits section, the tables of hot_reads,
// clients, request_units, coordination, and the certificates, which are
// read again even when their paths did not change, since a reload is how a
// renewed certificate takes effect. Requests see the new settings as soon
// as it returns, and the old ones until then: each request those of one
// configuration, never a mix.
//
// If the limiter's own settings changed (limits.algorithm, limits.memory,
// or limits.burst with the token-bucket algorithm), a new limiter replaces
// the old one and counting starts afresh, which lets every partition
// through for up to a second or a burst. Other settings take effect on
// restart only; those that changed are logged.
//
// A configuration that is not valid, or any part of which cannot be used
// (a certificate that does not load, a password file that cannot be read),
// changes nothing: the error is logged, counted and returned.
func (p *Proxy) Reload(cfg config.Config) error {
	r := &p.reload
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := p.buildSettings(cfg, p.settings.Load())
	if err != nil {
		p.ReloadFailed(cfg.File(), err)
		return err
	}
	p.commit(c)
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
