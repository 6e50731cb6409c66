package proxy

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cqlguard/cqlguard/ratelimit"
)

// reloader is the state of configuration reloads.
type reloader struct {
	mu sync.Mutex // serializes reloads: SIGHUP and the file watcher may race
	// last is the configuration last applied, to report what a reload
	// cannot apply.
	last Config
	// sum is the SHA-256 of the file contents last applied or refused, so
	// that the watcher reloads only contents it has not tried.
	sum         [sha256.Size]byte
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
	p.limits.Store(l)
	p.limiter.Store(lim)

	r := &p.reload
	r.last, r.sum = p.cfg, p.cfg.source
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

// ReloadConfig reads the configuration file at path again, with the checks
// LoadConfig makes, and applies what can change while running: the limits
// section. Requests see the new limits as soon as it returns, and the old
// ones until then.
//
// If the limiter's own settings changed (limits.algorithm, limits.memory,
// or limits.burst with the token-bucket algorithm), a new limiter replaces
// the old one and counting starts afresh, which lets every partition
// through for up to a second or a burst. Other settings take effect on
// restart only; those that changed are logged.
//
// A file that cannot be read or is not valid changes nothing: the error,
// which names the file and line, is logged, counted and returned.
func (p *Proxy) ReloadConfig(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		err = fmt.Errorf("reading config: %w", err)
	}
	return p.reloadConfig(path, data, err, false)
}

// reloadConfig applies data, the contents of the file at path, unless
// reading it failed with readErr. If onlyNew, contents already applied or
// refused are skipped.
func (p *Proxy) reloadConfig(path string, data []byte, readErr error, onlyNew bool) error {
	r := &p.reload
	r.mu.Lock()
	defer r.mu.Unlock()
	err := readErr
	var cfg Config
	if err == nil {
		sum := sha256.Sum256(data)
		if onlyNew && sum == r.sum {
			return nil
		}
		r.sum = sum
		cfg, err = parseConfig(path, data)
	}
	if err == nil {
		err = p.applyLimits(cfg.Limits)
	}
	if err == nil {
		// Certificates are read again even when their paths did not
		// change: a reload is how a renewed certificate takes effect.
		err = p.loadTLS(cfg.TLS)
	}
	if err == nil {
		err = p.loadUpstreamTLS(cfg.UpstreamTLS)
	}
	if err != nil {
		r.failure.Inc()
		p.log.Error().Err(err).Str("config", path).Msg("configuration not reloaded; the previous one stays in effect")
		return err
	}
	for _, key := range restartOnlyChanges(r.last, cfg) {
		p.log.Warn().Str("config", path).Str("key", key).
			Msg("setting differs from the running configuration and takes effect on restart only")
	}
	r.last = cfg
	r.success.Inc()
	r.lastSuccess.SetToCurrentTime()
	l := cfg.Limits
	p.log.Info().Str("config", path).Bool("dry_run", l.DryRun).Int("keyspaces", len(l.Keyspaces)).
		Msg("configuration reloaded")
	return nil
}

// applyLimits swaps in the limits of cfg, and a new limiter if they need
// one.
func (p *Proxy) applyLimits(cfg LimitsConfig) error {
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
		p.log.Warn().Str("algorithm", cfg.Algorithm).Int64("memory", int64(cfg.Memory)).Float64("burst", cfg.Burst).
			Msg("rate limiter replaced: partition counts start again from zero")
	}
	p.limits.Store(l)
	return nil
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
func restartOnlyChanges(a, b Config) []string {
	a.Limits, b.Limits = LimitsConfig{}, LimitsConfig{}
	a.TLS, b.TLS = TLSConfig{}, TLSConfig{}
	a.UpstreamTLS, b.UpstreamTLS = UpstreamTLSConfig{}, UpstreamTLSConfig{}
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

// DefaultWatchInterval is how often WatchConfig polls when given no
// interval.
const DefaultWatchInterval = 2 * time.Second

// WatchConfig polls the configuration file at path every interval (every
// <= 0 means DefaultWatchInterval) until ctx ends, and reloads it, as
// ReloadConfig does, when its contents differ from those last loaded: at
// startup, by ReloadConfig or by the watcher. A change of modification time
// or size makes it read the file; a touch that leaves the contents alone
// does not reload. Contents that failed to load are not tried again until
// they change.
//
// Polling rather than inotify works the same on every platform, and sees
// files replaced by rename or behind a swapped symlink (as Kubernetes
// updates ConfigMap volumes).
func (p *Proxy) WatchConfig(ctx context.Context, path string, every time.Duration) {
	if every <= 0 {
		every = DefaultWatchInterval
	}
	w := fileWatch{path: path}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		// The first look is immediate: the file may have changed since it
		// was loaded.
		p.pollConfig(&w)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pollConfig looks at the watched file once, and reloads it if its
// contents are new.
func (p *Proxy) pollConfig(w *fileWatch) {
	data, ok, err := w.changed()
	switch {
	case err != nil:
		if !w.failing {
			w.failing = true
			p.log.Warn().Err(err).Msg("cannot read the configuration file; watching it for changes")
		}
	case ok:
		w.failing = false
		p.reloadConfig(w.path, data, nil, true)
	default:
		w.failing = false
	}
}

// fileWatch tells when a file may have changed, by its modification time
// and size.
type fileWatch struct {
	path    string
	modTime time.Time
	size    int64
	read    bool // modTime and size are set
	failing bool // a failure to read the file has been logged
}

// changed returns the file's contents and true if its time or size
// changed since the last call that returned them.
func (w *fileWatch) changed() ([]byte, bool, error) {
	fi, err := os.Stat(w.path)
	if err != nil {
		return nil, false, err
	}
	if w.read && fi.ModTime().Equal(w.modTime) && fi.Size() == w.size {
		return nil, false, nil
	}
	// Read after Stat: a write in between gives a newer time, seen at the
	// next poll.
	data, err := os.ReadFile(w.path)
	if err != nil {
		return nil, false, err
	}
	w.modTime, w.size, w.read = fi.ModTime(), fi.Size(), true
	return data, true, nil
}
