// Package config holds cqlguard's configuration: the Config type and the
// YAML types of its sections, their defaults, and reading, checking and
// watching the file they come from. Errors name the file and, where known,
// the line.
//
// It knows YAML and files, and reads the secrets the file points to (the
// admin token, the upstream password). It checks addresses as text and
// TLS material as files (CheckFiles), but opens no socket and builds no
// TLS configuration or limiter: package proxy applies a Config, at start
// and on reload.
package config

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/cqlguard/cqlguard/ratelimit"
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
// from Default.
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
	MaxFrameBytes ByteSize `yaml:"max_frame_bytes"`
	// MaxFrameBytesTotal bounds the bytes of frames over 64 KiB being read
	// or handled at once over all connections, requests and answers each:
	// each connection holds at most one frame per direction, but thousands
	// of connections each reading a frame of max_frame_bytes would be
	// gigabytes. A frame that would pass it waits before it is read, and
	// its connection with it (back-pressure), unless no large frame of its
	// direction is held at all, so that a frame larger than the bound still
	// goes through, alone. Answers have a bound of their own so that they
	// never wait behind the requests that wait for them. Frames up to 64
	// KiB are read into each connection's own buffer and do not count. 0
	// means no bound.
	MaxFrameBytesTotal ByteSize `yaml:"max_frame_bytes_total"`
	// MaxBufferedBytes bounds the bytes waiting to be written to one socket;
	// past it the proxy stops reading the other side (back-pressure). A
	// socket can hold up to twice this: one batch being written while the
	// next is queued.
	MaxBufferedBytes ByteSize `yaml:"max_buffered_bytes"`
	// MaxBufferedBytesTotal bounds the bytes queued or being written over
	// all sockets together: without it, an upstream that stops reading (as
	// Cassandra does when its native_transport_max_request_data_in_flight is
	// reached) lets every connection fill its own max_buffered_bytes, which
	// over thousands of connections is gigabytes. Past it a connection that
	// already has bytes queued waits before queueing more (back-pressure);
	// one with none may always queue one frame, so that every connection
	// keeps moving, one frame at a time. 0 means no bound.
	MaxBufferedBytesTotal ByteSize `yaml:"max_buffered_bytes_total"`
	// MaxInFlightPerConnection bounds the requests of one client connection
	// waiting for the upstream's answer; at the bound the proxy stops reading
	// from that client until one is answered (back-pressure). 0 means no
	// bound.
	MaxInFlightPerConnection int `yaml:"max_in_flight_per_connection"`
	// MaxInFlight bounds the requests waiting for the upstream's answer
	// over all client connections together; at the bound a connection's
	// next request waits, and nothing more is read from that client, until
	// some request is answered (back-pressure). 0 means no bound.
	MaxInFlight int `yaml:"max_in_flight"`
	// UpstreamTimeout is how long the upstream node may send nothing while
	// requests of a connection wait for it: past it the proxy takes the
	// node for lost, answers each waiting request with a server error and
	// closes the client connection, which the driver reopens. It must exceed
	// the longest time a healthy node takes to answer; Cassandra's longest
	// default server-side timeout is truncate_request_timeout (60 s), after
	// which the node answers with an error itself, so the default, 90 s,
	// only fires on a node that has stopped answering. Any frame from the
	// node, an answer to another request or an event, counts as a sign of
	// life. 0 means wait for ever.
	UpstreamTimeout Duration `yaml:"upstream_timeout"`
	// MaxConnections bounds the client connections served at once, each
	// counted from its accept, its TLS handshake included; past it a new
	// connection's first request is answered with an error and the
	// connection closed. 0 means no bound.
	MaxConnections int `yaml:"max_connections"`
	// FrameTimeout bounds how long a client may take to send the rest of a
	// frame it has begun: one that stalls halfway is disconnected, so that
	// it cannot hold a connection's buffers forever. Idle connections,
	// between frames, are not affected.
	FrameTimeout Duration `yaml:"frame_timeout"`
	// MaxPreparedStatements bounds the prepared statements the proxy
	// remembers; past it the oldest are forgotten (and re-prepared by
	// drivers when next executed).
	MaxPreparedStatements int `yaml:"max_prepared_statements"`
	// MaxPreparedBytes bounds the memory of what the proxy remembers of
	// prepared statements, as it estimates it: a few large statements
	// (say, long IN lists of literals) are bounded like many small ones.
	// One statement larger than the bound is kept alone. 0 means no bound.
	MaxPreparedBytes ByteSize `yaml:"max_prepared_bytes"`
	// DialTimeout bounds connecting to an upstream node.
	DialTimeout Duration `yaml:"dial_timeout"`
	// DrainTimeout bounds how long shutdown waits for in-flight requests.
	DrainTimeout Duration `yaml:"drain_timeout"`
	// Schema configures how the proxy reads partition keys from the
	// upstream's system_schema.
	Schema SchemaConfig `yaml:"schema"`
	// TLS configures TLS towards clients.
	TLS TLSConfig `yaml:"tls"`
	// UpstreamTLS configures TLS towards the upstream nodes.
	UpstreamTLS UpstreamTLSConfig `yaml:"upstream_tls"`
	// Admin configures the HTTP listener for /metrics, /healthz and /readyz.
	Admin AdminConfig `yaml:"admin"`
	// Log configures logging.
	Log LogConfig `yaml:"log"`
	// Limits configures per-partition rate limits. Unlike the rest of the
	// configuration, most of it can be reloaded (see proxy.Proxy.Reload).
	Limits LimitsConfig `yaml:"limits"`
	// Coordination makes the limits hold for a fleet of proxies together,
	// through Redis; reloadable.
	Coordination CoordinationConfig `yaml:"coordination"`
	// HotReads serves the reads of hot partitions by coalescing and a
	// short cache; its tables are reloadable.
	HotReads HotReadsConfig `yaml:"hot_reads"`
	// Clients maps connections to classes; reloadable.
	Clients ClientsConfig `yaml:"clients"`
	// RequestUnits prices each request once answered; reloadable.
	RequestUnits RequestUnitsConfig `yaml:"request_units"`
	// Shedding sheds the least important tiers when a node slows.
	Shedding SheddingConfig `yaml:"shedding"`
	// Routing says where cluster mode runs each request.
	Routing RoutingConfig `yaml:"routing"`

	// file is the file the configuration was read from, and sum the
	// SHA-256 of its contents, so that a Watcher can tell whether the file
	// still says the same.
	file string
	sum  [sha256.Size]byte
}

