package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/cqlguard/cqlguard/config"
)

// tlsForClients reads c's files and returns the TLS configuration for
// accepted connections.
func tlsForClients(c config.TLSConfig) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: loading %s and %s: %w", c.CertFile, c.KeyFile, err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if c.ClientCAFile != "" {
		pem, err := os.ReadFile(c.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("tls: client_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: client_ca_file %s holds no PEM certificate", c.ClientCAFile)
		}
		conf.ClientCAs, conf.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return conf, nil
}

// loadTLS reads cfg's files and makes them the configuration of the
// connections accepted from now on; with TLS off it turns TLS off.
func (p *Proxy) loadTLS(cfg config.TLSConfig) error {
	if cfg.CertFile == "" {
		p.tls.Store(nil)
		return nil
	}
	conf, err := tlsForClients(cfg)
	if err != nil {
		return err
	}
	p.tls.Store(conf)
	return nil
}

// loadUpstreamTLS reads cfg's files and makes them the configuration of
// the upstream connections opened from now on.
func (p *Proxy) loadUpstreamTLS(cfg config.UpstreamTLSConfig) error {
	conf, err := tlsForUpstreams(cfg)
	if err != nil {
		return err
	}
	p.upstreamTLS.Store(conf)
	return nil
}

// acceptTLS wraps client in TLS when it is on, and completes the handshake
// within timeout, so that a client that never finishes it does not hold a
// connection.
func (p *Proxy) acceptTLS(client net.Conn, timeout time.Duration) (net.Conn, error) {
	conf := p.tls.Load()
	if conf == nil {
		return client, nil
	}
	c := tls.Server(client, conf)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := c.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("tls handshake: %w", err)
	}
	return c, nil
}

// tlsForUpstreams reads c's files and returns the TLS configuration for
// dialing the nodes, nil when TLS is off.
func tlsForUpstreams(c config.UpstreamTLSConfig) (*tls.Config, error) {
	if !c.Enabled {
		return nil, nil
	}
	conf := &tls.Config{ServerName: c.ServerName, InsecureSkipVerify: c.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("upstream_tls: ca_file: %w", err)
		}
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("upstream_tls: ca_file %s holds no PEM certificate", c.CAFile)
		}
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("upstream_tls: loading %s and %s: %w", c.CertFile, c.KeyFile, err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	return conf, nil
}

// forUpstream returns conf for dialing addr: verifying the address's host
// unless a server name is configured. conf may be nil (TLS off).
func forUpstream(conf *tls.Config, addr string) *tls.Config {
	if conf == nil || conf.ServerName != "" {
		return conf
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return conf
	}
	c := conf.Clone()
	c.ServerName = host
	return c
}
