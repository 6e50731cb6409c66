package integration

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/proxy"
)

const (
	// tlsRole logs in through the proxies under test, so that Cassandra's
	// system_views.clients tells their connections from the others.
	tlsRole = "cqlguard_tls"
)

// TestUpstreamTLSCassandra runs gocql through a cqlguard that speaks TLS to
// the real Cassandra, whose native port takes TLS and plaintext both
// (test/cassandra/cassandra.sh). With the CA that signed the node's
// certificate, by the upstream's address or by a server_name the
// certificate holds, a session creates a table, writes and reads back,
// the proxy's schema loader reads the table over TLS too, and Cassandra
// reports each of the session's connections as TLS; also with TLS, and a
// client certificate, between gocql and the proxy. With another CA, or a
// server_name the certificate lacks, the session is refused with the
// reason.
func TestUpstreamTLSCassandra(t *testing.T) {
	skipUnlessEnabled(t)
	out, err := exec.Command("bash", filepath.Join(repoRoot(), "test", "cassandra", "cassandra.sh"), "ca").CombinedOutput()
	if err != nil {
		t.Fatalf("cassandra.sh ca: %v\n%s", err, out)
	}
	nodeCA := strings.TrimSpace(string(out))

	dir := t.TempDir()
	otherCA := newTestCA(t, dir, "other")
	clientCA := newTestCA(t, dir, "client")
	proxyCert, proxyKey := clientCA.issue(t, "proxy", x509.ExtKeyUsageServerAuth, net.ParseIP(proxyHost))
	driverCert, driverKey := clientCA.issue(t, "driver", x509.ExtKeyUsageClientAuth)

	admin := sessionThrough(t, cassandraAddr, func(c *gocql.ClusterConfig) { c.Timeout = 20 * time.Second },
		"CREATE ROLE IF NOT EXISTS "+tlsRole+" WITH PASSWORD = '"+tlsRole+"' AND LOGIN = true AND SUPERUSER = true",
	)
	defer admin.Close()

	for i, tt := range []struct {
		name     string
		upstream config.UpstreamTLSConfig
		client   config.TLSConfig  // TLS between gocql and the proxy
		ssl      *gocql.SslOptions // gocql's side of it
		wantErr  string            // in the error the proxy answers with
	}{
		{name: "ca_file", upstream: config.UpstreamTLSConfig{Enabled: true, CAFile: nodeCA}},
		{name: "server_name", upstream: config.UpstreamTLSConfig{Enabled: true, CAFile: nodeCA, ServerName: "localhost"}},
		{
			name:     "client TLS",
			upstream: config.UpstreamTLSConfig{Enabled: true, CAFile: nodeCA},
			client:   config.TLSConfig{CertFile: proxyCert, KeyFile: proxyKey, ClientCAFile: clientCA.file},
			ssl:      &gocql.SslOptions{CaPath: clientCA.file, CertPath: driverCert, KeyPath: driverKey, EnableHostVerification: true},
		},
		{
			name:     "wrong CA",
			upstream: config.UpstreamTLSConfig{Enabled: true, CAFile: otherCA.file},
			wantErr:  "certificate signed by unknown authority",
		},
		{
			name:     "wrong server_name",
			upstream: config.UpstreamTLSConfig{Enabled: true, CAFile: nodeCA, ServerName: "cassandra.invalid"},
			wantErr:  "not cassandra.invalid",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			seen := &classLog{watched: map[string]bool{"cqlguard_tls": true}, byTable: map[string][]observation{}}
			addr, stop, err := startProxy(config.Config{
				Listen: "127.0.0.1:0", Upstreams: []string{cassandraAddr}, TLS: tt.client, UpstreamTLS: tt.upstream,
			}, proxy.WithObserver(seen.add))
			if err != nil {
				t.Fatal(err)
			}
			defer stop()

			c := gocql.NewCluster(addr)
			c.Authenticator = gocql.PasswordAuthenticator{Username: tlsRole, Password: tlsRole}
			c.NumConns = 1
			c.Timeout, c.ConnectTimeout = 20*time.Second, 10*time.Second
			c.SslOpts = tt.ssl
			s, err := c.CreateSession()
			if tt.wantErr != "" {
				if err == nil {
					s.Close()
					t.Fatalf("the session opened; want an error with %q", tt.wantErr)
				}
				// gocql reports only that no protocol version worked; the
				// proxy's answer to a driver's first request says why.
				msg := firstAnswer(t, addr)
				if !strings.Contains(msg, tt.wantErr) {
					t.Fatalf("the proxy answered %q; want an error with %q", msg, tt.wantErr)
				}
				t.Logf("gocql: %v; the proxy's answer: %s", err, msg)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for _, q := range []string{
				"CREATE KEYSPACE IF NOT EXISTS cqlguard_tls WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
				"CREATE TABLE IF NOT EXISTS cqlguard_tls.kv (k int PRIMARY KEY, v text)",
			} {
				if err := s.Query(q).Exec(); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			const n = 20
			for k := i * n; k < (i+1)*n; k++ {
				if err := s.Query("INSERT INTO cqlguard_tls.kv (k, v) VALUES (?, ?)", k, fmt.Sprint(tt.name, k)).Exec(); err != nil {
					t.Fatal(err)
				}
			}
			for k := i * n; k < (i+1)*n; k++ {
				var v string
				if err := s.Query("SELECT v FROM cqlguard_tls.kv WHERE k = ?", k).Scan(&v); err != nil {
					t.Fatal(err)
				}
				if want := fmt.Sprint(tt.name, k); v != want {
					t.Errorf("row %d: %q, want %q", k, v, want)
				}
			}

			// The proxy's schema loader reads over the same TLS: it knows
			// the table once an inline write, whose partition only the
			// schema tells, is classified with its token.
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
				seen.take("cqlguard_tls", "kv")
				if err := s.Query(fmt.Sprintf("INSERT INTO cqlguard_tls.kv (k, v) VALUES (%d, 'inline')", 1000+i)).Exec(); err != nil {
					t.Fatal(err)
				}
				if slices.ContainsFunc(seen.take("cqlguard_tls", "kv"), func(o observation) bool { return len(o.tokens) == 1 }) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("after 20 s the proxy still classifies no inline write to cqlguard_tls.kv: its schema reads over TLS did not load the table")
				}
			}

			// Cassandra's view of the connections the proxy opened for the
			// session: every one is TLS.
			iter := admin.Query("SELECT username, ssl_enabled, ssl_protocol FROM system_views.clients").Iter()
			var (
				username, protocol string
				enabled            bool
				conns              int
			)
			for iter.Scan(&username, &enabled, &protocol) {
				if username != tlsRole {
					continue
				}
				conns++
				if !enabled {
					t.Errorf("a connection of %s to Cassandra is not TLS", tlsRole)
				}
			}
			if err := iter.Close(); err != nil {
				t.Fatalf("system_views.clients: %v", err)
			}
			if conns == 0 {
				t.Fatalf("Cassandra lists no connection of %s", tlsRole)
			}
			t.Logf("%d rows written and read back; Cassandra lists %d connections of the session, all TLS (%s)", n, conns, protocol)
		})
	}
}

