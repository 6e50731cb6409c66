package proxy

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

// testCA issues certificates for the TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cqlguard test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and key for name, for a server or a
// client.
func (ca *testCA) issue(t testing.TB, name string, serial int64) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Clients reach the proxy over TLS with a certificate signed by the client
// CA, are refused without one, and a reload serves a renewed certificate
// to new connections.
func TestClientTLS(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{})
	ca := newTestCA(t)
	dir := t.TempDir()
	cfgTLS := config.TLSConfig{CertFile: filepath.Join(dir, "server.pem"), KeyFile: filepath.Join(dir, "server.key"), ClientCAFile: filepath.Join(dir, "ca.pem")}
	cert, key := ca.issue(t, "cqlguard one", 2)
	writeFile(t, cfgTLS.CertFile, cert)
	writeFile(t, cfgTLS.KeyFile, key)
	writeFile(t, cfgTLS.ClientCAFile, ca.pem)
	p, addr := startProxy(t, func(c *config.Config) {
		c.Listen, c.Upstreams = "127.0.0.1:0", []string{node.Addr()}
		c.TLS = cfgTLS
	})

	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	ccert, ckey := ca.issue(t, "driver", 3)
	clientCert, err := tls.X509KeyPair(ccert, ckey)
	if err != nil {
		t.Fatal(err)
	}
	// options dials with TLS, sends OPTIONS and returns the server's name.
	options := func(certs []tls.Certificate) (string, error) {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
			&tls.Config{RootCAs: roots, Certificates: certs, ServerName: "127.0.0.1"})
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(frame.AppendHeader(nil, frame.Header{Version: 4, Stream: 1, Opcode: frame.OpOptions})); err != nil {
			return "", err
		}
		_, h, err := frame.NewReader(bufio.NewReader(c), 1<<20).Next()
		if err != nil {
			return "", err
		}
		if h.Opcode != frame.OpSupported {
			t.Errorf("OPTIONS over TLS answered with %s", h.Opcode)
		}
		return c.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
	}
	if name, err := options([]tls.Certificate{clientCert}); err != nil || name != "cqlguard one" {
		t.Fatalf("with a client certificate: %q, %v", name, err)
	}
	if _, err := options(nil); err == nil {
		t.Error("a client without a certificate was served")
	}

	// Renew the certificate and reload.
	cert, key = ca.issue(t, "cqlguard two", 4)
	writeFile(t, cfgTLS.CertFile, cert)
	writeFile(t, cfgTLS.KeyFile, key)
	cfg := p.reload.last
	if err := p.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if name, err := options([]tls.Certificate{clientCert}); err != nil || name != "cqlguard two" {
		t.Errorf("after the reload: %q, %v", name, err)
	}
	// A reload that cannot read the files keeps the certificate in use.
	writeFile(t, cfgTLS.KeyFile, []byte("not a key"))
	if err := p.Reload(cfg); err == nil {
		t.Error("a broken key file loaded")
	}
	if name, err := options([]tls.Certificate{clientCert}); err != nil || name != "cqlguard two" {
		t.Errorf("after a failed reload: %q, %v", name, err)
	}
}

