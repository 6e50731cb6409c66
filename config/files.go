package config

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
)

// CheckFiles reads what cfg, decoded from data, names outside itself, as
// the proxy does when it starts: the TLS certificates, keys and CAs it
// uses, each parsed and each certificate matched with its key; the
// password and token files; and the environment variables named instead
// of files, which must be set. Like Check it reports every problem, one
// per line, naming the file and, where the key is in the file, the line.
// Check does not call it, so that a configuration can be checked where its
// files and secrets are not (a Kubernetes manifest, say); cqlguard calls
// both before it serves, and check-config does as it does.
func CheckFiles(cfg *Config, data []byte) error {
	var ps problems
	cfg.checkFiles(&ps)
	return locateAll(cfg, data, ps.err())
}

// checkFiles adds what CheckFiles finds to ps. Settings that Validate
// refuses, or that are off, are not read.
func (c *Config) checkFiles(ps *problems) {
	if c.TLS.CertFile != "" && c.TLS.KeyFile != "" {
		checkKeyPair(ps, c.TLS.CertFile, c.TLS.KeyFile, "tls")
	}
	if c.TLS.ClientCAFile != "" {
		checkCAs(ps, c.TLS.ClientCAFile, "tls", "client_ca_file")
	}
	if u := c.UpstreamTLS; u.Enabled {
		if u.CAFile != "" {
			checkCAs(ps, u.CAFile, "upstream_tls", "ca_file")
		}
		if u.CertFile != "" && u.KeyFile != "" {
			checkKeyPair(ps, u.CertFile, u.KeyFile, "upstream_tls")
		}
	}
	checkSecret(ps, c.Schema.PasswordFile, c.Schema.PasswordEnv, false, "schema", "password")
	checkSecret(ps, c.Admin.TokenFile, c.Admin.TokenEnv, true, "admin", "token")
	if co := c.Coordination; co.Enabled() {
		checkSecret(ps, co.PasswordFile, co.PasswordEnv, false, "coordination", "password")
		if t := co.TLS; t.Enabled {
			if t.CAFile != "" {
				checkCAs(ps, t.CAFile, "coordination", "tls", "ca_file")
			}
			if t.CertFile != "" && t.KeyFile != "" {
				checkKeyPair(ps, t.CertFile, t.KeyFile, "coordination", "tls")
			}
		}
	}
}

// checkKeyPair checks the certificate chain in certFile and its key in
// keyFile, PEM, as crypto/tls loads them, under the keys cert_file and
// key_file of section: each readable, the first certificate parsed, the
// key parsed and matching it.
func checkKeyPair(ps *problems, certFile, keyFile string, section ...string) {
	key := func(k string) []string { return append(section[:len(section):len(section)], k) }
	certPEM, certErr := os.ReadFile(certFile)
	if certErr == nil {
		if certErr = parseLeaf(certPEM); certErr != nil {
			certErr = fmt.Errorf("%s: %w", certFile, certErr)
		}
	}
	if certErr != nil {
		ps.add(certErr, key("cert_file")...)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		ps.add(err, key("key_file")...)
		return
	}
	if certErr != nil {
		return
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		ps.add(fmt.Errorf("%s, for the certificate of %s: %w", keyFile, certFile, err), key("key_file")...)
	}
}

// parseLeaf parses the first CERTIFICATE block of data, PEM, as
// crypto/tls does the certificate it presents.
func parseLeaf(data []byte) error {
	for {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			return errors.New("holds no PEM certificate")
		}
		if b.Type == "CERTIFICATE" {
			_, err := x509.ParseCertificate(b.Bytes)
			return err
		}
	}
}

// checkCAs checks the file of CA certificates at path, under the key
// path: readable, and holding one PEM certificate at least that parses.
func checkCAs(ps *problems, file string, path ...string) {
	data, err := os.ReadFile(file)
	if err == nil && !x509.NewCertPool().AppendCertsFromPEM(data) {
		err = fmt.Errorf("%s holds no PEM certificate", file)
	}
	if err != nil {
		ps.add(err, path...)
	}
}

// checkSecret checks the secret of section read from file or from the
// environment variable env, under the keys what_file and what_env; a
// token must not be empty. Naming both is Validate's problem.
func checkSecret(ps *problems, file, env string, nonEmpty bool, section, what string) {
	switch {
	case file != "":
		data, err := os.ReadFile(file)
		if err == nil && nonEmpty && strings.TrimRight(string(data), "\r\n") == "" {
			err = fmt.Errorf("%s is empty", file)
		}
		if err != nil {
			ps.add(err, section, what+"_file")
		}
	case env != "":
		v, ok := os.LookupEnv(env)
		switch {
		case !ok:
			ps.add(fmt.Errorf("%s is not set", env), section, what+"_env")
		case nonEmpty && v == "":
			ps.add(fmt.Errorf("%s is empty", env), section, what+"_env")
		}
	}
}
