package config

import "errors"

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

func (c TLSConfig) validate(ps *problems) {
	if (c.CertFile == "") != (c.KeyFile == "") {
		ps.add(errors.New("cert_file and key_file go together"), "tls")
	}
	if c.ClientCAFile != "" && c.CertFile == "" {
		ps.add(errors.New("client_ca_file needs cert_file and key_file"), "tls", "client_ca_file")
	}
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

func (c UpstreamTLSConfig) validate(ps *problems) {
	if (c.CertFile == "") != (c.KeyFile == "") {
		ps.add(errors.New("cert_file and key_file go together"), "upstream_tls")
	}
	if !c.Enabled && (c.CAFile != "" || c.CertFile != "" || c.ServerName != "" || c.InsecureSkipVerify) {
		ps.add(errors.New("settings given but enabled is false"), "upstream_tls")
	}
}