// File returns the path of the file c was read from, or "" if it was not
// read from a file.
func (c *Config) File() string { return c.file }

// ByteSize is a number of bytes written in YAML as an integer or with a
// unit: 4MiB, 512KiB, 64MB (units of 1024 with "i", of 1000 without).
type ByteSize int64

// byteUnits are the multipliers of ByteSize's units, lower-cased.
var byteUnits = map[string]int64{
	"": 1, "b": 1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}

// UnmarshalYAML parses an integer, or an integer and a unit.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	v, err := parseByteSize(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		return valueError(n, fmt.Sprintf("%q is not a size in bytes (say 4MiB, 64MB or 1048576)", n.Value))
	}
	*b = ByteSize(v)
	return nil
}

// MarshalYAML writes the size as an integer.
func (b ByteSize) MarshalYAML() (any, error) { return int64(b), nil }

func parseByteSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if i < 0 {
		i = len(s)
	}
	unit, ok := byteUnits[strings.ToLower(strings.TrimSpace(s[i:]))]
	if !ok || i == 0 {
		return 0, errors.New("not a size")
	}
	v, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil || v > math.MaxInt64/unit {
		return 0, errors.New("not a size")
	}
	return v * unit, nil
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

// Password reads the upstream password from the file or the environment
// variable named, never from flags or the configuration file itself; it
// returns "" when none is named.
func (c SchemaConfig) Password() (string, error) {
	switch {
	case c.PasswordFile != "":
		b, err := os.ReadFile(c.PasswordFile)
		if err != nil {
			return "", fmt.Errorf("schema.password_file: %w", err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	case c.PasswordEnv != "":
		v, ok := os.LookupEnv(c.PasswordEnv)
		if !ok {
			return "", fmt.Errorf("schema.password_env: %s is not set", c.PasswordEnv)
		}
		return v, nil
	}
	return "", nil
}

// defaultAdmin is the admin section's default. It serves a few probes,
// scrapers and people: 64 connections are plenty for them and a small
// share of any descriptor limit. The write timeout leaves room for a CPU
// profile of pprof's default 30 s.
func defaultAdmin() AdminConfig {
	return AdminConfig{
		Listen:           "127.0.0.1:9180",
		HotPartitions:    100,
		ReadyNeedsSchema: true,
		MaxConnections:   64,
		ReadTimeout:      Duration(10 * time.Second),
		WriteTimeout:     Duration(time.Minute),
		IdleTimeout:      Duration(time.Minute),
	}
}

// maxHotPartitions bounds admin.hot_partitions: /hot is for people, and
// the proxy takes the sketch's lock on every request.
const maxHotPartitions = 10000

// AdminConfig configures the admin HTTP listener.
type AdminConfig struct {
	// Listen is the admin address; empty disables it. Loopback by default
	// because metrics reveal table names.
	Listen string `yaml:"listen"`
	// HotPartitions is how many of the busiest partitions /hot tracks, in
	// memory fixed at start; 0 stops tracking them.
	HotPartitions int `yaml:"hot_partitions"`
	// ShowKeys makes /hot show partition key values, which are user data;
	// by default it shows only each partition's token.
	ShowKeys bool `yaml:"show_keys"`
	// TokenFile or TokenEnv, when set, name a file or an environment
	// variable holding a bearer token that /hot asks for. /healthz,
	// /readyz and /metrics stay open, as probes and scrapers need.
	TokenFile string `yaml:"token_file"`
	TokenEnv  string `yaml:"token_env"`
	// ReadyNeedsSchema keeps /readyz not ready while limits are configured
	// and the schema has not loaded: until then the proxy cannot find a
	// request's partition and forwards everything unlimited, which a
	// sidecar should not present as ready.
	ReadyNeedsSchema bool `yaml:"ready_needs_schema"`
	// Profiling serves Go's profiles and execution traces under
	// /debug/pprof/, behind the token like /hot: for finding where the
	// proxy spends its time. Off by default.
	Profiling bool `yaml:"profiling"`
	// MaxConnections bounds the connections the admin listener holds
	// open, so that connections to it cannot take the descriptors the
	// CQL listener needs. At the bound a new connection takes the place of
	// the one idle longest, which HTTP lets a server close at any time;
	// when none is idle it waits until one closes, and those after it wait
	// in the kernel's backlog, holding no descriptor.
	MaxConnections int `yaml:"max_connections"`
	// ReadTimeout bounds reading a request, headers included.
	ReadTimeout Duration `yaml:"read_timeout"`
	// WriteTimeout bounds a request from the end of its headers to the
	// end of its answer, so that a client that reads nothing does not hold
	// a connection; /debug/pprof/profile and /debug/pprof/trace take their
	// seconds within it.
	WriteTimeout Duration `yaml:"write_timeout"`
	// IdleTimeout is how long a keep-alive connection may wait for its
	// next request before it is closed.
	IdleTimeout Duration `yaml:"idle_timeout"`
}

// Token reads the bearer token /hot asks for from the file or the
// environment variable named, and returns nil when none is named.
func (c AdminConfig) Token() ([]byte, error) {
	var t string
	switch {
	case c.TokenFile != "":
		b, err := os.ReadFile(c.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("admin.token_file: %w", err)
		}
		t = strings.TrimRight(string(b), "\r\n")
		if t == "" {
			return nil, fmt.Errorf("admin.token_file: %s is empty", c.TokenFile)
		}
	case c.TokenEnv != "":
		v, ok := os.LookupEnv(c.TokenEnv)
		if !ok || v == "" {
			return nil, fmt.Errorf("admin.token_env: %s is not set", c.TokenEnv)
		}
		t = v
	default:
		return nil, nil
	}
	return []byte(t), nil
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
		return valueError(n, fmt.Sprintf("%q is not a duration (say 5s or 250ms)", n.Value))
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as a string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Default returns the configuration used where a file says nothing.
func Default() Config {
	return Config{
		Listen:                   "127.0.0.1:9042",
		Mode:                     ModeCluster,
		Upstreams:                []string{"127.0.0.2:9042"},
		MaxFrameBytes:            16 << 20,
		MaxBufferedBytes:         4 << 20,
		MaxPreparedStatements:    100000,
		MaxPreparedBytes:         64 << 20,
		MaxConnections:           10000,
		MaxInFlightPerConnection: 2048,
		MaxInFlight:              defaultMaxInFlight,
		MaxBufferedBytesTotal:    256 << 20,
		MaxFrameBytesTotal:       256 << 20,
		UpstreamTimeout:          Duration(90 * time.Second),
		FrameTimeout:             Duration(30 * time.Second),
		DialTimeout:              Duration(5 * time.Second),
		DrainTimeout:             Duration(30 * time.Second),
		Admin:                    defaultAdmin(),
		Coordination:             defaultCoordination(),
		HotReads:                 defaultHotReads(),
		Clients:                  defaultClients(),
		RequestUnits:             defaultRequestUnits(),
		Shedding:                 defaultShedding(),
		Routing:                  defaultRouting(),
		Log:                      LogConfig{Level: "info", Format: "json"},
		Limits: LimitsConfig{
			Algorithm:     ratelimit.AlgorithmScylla,
			Memory:        ratelimit.DefaultMemoryBytes,
			Burst:         1,
			LimitLWT:      true,
			LimitCounters: true,

			MaxPartitionsPerRequest: 1024,
		},
	}
}

// defaultMaxInFlight is max_in_flight's default: 32 connections' worth of
// max_in_flight_per_connection, and hundreds of times what the upstream
// nodes work on at once (Cassandra runs 128 native transport threads per
// node), so that it binds only on a pile-up, such as drivers retrying in a
// storm. The proxy's own cost per request in flight is small (an entry of
// its connection's stream table); the bound is there for the upstream.
const defaultMaxInFlight = 65536

// AdvertiseAddr is the address the proxy reports as its own: Advertise, or
// Listen when Advertise is empty.
func (c *Config) AdvertiseAddr() string {
	if c.Advertise != "" {
		return c.Advertise
	}
	return c.Listen
}

// Validate checks the configuration for values that cannot work, and
// reports every problem it finds, joined, each naming its key.
func (c *Config) Validate() error {
	if c == nil {
		return errors.New("no configuration")
	}
	var ps problems
	c.validateAddresses(&ps)
	c.validateFrameSizes(&ps)
	c.validateAdmin(&ps)
	c.TLS.validate(&ps)
	c.UpstreamTLS.validate(&ps)
	c.validateBounds(&ps)
	c.validateSchemaAndLog(&ps)
	c.Coordination.validate(&ps)
	c.Limits.validate(&ps)
	c.HotReads.validate(&ps, c.Admin.HotPartitions)
	c.Clients.validate(&ps)
	c.RequestUnits.validate(&ps)
	c.Shedding.validate(&ps)
	c.Routing.validate(&ps)
	return ps.err()
}

// validateAddresses checks listen, advertise, mode with its upstreams and
// peers, as the proxy will listen on and dial them.
func (c *Config) validateAddresses(ps *problems) {
	if err := checkAddr(c.Listen, toListen); err != nil {
		ps.add(err, "listen")
	}
	// Without advertise, listen's problems are already said.
	if c.Advertise != "" {
		if err := checkAddr(c.Advertise, toDial); err != nil {
			ps.add(err, "advertise")
		}
	}
	if host, _, err := net.SplitHostPort(c.AdvertiseAddr()); err == nil {
		if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
			ps.add(fmt.Errorf("%q must be one IP address, the one drivers dial (set advertise when listen names none)", c.AdvertiseAddr()), "advertise")
		}
	}
	switch c.Mode {
	case ModeCluster:
		if len(c.Peers) > 0 {
			ps.add(errors.New("only used in mode node"), "peers")
		}
	case ModeNode:
		if len(c.Upstreams) != 1 {
			ps.add(fmt.Errorf("mode node takes exactly one upstream, got %d", len(c.Upstreams)), "upstreams")
		}
		for peer, addr := range c.Peers {
			if net.ParseIP(peer) == nil {
				ps.add(fmt.Errorf("key %q is not an IP address", peer), "peers")
			}
			h, _, err := net.SplitHostPort(addr)
			if err != nil || net.ParseIP(h) == nil {
				ps.add(fmt.Errorf("%q: want ip:port of the proxy in front of %s", addr, peer), "peers", peer)
			} else if err := checkAddr(addr, toDial); err != nil {
				ps.add(fmt.Errorf("%w, for the proxy in front of %s", err, peer), "peers", peer)
			}
		}
	default:
		ps.add(fmt.Errorf("%q is neither %q nor %q", c.Mode, ModeCluster, ModeNode), "mode")
	}
	if len(c.Upstreams) == 0 {
		ps.add(errors.New("at least one is needed"), "upstreams")
	}
	for _, u := range c.Upstreams {
		if err := checkAddr(u, toDial); err != nil {
			ps.add(err, "upstreams")
		}
	}
}

// validateFrameSizes checks the largest frame and buffer a connection
// may hold.
func (c *Config) validateFrameSizes(ps *problems) {
	if c.MaxFrameBytes < 1<<10 || c.MaxFrameBytes > 256<<20 {
		ps.add(fmt.Errorf("%d bytes is outside 1 KiB to 256 MiB", c.MaxFrameBytes), "max_frame_bytes")
	}
	if c.MaxBufferedBytes < 64<<10 || c.MaxBufferedBytes > 1<<30 {
		ps.add(fmt.Errorf("%d bytes is outside 64 KiB to 1 GiB", c.MaxBufferedBytes), "max_buffered_bytes")
	}
}

// validateBounds checks the counts and timeouts that bound what
// connections may hold.
func (c *Config) validateBounds(ps *problems) {
	if c.MaxInFlightPerConnection < 0 {
		ps.add(fmt.Errorf("%d must not be negative", c.MaxInFlightPerConnection), "max_in_flight_per_connection")
	}
	if c.MaxInFlight < 0 {
		ps.add(fmt.Errorf("%d must not be negative", c.MaxInFlight), "max_in_flight")
	}
	if c.MaxFrameBytesTotal < 0 {
		ps.add(fmt.Errorf("%d must not be negative", c.MaxFrameBytesTotal), "max_frame_bytes_total")
	}
	if c.MaxBufferedBytesTotal != 0 && c.MaxBufferedBytesTotal < 64<<10 {
		ps.add(fmt.Errorf("%d bytes is under 64 KiB (0 means no bound)", c.MaxBufferedBytesTotal), "max_buffered_bytes_total")
	}
	if c.UpstreamTimeout < 0 {
		ps.add(fmt.Errorf("%s must not be negative (0 means wait for ever)", time.Duration(c.UpstreamTimeout)), "upstream_timeout")
	}
	if c.MaxConnections < 0 {
		ps.add(fmt.Errorf("%d must not be negative", c.MaxConnections), "max_connections")
	}
	if c.FrameTimeout <= 0 {
		ps.add(fmt.Errorf("%s must be positive", time.Duration(c.FrameTimeout)), "frame_timeout")
	}
	if c.MaxPreparedBytes < 0 {
		ps.add(fmt.Errorf("%d must not be negative", c.MaxPreparedBytes), "max_prepared_bytes")
	}
	if c.MaxPreparedStatements < 1 {
		ps.add(fmt.Errorf("%d must be positive", c.MaxPreparedStatements), "max_prepared_statements")
	}
	if c.DialTimeout <= 0 {
		ps.add(fmt.Errorf("%s must be positive", time.Duration(c.DialTimeout)), "dial_timeout")
	}
	if c.DrainTimeout < 0 {
		ps.add(fmt.Errorf("%s must not be negative", time.Duration(c.DrainTimeout)), "drain_timeout")
	}
}

// validateAdmin checks the admin listener's section.
func (c *Config) validateAdmin(ps *problems) {
	if c.Admin.Listen != "" {
		if err := checkAddr(c.Admin.Listen, toListen); err != nil {
			ps.add(err, "admin", "listen")
		} else if sameListener(c.Listen, c.Admin.Listen) {
			ps.add(fmt.Errorf("%q takes the port listen %q takes", c.Admin.Listen, c.Listen), "admin", "listen")
		}
	}
	if c.Admin.TokenFile != "" && c.Admin.TokenEnv != "" {
		ps.add(errors.New("set token_file or token_env, not both"), "admin")
	}
	if c.Admin.HotPartitions < 0 || c.Admin.HotPartitions > maxHotPartitions {
		ps.add(fmt.Errorf("%d must be between 0 and %d", c.Admin.HotPartitions, maxHotPartitions), "admin", "hot_partitions")
	}
	if c.Admin.MaxConnections < 1 {
		ps.add(fmt.Errorf("%d must be at least 1", c.Admin.MaxConnections), "admin", "max_connections")
	}
	for _, d := range []struct {
		key string
		v   Duration
	}{{"read_timeout", c.Admin.ReadTimeout}, {"write_timeout", c.Admin.WriteTimeout}, {"idle_timeout", c.Admin.IdleTimeout}} {
		if d.v <= 0 {
			ps.add(fmt.Errorf("%s must be positive", time.Duration(d.v)), "admin", d.key)
		}
	}
}

// validateSchemaAndLog checks the schema and log sections.
func (c *Config) validateSchemaAndLog(ps *problems) {
	if c.Schema.PasswordFile != "" && c.Schema.PasswordEnv != "" {
		ps.add(errors.New("password_file and password_env are exclusive"), "schema")
	}
	if c.Schema.Refresh < 0 {
		ps.add(fmt.Errorf("%s must not be negative", time.Duration(c.Schema.Refresh)), "schema", "refresh")
	}
	switch c.Log.Level {
	case "trace", "debug", "info", "warn", "error":
	default:
		ps.add(fmt.Errorf("%q is none of trace, debug, info, warn, error", c.Log.Level), "log", "level")
	}
	switch c.Log.Format {
	case "json", "console":
	default:
		ps.add(fmt.Errorf("%q is neither json nor console", c.Log.Format), "log", "format")
	}
}

// problems collects what Validate finds, so that an operator sees every
// mistake of a file at once instead of one per attempt.
type problems []error

// add records err as a problem with the value at the key path.
func (ps *problems) add(err error, path ...string) {
	*ps = append(*ps, &keyError{path: path, err: err})
}

// err returns the problems joined, or nil when there are none.
func (ps problems) err() error { return errors.Join(ps...) }
