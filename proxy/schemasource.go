package proxy

import (
	"context"
	"crypto/tls"
	"sync"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/schema"
	"github.com/cqlguard/cqlguard/schema/loader"
)

// SchemaSource supplies the partition keys of the upstream's tables.
type SchemaSource interface {
	// Current returns the latest snapshot; never nil.
	Current() *schema.Snapshot
	// Refresh asks for a reload soon, without blocking.
	Refresh()
}

// upstreamSchema loads the schema from the upstream nodes, connecting on
// first use so that the proxy starts even while they are down.
type upstreamSchema struct {
	cfg     loader.DialConfig
	mu      sync.Mutex
	session *gocql.Session
}

// Load implements loader.Source.
func (u *upstreamSchema) Load(ctx context.Context) (*schema.Snapshot, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.session == nil {
		s, err := loader.Dial(ctx, u.cfg)
		if err != nil {
			return nil, err
		}
		u.session = s
	}
	snap, err := loader.New(u.session).Load(ctx)
	if err != nil {
		// A session whose nodes all went away, as when the upstream
		// restarts, may never find them again: dial afresh next time.
		u.session.Close()
		u.session = nil
	}
	return snap, err
}

// withSession runs fn with the session the schema is read with, dialled
// if need be, for others that read the upstreams' system tables. A
// session fn fails with is dialled afresh next time, as Load does: one
// whose nodes all went away may never find them again.
func (u *upstreamSchema) withSession(ctx context.Context, fn func(*gocql.Session) error) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.session == nil {
		s, err := loader.Dial(ctx, u.cfg)
		if err != nil {
			return err
		}
		u.session = s
	}
	err := fn(u.session)
	if err != nil {
		u.session.Close()
		u.session = nil
	}
	return err
}

func (u *upstreamSchema) close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.session != nil {
		u.session.Close()
	}
}

// startSchema starts loading the schema from cfg's upstreams until ctx
// ends.
func startSchema(ctx context.Context, cfg config.Config, tlsConf *tls.Config, log zerolog.Logger) (*loader.Schema, *upstreamSchema, func(), error) {
	password, err := cfg.Schema.Password()
	if err != nil {
		return nil, nil, nil, err
	}
	src := &upstreamSchema{cfg: loader.DialConfig{
		Upstreams: cfg.Upstreams,
		Username:  cfg.Schema.Username,
		Password:  password,
		Timeout:   time.Duration(cfg.DialTimeout),
		TLS:       tlsConf,
		Log:       log,
	}}
	s := loader.NewSchema(src, log.With().Str("component", "schema").Logger(), time.Duration(cfg.Schema.Refresh))
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx)
	}()
	return s, src, func() { cancel(); <-done; src.close() }, nil
}
