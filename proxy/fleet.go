package proxy

// Fleet-wide limits (the coordination section of the configuration): the
// reporter of package fleet, started with the proxy and replaced by a
// reload that changes it. The request path reads only the ratelimit.Fleet
// it fills (decide.go).

import (
	"context"
	"crypto/tls"
	"reflect"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/fleet"
	"github.com/cqlguard/cqlguard/ratelimit"
)

// fleetReporter is the running reporter and the configuration it runs.
// Settings are built (buildSettings) and committed under the reload lock,
// which serializes runReporter; mu guards what the other readers see.
type fleetReporter struct {
	mu      sync.Mutex
	cfg     config.CoordinationConfig
	stop    func() // stops the reporter; nil when none runs
	metrics *fleet.Metrics
}

// runReporter starts, replaces or stops the reporter for cfg, with
// client, its Redis client (nil when coordination is off), filling f. It
// replaces a running one even when cfg is the same, so that a reload reads
// a rotated password or renewed certificates; f carries the fleet's
// shares over unless tracked_partitions changed (buildSettings).
func (p *Proxy) runReporter(cfg config.CoordinationConfig, client redis.UniversalClient, f *ratelimit.Fleet) {
	c := &p.reporter
	c.mu.Lock()
	defer c.mu.Unlock()
	same := c.stop != nil && reflect.DeepEqual(c.cfg, cfg)
	if c.stop != nil {
		c.stop()
		c.stop = nil
	}
	c.cfg = cfg
	if client == nil {
		return
	}
	r := fleet.New(fleet.Config{
		Client:        client,
		Redial:        func() (redis.UniversalClient, error) { return redisClient(cfg) },
		KeyPrefix:     cfg.KeyPrefix,
		Interval:      time.Duration(cfg.SyncInterval),
		Share:         cfg.Fallback == config.FallbackShare,
		MaxPartitions: cfg.MaxPartitionsPerReport,
		Now:           func() time.Time { return time.Unix(0, p.clock()) },
	}, f, p.log.With().Str("component", "coordination").Logger(), c.metrics)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	c.stop = func() { cancel(); <-done }
	if same {
		return
	}
	p.log.Info().Strs("addresses", cfg.Addresses).Bool("cluster", cfg.Cluster).
		Float64("sync_interval_seconds", time.Duration(cfg.SyncInterval).Seconds()).Str("fallback", cfg.Fallback).
		Msg("coordinating limits with the fleet")
}

// trackedPartitions is the fleet size the running reporter's shares were
// made for: a reload that changes it starts them afresh.
func (p *Proxy) trackedPartitions() int {
	c := &p.reporter
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg.TrackedPartitions
}

// stopReporter stops the reporter, if one runs.
func (p *Proxy) stopReporter() {
	c := &p.reporter
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stop != nil {
		c.stop()
		c.stop = nil
	}
}

// redisClient returns a client for the Redis of cfg. It connects lazily:
// a Redis that is down is a failed report, not a failed start. Every
// operation is bounded by a report's timeout (fleet.ReportTimeout), and
// none is retried, nor a dial: the next report tries again.
func redisClient(cfg config.CoordinationConfig) (redis.UniversalClient, error) {
	password, err := cfg.Password()
	if err != nil {
		return nil, err
	}
	var conf *tls.Config
	if t := cfg.TLS; t.Enabled {
		if conf, err = clientTLS("coordination.tls", t.CAFile, t.CertFile, t.KeyFile); err != nil {
			return nil, err
		}
		// Without a server name, each address's host is verified (the
		// TLS dialer takes it from the address).
		conf.ServerName = t.ServerName
	}
	timeout := fleet.ReportTimeout(time.Duration(cfg.SyncInterval))
	dialTimeout := timeout
	// The dialer bounds what a reply may make the client allocate
	// (fleet.NewDialer), and dials TLS itself.
	dial := fleet.NewDialer(dialTimeout, conf)
	if cfg.Cluster {
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: cfg.Addresses, Username: cfg.Username, Password: password, TLSConfig: conf, Dialer: dial,
			DialTimeout: dialTimeout, ReadTimeout: timeout, WriteTimeout: timeout,
			MaxRetries: -1, DialerRetries: 1, PoolSize: 4, ContextTimeoutEnabled: true,
		}), nil
	}
	return redis.NewClient(&redis.Options{
		Addr: cfg.Addresses[0], Username: cfg.Username, Password: password, TLSConfig: conf, Dialer: dial,
		DialTimeout: dialTimeout, ReadTimeout: timeout, WriteTimeout: timeout,
		MaxRetries: -1, DialerRetries: 1, PoolSize: 4, ContextTimeoutEnabled: true,
	}), nil
}
