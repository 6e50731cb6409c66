package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Modes of presenting the cluster to drivers.
const (
	// ModeCluster presents the proxy as the whole cluster: one node that owns
	// the whole ring, at the advertised address, with no peers.
	ModeCluster = "cluster"
	// ModeNode puts one proxy in front of each node; peers are rewritten to
	// the proxies in front of them.
	ModeNode = "node"
)

// Config is cqlguard's configuration. The zero value is not usable; start
// from DefaultConfig.
type Config struct {
	// Listen is the address drivers connect to.
	Listen string `yaml:"listen"`
	// Advertise is the address the proxy reports as its own in system.local
	// and peers; drivers dial it. Defaults to Listen when that names a host.
	Advertise string `yaml:"advertise"`
	// Mode is "cluster" or "node".
	Mode string `yaml:"mode"`
	// Upstreams are the Cassandra or ScyllaDB nodes, host:port. In cluster
	// mode client connections are spread over them; in node mode there is one.
	Upstreams []string `yaml:"upstreams"`
	// Peers maps, in node mode, each peer node's address (as the upstream
	// reports it in system.peers) to the address of the proxy in front of it.
	// Peers not listed are hidden from drivers.
	Peers map[string]string `yaml:"peers"`
	// MaxFrameBytes is the largest frame body accepted in either direction;
	// larger frames are answered with a protocol error without being buffered.
	MaxFrameBytes int `yaml:"max_frame_bytes"`
	// MaxBufferedBytes bounds the bytes waiting to be written to one socket;
	// past it the proxy stops reading the other side (back-pressure).
	MaxBufferedBytes int `yaml:"max_buffered_bytes"`
	// MaxPreparedStatements bounds the prepared statements the proxy
	// remembers; past it the oldest are forgotten (and re-prepared by
	// drivers when next executed).
	MaxPreparedStatements int `yaml:"max_prepared_statements"`
	// DialTimeout bounds connecting to an upstream node.
	DialTimeout Duration `yaml:"dial_timeout"`
	// DrainTimeout bounds how long shutdown waits for in-flight requests.
	DrainTimeout Duration `yaml:"drain_timeout"`
	// Schema configures how the proxy reads partition keys from the
	// upstream's system_schema.
	Schema SchemaConfig `yaml:"schema"`
	// Admin configures the HTTP listener for /metrics, /healthz and /readyz.
	Admin AdminConfig `yaml:"admin"`
	// Log configures logging.
	Log LogConfig `yaml:"log"`
}

// SchemaConfig configures reading the upstream's schema.
type SchemaConfig struct {
	// Username logs in to the upstream (PasswordAuthenticator); empty for
	// none.
	Username string `yaml:"username"`
	// PasswordFile is a file holding the password.
	PasswordFile string `yaml:"password_file"`
	// PasswordEnv names an environment variable holding the password.
	PasswordEnv string `yaml:"password_env"`
	// Refresh is how often the schema is reloaded besides on schema
	// changes the proxy sees.
	Refresh Duration `yaml:"refresh"`
}

// AdminConfig configures the admin HTTP listener.
type AdminConfig struct {
	// Listen is the admin address; empty disables it. Loopback by default
	// because metrics reveal table names.
	Listen string `yaml:"listen"`
}

// LogConfig configures logging.
type LogConfig struct {
	// Level is one of debug, info, warn, error.
	Level string `yaml:"level"`
	// Format is "json" (default) or "console".
	Format string `yaml:"format"`
}

// Duration is a time.Duration written in YAML as "5s" or "250ms".
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (say 5s or 250ms)", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as a string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// DefaultConfig returns the configuration used where a file says nothing.
func DefaultConfig() Config {
	return Config{
		Listen:                "127.0.0.1:9042",
		Mode:                  ModeCluster,
		Upstreams:             []string{"127.0.0.2:9042"},
		MaxFrameBytes:         16 << 20,
		MaxBufferedBytes:      4 << 20,
		MaxPreparedStatements: 100000,
		DialTimeout:           Duration(5 * time.Second),
		DrainTimeout:          Duration(30 * time.Second),
		Admin:                 AdminConfig{Listen: "127.0.0.1:9180"},
		Log:                   LogConfig{Level: "info", Format: "json"},
	}
}

