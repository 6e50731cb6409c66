package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// TLSConfig configures TLS towards clients. It is off while CertFile is
// empty. The files are read at start and again on every reload (SIGHUP),
// so that a renewed certificate takes effect without a restart; connections
// already open keep the certificate they were accepted with.
type TLSConfig struct {
	// CertFile and KeyFile are the proxy's certificate chain and key, PEM.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ClientCAFile, when set, makes clients present a certificate signed
	// by one of its CAs (PEM).
	ClientCAFile string `yaml:"client_ca_file"`
}

func (c TLSConfig) enabled() bool { return c.CertFile != "" }

func (c TLSConfig) validate() error {
	if (c.CertFile == "") != (c.KeyFile == "") {
		return errors.New("tls: cert_file and key_file go together")
	}
	if c.ClientCAFile != "" && c.CertFile == "" {
		return errors.New("tls: client_ca_file needs cert_file and key_file")
	}
	return nil
}

// load reads the files and returns the TLS configuration for accepted
// connections.
func (c TLSConfig) load() (*tls.Config, error) {
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
func (p *Proxy) loadTLS(cfg TLSConfig) error {
	if !cfg.enabled() {
		p.tls.Store(nil)
		return nil
	}
	conf, err := cfg.load()
	if err != nil {
		return err
	}
	p.tls.Store(conf)
	return nil
}

// loadUpstreamTLS reads cfg's files and makes them the configuration of
// the upstream connections opened from now on.
func (p *Proxy) loadUpstreamTLS(cfg UpstreamTLSConfig) error {
	conf, err := cfg.load()
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

// UpstreamTLSConfig configures TLS towards the upstream nodes, for the
// proxied connections and the schema reads. It is off unless Enabled. Its
// files are read at start and again on every reload, for the connections
// opened from then on.
type UpstreamTLSConfig struct {
	Enabled bool `yaml:"enabled"`
	// CAFile holds the CAs that sign the nodes' certificates (PEM); empty
	// means the system's.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the proxy's client certificate, for nodes
	// that require one (PEM).
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name the nodes' certificates must carry; empty
	// means the host of each upstream address.
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify accepts any certificate: for tests only.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

func (c UpstreamTLSConfig) validate() error {
	if (c.CertFile == "") != (c.KeyFile == "") {
		return errors.New("upstream_tls: cert_file and key_file go together")
	}
	if !c.Enabled && (c.CAFile != "" || c.CertFile != "" || c.ServerName != "" || c.InsecureSkipVerify) {
		return errors.New("upstream_tls: settings given but enabled is false")
	}
	return nil
}

// load reads the files and returns the TLS configuration for dialing the
// nodes, nil when TLS is off.
func (c UpstreamTLSConfig) load() (*tls.Config, error) {
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
