package loader

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/apache/cassandra-gocql-driver/v2/gocqlzerolog"
	"github.com/rs/zerolog"
)

// DialConfig says how to reach the upstream cluster for schema queries.
type DialConfig struct {
	// Upstreams are the nodes to connect to, host:port. No other node is
	// contacted, even if the cluster has more.
	Upstreams []string
	// Username and Password authenticate when Username is set.
	Username, Password string
	// Timeout bounds connecting and each query; zero means 10s.
	Timeout time.Duration
	// TLS, when set, is the configuration of TLS towards the nodes; the
	// driver verifies each node's certificate against its host unless
	// TLS.ServerName is set or TLS.InsecureSkipVerify.
	TLS *tls.Config
	// Log receives the driver's messages; the zero Logger discards them.
	Log zerolog.Logger
}

// Dial opens a gocql session on the configured upstream nodes for a Loader.
// The proxy dials its upstreams directly rather than through itself, and
// talks only to them: the nodes' own peers may be unreachable from the
// proxy, or reachable only at addresses the operator did not mean it to use.
func Dial(ctx context.Context, cfg DialConfig) (*gocql.Session, error) {
	if len(cfg.Upstreams) == 0 {
		return nil, errors.New("schema: no upstream to dial")
	}
	filter, err := resolveUpstreams(ctx, cfg.Upstreams)
	if err != nil {
		return nil, err
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	c := gocql.NewCluster(cfg.Upstreams...)
	c.DisableInitialHostLookup = true
	// DisableInitialHostLookup covers start-up; the filter covers nodes the
	// driver would learn of later from topology events.
	c.HostFilter = filter
	c.Timeout = timeout
	c.ConnectTimeout = timeout
	c.NumConns = 1
	c.Consistency = gocql.One
	// The driver's own schema cache would read all of system_schema a second
	// time on every change.
	c.Metadata.CacheMode = gocql.Disabled
	c.Logger = gocqlzerolog.NewZerologLogger(cfg.Log)
	if cfg.Username != "" {
		c.Authenticator = gocql.PasswordAuthenticator{Username: cfg.Username, Password: cfg.Password}
	}
	if cfg.TLS != nil {
		// With a Config whose InsecureSkipVerify is false, gocql verifies
		// hosts whatever EnableHostVerification says.
		c.SslOpts = &gocql.SslOptions{Config: cfg.TLS.Clone(), EnableHostVerification: !cfg.TLS.InsecureSkipVerify}
	}

	// gocql takes no context, so the session is made aside and abandoned,
	// then closed once it exists, if ctx ends first.
	type result struct {
		s   *gocql.Session
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := c.CreateSession()
		done <- result{s, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("schema: connecting to %v: %w", cfg.Upstreams, r.err)
		}
		return r.s, nil
	case <-ctx.Done():
		go func() {
			if r := <-done; r.s != nil {
				r.s.Close()
			}
		}()
		return nil, fmt.Errorf("schema: connecting to %v: %w", cfg.Upstreams, ctx.Err())
	}
}

// upstreamFilter accepts the hosts whose address and port are those of a
// configured upstream.
type upstreamFilter map[string]bool

// Accept implements gocql.HostFilter.
func (f upstreamFilter) Accept(h *gocql.HostInfo) bool {
	return f[net.JoinHostPort(h.ConnectAddress().String(), strconv.Itoa(h.Port()))]
}

// resolveUpstreams builds the filter for upstreams, host:port each, by the
// IP addresses their hosts have now.
func resolveUpstreams(ctx context.Context, upstreams []string) (upstreamFilter, error) {
	f := make(upstreamFilter)
	for _, u := range upstreams {
		host, port, err := net.SplitHostPort(u)
		if err != nil {
			return nil, fmt.Errorf("schema: upstream %q: %w", u, err)
		}
		addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
		if err != nil {
			return nil, fmt.Errorf("schema: upstream %q: %w", u, err)
		}
		for _, a := range addrs {
			f[net.JoinHostPort(a.IP.String(), port)] = true
		}
	}
	return f, nil
}