// LoadConfig reads the YAML file at path over DefaultConfig. Unknown keys are
// errors, reported with the file and line.
func LoadConfig(path string) (Config, error) {
	cfg := DefaultConfig()
	data, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("reading config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	// io.EOF: an empty file means all defaults.
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return cfg, fmt.Errorf("%s", describeYAMLError(path, err))
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

var (
	yamlLine    = regexp.MustCompile(`line (\d+): (.*)`)
	yamlUnknown = regexp.MustCompile(`^field (\S+) not found in type \S+$`)
)

// describeYAMLError turns yaml.v3's messages into "file:line: message".
func describeYAMLError(path string, err error) string {
	var lines []string
	for _, l := range strings.Split(err.Error(), "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(l, "yaml: unmarshal errors:"))
		l = strings.TrimPrefix(l, "yaml: ")
		if l == "" {
			continue
		}
		if m := yamlLine.FindStringSubmatch(l); m != nil {
			msg := m[2]
			if f := yamlUnknown.FindStringSubmatch(msg); f != nil {
				msg = fmt.Sprintf("unknown key %q", f[1])
			}
			l = fmt.Sprintf("%s:%s: %s", path, m[1], msg)
		} else {
			l = path + ": " + l
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, "; ")
}

// AdvertiseAddr is the address the proxy reports as its own: Advertise, or
// Listen when Advertise is empty.
func (c *Config) AdvertiseAddr() string {
	if c.Advertise != "" {
		return c.Advertise
	}
	return c.Listen
}

// Validate checks the configuration for values that cannot work.
func (c *Config) Validate() error {
	if c == nil {
		return errors.New("no configuration")
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("listen %q: %w", c.Listen, err)
	}
	host, _, err := net.SplitHostPort(c.AdvertiseAddr())
	if err != nil {
		return fmt.Errorf("advertise %q: %w", c.AdvertiseAddr(), err)
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		return fmt.Errorf("advertise %q: must be one IP address, the one drivers dial (set advertise when listen names none)", c.AdvertiseAddr())
	}
	switch c.Mode {
	case ModeCluster:
	case ModeNode:
		if len(c.Upstreams) != 1 {
			return fmt.Errorf("mode node: exactly one upstream, got %d", len(c.Upstreams))
		}
		for peer, addr := range c.Peers {
			if net.ParseIP(peer) == nil {
				return fmt.Errorf("peers: key %q is not an IP address", peer)
			}
			h, _, err := net.SplitHostPort(addr)
			if err != nil || net.ParseIP(h) == nil {
				return fmt.Errorf("peers: %q: want ip:port of the proxy in front of %s", addr, peer)
			}
		}
	default:
		return fmt.Errorf("mode: %q is neither %q nor %q", c.Mode, ModeCluster, ModeNode)
	}
	if c.Mode == ModeCluster && len(c.Peers) > 0 {
		return errors.New("peers: only used in mode node")
	}
	if len(c.Upstreams) == 0 {
		return errors.New("upstreams: at least one is needed")
	}
	for _, u := range c.Upstreams {
		if _, _, err := net.SplitHostPort(u); err != nil {
			return fmt.Errorf("upstreams: %q: %w", u, err)
		}
	}
	if c.MaxFrameBytes < 1<<10 || c.MaxFrameBytes > 256<<20 {
		return fmt.Errorf("max_frame_bytes: %d is outside 1 KiB to 256 MiB", c.MaxFrameBytes)
	}
	if c.MaxBufferedBytes < 64<<10 {
		return fmt.Errorf("max_buffered_bytes: %d is under 64 KiB", c.MaxBufferedBytes)
	}
	if c.MaxPreparedStatements < 1 {
		return fmt.Errorf("max_prepared_statements: %d must be positive", c.MaxPreparedStatements)
	}
	if c.DialTimeout <= 0 || c.DrainTimeout < 0 {
		return errors.New("dial_timeout must be positive and drain_timeout not negative")
	}
	if c.Schema.PasswordFile != "" && c.Schema.PasswordEnv != "" {
		return errors.New("schema: password_file and password_env are exclusive")
	}
	if c.Schema.Refresh < 0 {
		return errors.New("schema.refresh must not be negative")
	}
	switch c.Log.Format {
	case "json", "console":
	default:
		return fmt.Errorf("log.format: %q is neither json nor console", c.Log.Format)
	}
	return nil
}