// The proxy dials TLS upstreams, verifying their certificates against the
// configured CA: with the CA, clients are served; without it (the
// system's roots), the upstream is refused and the client told why.
func TestUpstreamTLS(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	dir := t.TempDir()
	cert, key := ca.issue(t, "node", 5)
	nodeCert, err := tls.X509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{TLS: &tls.Config{Certificates: []tls.Certificate{nodeCert}}})
	caFile := filepath.Join(dir, "ca.pem")
	writeFile(t, caFile, ca.pem)
	_, trusting := startProxy(t, func(c *config.Config) {
		c.Listen, c.Upstreams = "127.0.0.1:0", []string{node.Addr()}
		c.UpstreamTLS = config.UpstreamTLSConfig{Enabled: true, CAFile: caFile}
	})
	_, distrusting := startProxy(t, func(c *config.Config) {
		c.Listen, c.Upstreams = "127.0.0.1:0", []string{node.Addr()}
		c.UpstreamTLS = config.UpstreamTLSConfig{Enabled: true}
	})
	ask := func(addr string) (frame.Header, []byte) {
		t.Helper()
		c := rawConn(t, addr)
		c.Write(frame.AppendHeader(nil, frame.Header{Version: 4, Stream: 1, Opcode: frame.OpOptions}))
		f, h, err := frame.NewReader(bufio.NewReader(c), 1<<20).Next()
		if err != nil {
			t.Fatalf("OPTIONS through %s: %v", addr, err)
		}
		return h, f[frame.HeaderSize:]
	}
	if h, _ := ask(trusting); h.Opcode != frame.OpSupported {
		t.Errorf("through a proxy that trusts the node's CA: %s", h.Opcode)
	}
	h, body := ask(distrusting)
	if code, msg := errorOf(t, h, body); code != frame.ErrCodeServer || !strings.Contains(msg, "certificate") {
		t.Errorf("through a proxy that does not trust it: %#x %q", code, msg)
	}
}

// With TLS on, a connection counts against max_connections from its
// accept: connections that never send a ClientHello fill the bound, those
// past it are refused as any connection over it is (closed when they send
// nothing, a TLS client told the setting), and a TLS client is served once
// one of them leaves.
func TestTLSHandshakeCountsAgainstMaxConnections(t *testing.T) {
	t.Parallel()
	const max, extra = 2, 3
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{})
	ca := newTestCA(t)
	dir := t.TempDir()
	cfgTLS := config.TLSConfig{CertFile: filepath.Join(dir, "server.pem"), KeyFile: filepath.Join(dir, "server.key")}
	cert, key := ca.issue(t, "cqlguard", 2)
	writeFile(t, cfgTLS.CertFile, cert)
	writeFile(t, cfgTLS.KeyFile, key)
	cfg := config.Default()
	cfg.Admin.Listen, cfg.Listen, cfg.Upstreams = "", "127.0.0.1:0", []string{node.Addr()}
	cfg.TLS, cfg.MaxConnections = cfgTLS, max
	// Long enough that the silent connections under the bound stay for
	// the whole test; the refusals' deadline is short instead.
	cfg.FrameTimeout = config.Duration(time.Minute)
	p, addr := serveProxy(t, cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{}),
		func(p *Proxy) { p.refuseTimeout = 200 * time.Millisecond })
	refused := func() float64 {
		return testutil.ToFloat64(p.metrics.protocolErrors.WithLabelValues("too_many_connections"))
	}
	waitConns := func(want int64) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); p.conns.Load() != want; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d client connections counted, want %d", p.conns.Load(), want)
			}
		}
	}

	silent := make([]net.Conn, max)
	for i := range silent {
		silent[i] = rawConn(t, addr)
	}
	waitConns(max)
	for i := range extra {
		c := rawConn(t, addr)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if b, err := io.ReadAll(c); err != nil || len(b) != 0 {
			t.Errorf("connection %d past the bound: read % x, %v; want it closed", i, b, err)
		}
	}
	if got := refused(); got != extra {
		t.Errorf("%v connections refused, want %d", got, extra)
	}

	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	options := func() (frame.Header, []byte, error) {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
		if err != nil {
			return frame.Header{}, nil, err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write(frame.AppendHeader(nil, frame.Header{Version: 4, Stream: 1, Opcode: frame.OpOptions}))
		f, h, err := frame.NewReader(bufio.NewReader(c), 1<<20).Next()
		if err != nil {
			return h, nil, err
		}
		return h, f[frame.HeaderSize:], nil
	}
	h, body, err := options()
	if err != nil {
		t.Fatalf("TLS client at the bound: %v", err)
	}
	if code, msg := errorOf(t, h, body); code != frame.ErrCodeServer || !strings.Contains(msg, "max_connections 2") {
		t.Errorf("TLS client at the bound: %#x %q", code, msg)
	}

	silent[0].Close()
	waitConns(max - 1)
	if h, _, err := options(); err != nil || h.Opcode != frame.OpSupported {
		t.Errorf("TLS client once a silent connection left: %v, %v", h, err)
	}
}
