package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/cqlguard/cqlguard/config"
)

// Requests that arrived whole are forwarded while the frame read after
// them is still arriving: a client whose write ends part way through a
// frame does not hold back the requests before it, on the connection's own
// node or on another, over a plain socket or TLS (where the proxy cannot
// tell that a read will wait).
func TestRequestsBeforeAPartialFrameForwarded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		low  bool // the whole request's partition: on the first node, else on another
		tls  bool
	}{
		{"own node", true, false},
		{"other node", false, false},
		{"own node, TLS", true, true},
		{"other node, TLS", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up, b, c := startLegNode(t), startLegNode(t), startLegNode(t)
			ring := splitRing{low: b.addr(), high: c.addr()}
			if tc.low {
				ring.low = up.addr()
			}
			var dial func(addr string) net.Conn
			var edit func(*config.Config)
			if tc.tls {
				edit, dial = servedOverTLS(t)
			}
			_, addr, _ := startLegsProxy(t, up.addr(), ring, edit)
			var cl *stubClient
			if dial != nil {
				cl = stubOn(t, dial(addr))
			} else {
				cl = dialStub(t, addr)
			}
			cl.answered(readKV(1, "bench.kv", keyOn(true)), 1)
			cl.answered(readKV(2, "bench.kv", keyOn(false)), 2)
			rest := readKV(4, "bench.kv", keyOn(true))
			cl.write(append(readKV(3, "bench.kv", keyOn(tc.low)), rest[:len(rest)/2]...))
			// Well within frame_timeout, which would end the
			// connection instead of answering.
			cl.c.SetReadDeadline(time.Now().Add(5 * time.Second))
			cl.wantResult(3)
			cl.write(rest[len(rest)/2:])
			cl.wantResult(4)
		})
	}
}

// servedOverTLS returns an edit that has a proxy serve clients over TLS, and a
// dial of such a proxy.
func servedOverTLS(t *testing.T) (func(*config.Config), func(addr string) net.Conn) {
	t.Helper()
	ca := newTestCA(t)
	dir := t.TempDir()
	cfgTLS := config.TLSConfig{CertFile: filepath.Join(dir, "server.pem"), KeyFile: filepath.Join(dir, "server.key")}
	cert, key := ca.issue(t, "cqlguard", 2)
	writeFile(t, cfgTLS.CertFile, cert)
	writeFile(t, cfgTLS.KeyFile, key)
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	dial := func(addr string) net.Conn {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
		if err != nil {
			t.Fatalf("dial %s over TLS: %v", addr, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	return func(c *config.Config) { c.TLS = cfgTLS }, dial
}
