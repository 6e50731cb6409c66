package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pemFiles are PEM files written for a test: a certificate and its key,
// another key, and files that are not what their names say.
type pemFiles struct {
	cert, key, otherKey, notPEM, keyAsCert, empty, missing, dir string
}

// writePEMFiles writes a self-signed certificate and the files around it
// into a temporary directory.
func writePEMFiles(t *testing.T) pemFiles {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	newKey := func() (*ecdsa.PrivateKey, []byte) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return k, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	}
	key, keyPEM := newKey()
	_, otherPEM := newKey()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cqlguard test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pemFiles{
		cert:      write("cert.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		key:       write("key.pem", keyPEM),
		otherKey:  write("other-key.pem", otherPEM),
		notPEM:    write("not.pem", []byte("not PEM\n")),
		keyAsCert: write("key-as-cert.pem", keyPEM),
		empty:     write("empty", []byte("\n")),
		missing:   filepath.Join(dir, "missing.pem"),
		dir:       dir,
	}
}

// TestCheckFiles checks each file the configuration names as the proxy
// reads it at start: a file that is missing, unreadable or not what it
// should be is refused, naming its key's line, and good files pass.
func TestCheckFiles(t *testing.T) {
	t.Parallel()
	f := writePEMFiles(t)
	tlsText := func(cert, key string) string {
		return "tls:\n  cert_file: " + cert + "\n  key_file: " + key + "\n"
	}
	upstreamTLS := func(ca, cert, key string) string {
		return "upstream_tls:\n  enabled: true\n  ca_file: " + ca + "\n  cert_file: " + cert + "\n  key_file: " + key + "\n"
	}
	redis := "coordination:\n  addresses: [127.0.0.1:6379]\n"
	tests := []struct {
		name, text string
		wantErr    string // substring; empty means the files pass
	}{
		{name: "none named", text: ""},
		{name: "client TLS", text: tlsText(f.cert, f.key) + "  client_ca_file: " + f.cert + "\n"},
		{name: "certificate missing", text: tlsText(f.missing, f.key), wantErr: "cqlguard.yaml:2: tls.cert_file: open " + f.missing + ": no such file or directory"},
		{name: "certificate a directory", text: tlsText(f.dir, f.key), wantErr: "cqlguard.yaml:2: tls.cert_file: read " + f.dir + ": is a directory"},
		{name: "key missing", text: tlsText(f.cert, f.missing), wantErr: "cqlguard.yaml:3: tls.key_file: open " + f.missing},
		{name: "certificate not PEM", text: tlsText(f.notPEM, f.key), wantErr: "cqlguard.yaml:2: tls.cert_file: " + f.notPEM + ": holds no PEM certificate"},
		{name: "a key for a certificate", text: tlsText(f.keyAsCert, f.key), wantErr: "tls.cert_file: " + f.keyAsCert + ": holds no PEM certificate"},
		{name: "key not PEM", text: tlsText(f.cert, f.notPEM), wantErr: "cqlguard.yaml:3: tls.key_file: " + f.notPEM + ", for the certificate of " + f.cert + ": tls: failed to find any PEM data in key input"},
		{name: "another certificate's key", text: tlsText(f.cert, f.otherKey), wantErr: "cqlguard.yaml:3: tls.key_file: " + f.otherKey + ", for the certificate of " + f.cert + ": tls: private key does not match public key"},
		{name: "a certificate for a key", text: tlsText(f.cert, f.cert), wantErr: "tls.key_file: " + f.cert},
		{name: "client CA missing", text: tlsText(f.cert, f.key) + "  client_ca_file: " + f.missing + "\n", wantErr: "cqlguard.yaml:4: tls.client_ca_file: open " + f.missing},
		{name: "client CA not PEM", text: tlsText(f.cert, f.key) + "  client_ca_file: " + f.notPEM + "\n", wantErr: "cqlguard.yaml:4: tls.client_ca_file: " + f.notPEM + " holds no PEM certificate"},

		{name: "upstream TLS", text: upstreamTLS(f.cert, f.cert, f.key)},
		{name: "upstream CA missing", text: upstreamTLS(f.missing, f.cert, f.key), wantErr: "cqlguard.yaml:3: upstream_tls.ca_file: open " + f.missing},
		{name: "upstream CA not PEM", text: upstreamTLS(f.notPEM, f.cert, f.key), wantErr: "upstream_tls.ca_file: " + f.notPEM + " holds no PEM certificate"},
		{name: "upstream key mismatched", text: upstreamTLS(f.cert, f.cert, f.otherKey), wantErr: "cqlguard.yaml:5: upstream_tls.key_file: " + f.otherKey + ", for the certificate of " + f.cert + ": tls: private key does not match"},
		{name: "upstream certificate missing", text: upstreamTLS(f.cert, f.missing, f.key), wantErr: "cqlguard.yaml:4: upstream_tls.cert_file: open " + f.missing},

		{name: "schema password", text: "schema:\n  password_file: " + f.key + "\n"},
		{name: "schema password missing", text: "schema:\n  password_file: " + f.missing + "\n", wantErr: "cqlguard.yaml:2: schema.password_file: open " + f.missing},
		{name: "schema password variable unset", text: "schema:\n  password_env: CQLGUARD_TEST_NEVER_SET\n", wantErr: "cqlguard.yaml:2: schema.password_env: CQLGUARD_TEST_NEVER_SET is not set"},
		{name: "admin token missing", text: "admin:\n  token_file: " + f.missing + "\n", wantErr: "cqlguard.yaml:2: admin.token_file: open " + f.missing},
		{name: "admin token empty", text: "admin:\n  token_file: " + f.empty + "\n", wantErr: "cqlguard.yaml:2: admin.token_file: " + f.empty + " is empty"},
		{name: "admin token variable unset", text: "admin:\n  token_env: CQLGUARD_TEST_NEVER_SET\n", wantErr: "cqlguard.yaml:2: admin.token_env: CQLGUARD_TEST_NEVER_SET is not set"},

		{name: "redis TLS", text: redis + "  tls: {enabled: true, ca_file: " + f.cert + ", cert_file: " + f.cert + ", key_file: " + f.key + "}\n"},
		{name: "redis password missing", text: redis + "  password_file: " + f.missing + "\n", wantErr: "cqlguard.yaml:3: coordination.password_file: open " + f.missing},
		{name: "redis password variable unset", text: redis + "  password_env: CQLGUARD_TEST_NEVER_SET\n", wantErr: "cqlguard.yaml:3: coordination.password_env: CQLGUARD_TEST_NEVER_SET is not set"},
		{name: "redis CA not PEM", text: redis + "  tls:\n    enabled: true\n    ca_file: " + f.notPEM + "\n", wantErr: "cqlguard.yaml:5: coordination.tls.ca_file: " + f.notPEM + " holds no PEM certificate"},
		{name: "redis key mismatched", text: redis + "  tls:\n    enabled: true\n    cert_file: " + f.cert + "\n    key_file: " + f.otherKey + "\n", wantErr: "cqlguard.yaml:6: coordination.tls.key_file: " + f.otherKey},
		// What the proxy does not read is not read here either.
		{name: "redis off, its files not read", text: "coordination:\n  password_file: " + f.missing + "\n  tls: {enabled: true, ca_file: " + f.missing + "}\n"},
		{name: "redis TLS off, its files not read", text: redis + "  tls: {ca_file: " + f.missing + "}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			data := []byte(tt.text)
			cfg, err := Parse("cqlguard.yaml", data)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			err = CheckFiles(&cfg, data)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("CheckFiles: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("CheckFiles: %v, want an error holding %q", err, tt.wantErr)
			}
			if n := strings.Count(err.Error(), "\n") + 1; n != 1 {
				t.Errorf("%d problems, want 1:\n%v", n, err)
			}
		})
	}
}

