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
	"github.com/cqlguard/cqlguard/transport"
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

// acceptTLS wraps client in TLS when it is on, and completes the handshake
// within timeout, so that a client that never finishes it does not hold a
// connection.
func (p *Proxy) acceptTLS(client net.Conn, timeout time.Duration) (net.Conn, error) {
	c, ok := p.serverTLS(client).(*tls.Conn)
	if !ok {
		return client, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := c.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("tls handshake: %w", err)
	}
	return c, nil
}

// serverTLS wraps client in TLS when it is on, leaving the handshake to
// its first read or write; with TLS off it returns client.
func (p *Proxy) serverTLS(client net.Conn) net.Conn {
	if conf := p.settings.Load().tls; conf != nil {
		return transport.TLSServer(client, conf)
	}
	return client
}

// dialNode dials the node at addr with d, over TLS with conf when it is
// not nil, as tls.Dialer does (the handshake within d's timeout and
// deadline, the server name addr's host unless conf names one), but with
// the socket under TLS read and written as a plain connection's are
// (transport.TLSClient): the response path's before-wait hook then runs
// only when the socket is empty, not before every read.
func dialNode(ctx context.Context, d *net.Dialer, addr string, conf *tls.Config) (net.Conn, error) {
	if conf == nil {
		return d.DialContext(ctx, "tcp", addr)
	}
	if d.Timeout != 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}
	if !d.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Deadline)
		defer cancel()
	}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if conf.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		conf = conf.Clone()
		conf.ServerName = host
	}
	tc := transport.TLSClient(c, conf)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return tc, nil
}

// tlsForUpstreams reads c's files and returns the TLS configuration for
// dialing the nodes, nil when TLS is off.
func tlsForUpstreams(c config.UpstreamTLSConfig) (*tls.Config, error) {
	if !c.Enabled {
		return nil, nil
	}
	conf, err := clientTLS("upstream_tls", c.CAFile, c.CertFile, c.KeyFile)
	if err != nil {
		return nil, err
	}
	conf.ServerName, conf.InsecureSkipVerify = c.ServerName, c.InsecureSkipVerify
	return conf, nil
}

// clientTLS is the TLS configuration of a client that trusts the CAs of
// caFile (the system's when empty) and presents the certificate of
// certFile and keyFile, if any; errors name the configuration section.
func clientTLS(section, caFile, certFile, keyFile string) (*tls.Config, error) {
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("%s: ca_file: %w", section, err)
		}
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: ca_file %s holds no PEM certificate", section, caFile)
		}
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("%s: loading %s and %s: %w", section, certFile, keyFile, err)
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