// firstAnswer sends OPTIONS to addr, as a driver's first request, and
// returns the message of the ERROR it is answered with.
func firstAnswer(t *testing.T, addr string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(frame.AppendHeader(nil, frame.Header{Version: 4, Stream: 1, Opcode: frame.OpOptions})); err != nil {
		t.Fatal(err)
	}
	f, h, err := frame.NewReader(bufio.NewReader(c), 1<<20).Next()
	if err != nil {
		t.Fatalf("reading the answer to OPTIONS: %v", err)
	}
	body := f[frame.HeaderSize:]
	if h.Opcode != frame.OpError || len(body) < 6 {
		t.Fatalf("OPTIONS answered with %v, %d bytes; want an ERROR", h.Opcode, len(body))
	}
	n := int(binary.BigEndian.Uint16(body[4:]))
	return string(body[6:min(6+n, len(body))])
}

// testCA is a certificate authority a test makes, and the file of its
// certificate.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string
	dir  string
}

func newTestCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	ca := &testCA{dir: dir, file: filepath.Join(dir, name+"-ca.pem")}
	ca.cert, ca.key = ca.sign(t, &x509.Certificate{
		Subject:               pkix.Name{CommonName: "cqlguard test " + name + " CA"},
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}, nil)
	writePEM(t, ca.file, "CERTIFICATE", ca.cert.Raw)
	return ca
}

// issue writes a certificate for name, signed by ca, and its key, and
// returns their files.
func (ca *testCA) issue(t *testing.T, name string, usage x509.ExtKeyUsage, ips ...net.IP) (certFile, keyFile string) {
	t.Helper()
	cert, key := ca.sign(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: ips,
	}, ca)
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(ca.dir, name+".pem"), filepath.Join(ca.dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", cert.Raw)
	writePEM(t, keyFile, "PRIVATE KEY", der)
	return certFile, keyFile
}

// sign makes a key for template and signs it with parent, or with the new
// key itself when parent is nil.
func (*testCA) sign(t *testing.T, template *x509.Certificate, parent *testCA) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template.SerialNumber = big.NewInt(time.Now().UnixNano())
	template.NotBefore, template.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	issuer, signer := template, key
	if parent != nil {
		issuer, signer = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, template, issuer, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