// A variable named for a secret must hold one; not parallel, for Setenv.
func TestCheckFilesEnvironment(t *testing.T) {
	t.Setenv("CQLGUARD_TEST_SET", "s3cret")
	t.Setenv("CQLGUARD_TEST_EMPTY", "")
	tests := []struct {
		name, text, wantErr string
	}{
		{name: "token set", text: "admin: {token_env: CQLGUARD_TEST_SET}\n"},
		{name: "token empty", text: "admin: {token_env: CQLGUARD_TEST_EMPTY}\n", wantErr: "cqlguard.yaml:1: admin.token_env: CQLGUARD_TEST_EMPTY is empty"},
		{name: "password set", text: "schema: {password_env: CQLGUARD_TEST_SET}\n"},
		// An empty password is a password: the proxy sends it.
		{name: "password empty", text: "schema: {password_env: CQLGUARD_TEST_EMPTY}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := []byte(tt.text)
			cfg, err := Parse("cqlguard.yaml", data)
			if err != nil {
				t.Fatal(err)
			}
			err = CheckFiles(&cfg, data)
			if (tt.wantErr == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("CheckFiles: %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// TestEveryProblemOfAFile checks that one attempt shows every mistake of
// a file, addresses and files among them, each with its line, as
// cqlguard serve and check-config report them.
func TestEveryProblemOfAFile(t *testing.T) {
	t.Parallel()
	f := writePEMFiles(t)
	text := strings.Join([]string{
		"listen: 127.0.0.1:99999",
		"upstreams: [10.0.0.1:9042, 'cass:abc']",
		"admin:",
		"  listen: 127.0.0.1:70000",
		"  token_file: " + f.missing,
		"tls:",
		"  cert_file: " + f.cert,
		"  key_file: " + f.otherKey,
		"coordination:",
		"  addresses: [redis]",
		"mode: mesh",
		"dial_timeout: soon",
		"",
	}, "\n")
	data := []byte(text)
	cfg, err := Decode("cqlguard.yaml", data)
	if !Partial(err) {
		t.Fatalf("Decode: %v, want a value of the wrong type", err)
	}
	err = errors.Join(err, Check(&cfg, data), CheckFiles(&cfg, data))
	want := []string{
		`cqlguard.yaml:1: listen: "127.0.0.1:99999": port 99999 is outside 0 to 65535`,
		`cqlguard.yaml:2: upstreams: "cass:abc": port "abc" is not a number`,
		`cqlguard.yaml:4: admin.listen: "127.0.0.1:70000": port 70000 is outside 0 to 65535`,
		`cqlguard.yaml:5: admin.token_file: open ` + f.missing,
		`cqlguard.yaml:8: tls.key_file: ` + f.otherKey + `, for the certificate of ` + f.cert + `: tls: private key does not match public key`,
		`cqlguard.yaml:10: coordination.addresses: "redis": address redis: missing port in address`,
		`cqlguard.yaml:11: mode: "mesh" is neither`,
		`cqlguard.yaml:12: "soon" is not a duration`,
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("errors\n%v\ndo not hold %q", err, w)
		}
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != len(want) {
		t.Errorf("%d problems, want %d:\n%v", n, len(want), err)
	}
}
