package proxy

import (
	"crypto/tls"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/ratelimit"
)

// settings are everything a reload can change. A value is never modified
// once stored in Proxy.settings: a reload builds a whole new one
// (buildSettings), checking every part before any takes effect, and swaps
// it in with one store. A request loads it once, with its frame, and keeps
// it until its answer (request.set), so that no request sees two
// configurations.
type settings struct {
	// limits are the per-partition limits and limiter the counters that
	// enforce them.
	limits  *limits
	limiter *ratelimit.Limiter
	// units are the partitions' budgets in request units, made the first
	// time limits set one and kept after.
	units *ratelimit.Units
	// fleet holds the fleet-wide shares of hot partitions while the
	// fleet's reporter runs (fleet.go); nil otherwise.
	fleet *ratelimit.Fleet
	// clients are the client classes (clients.go).
	clients *clientClasses
	// hotReads are the tables whose hot reads are served (hotreads.go);
	// nil when none are.
	hotReads *hotTables
	// tls is the configuration of client connections accepted; nil when
	// TLS is off. upstreamTLS is that of upstream connections opened;
	// nil when TLS towards the upstream is off.
	tls, upstreamTLS *tls.Config
}

// change is a configuration built and checked by buildSettings, and what
// applying it does besides storing its settings: commit carries it out.
type change struct {
	cfg  config.Config
	next *settings
	// limiterReplaced: the limiter's own settings changed, so next has a
	// new one and counting starts again.
	limiterReplaced bool
	// redis is the client of the fleet's reporter that commit starts; nil
	// when coordination is off.
	redis redis.UniversalClient
}

// buildSettings builds the settings of cfg over old (nil at start), which
// it reads but does not change: counters and budgets carry over where the
// configuration keeps them. It fails, having changed nothing, when any
// part of cfg cannot be used.
func (p *Proxy) buildSettings(cfg config.Config, old *settings) (*change, error) {
	if old == nil {
		old = &settings{}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &change{cfg: cfg, next: &settings{}}
	next := c.next
	var err error
	if next.limits, err = newLimits(cfg.Limits); err != nil {
		return nil, err
	}
	next.limiter = old.limiter
	if old.limits == nil || !sameLimiter(old.limits.limiter, next.limits.limiter) {
		if next.limiter, err = ratelimit.New(p.limiterConfig(next.limits)); err != nil {
			return nil, fmt.Errorf("limits: %w", err)
		}
		c.limiterReplaced = old.limiter != nil
	}
	next.units = old.units
	if next.limits.units && next.units == nil {
		next.units = ratelimit.NewUnits(int(cfg.Limits.Memory))
	}
	if next.clients, err = newClientClasses(cfg.Clients, cfg.RequestUnits, old.clients, p.clientMetrics, p.elapsed()); err != nil {
		return nil, err
	}
	next.hotReads = p.hotReads.tablesOf(cfg.HotReads)
	if cfg.TLS.CertFile != "" {
		if next.tls, err = tlsForClients(cfg.TLS); err != nil {
			return nil, err
		}
	}
	if next.upstreamTLS, err = tlsForUpstreams(cfg.UpstreamTLS); err != nil {
		return nil, err
	}
	// Last, as the only part that holds something to release: the
	// reporter's Redis client.
	if cfg.Coordination.Enabled() {
		if c.redis, err = redisClient(cfg.Coordination); err != nil {
			return nil, err
		}
		next.fleet = old.fleet
		if next.fleet == nil || p.trackedPartitions() != cfg.Coordination.TrackedPartitions {
			next.fleet = ratelimit.NewFleet(cfg.Coordination.TrackedPartitions)
		}
	}
	return c, nil
}

// commit makes c's settings the proxy's and does what goes with them: the
// budgets of client classes take their new rates, a limiter replaced has
// its statistics kept, the hot reads' cache is dropped when no table is
// served, and the fleet's reporter is started, replaced or stopped.
// It cannot fail. Reloads are serialized (reloader.mu), and so are commits.
func (p *Proxy) commit(c *change) {
	old := p.settings.Swap(c.next)
	c.next.clients.apply(p.clientMetrics, p.elapsed())
	if c.next.hotReads == nil {
		p.hotReads.cache.Drop()
	}
	if c.limiterReplaced {
		p.limiterStats.retire(old.limiter)
		l := c.cfg.Limits
		p.log.Warn().Str("algorithm", l.Algorithm).Int64("memory_bytes", int64(l.Memory)).Float64("burst_seconds", l.Burst).
			Msg("rate limiter replaced: partition counts start again from zero")
	}
	p.runReporter(c.cfg.Coordination, c.redis, c.next.fleet)
}
