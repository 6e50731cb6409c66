package config

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Fallbacks: what a proxy limits to while Redis cannot be reached.
const (
	// FallbackLocal applies each limit whole on every proxy.
	FallbackLocal = "local"
	// FallbackShare divides each limit by the number of proxies last seen
	// reporting.
	FallbackShare = "share"
)

// CoordinationConfig makes limits hold for a whole fleet of proxies, which
// report their hot partitions' counts to Redis. With no addresses each
// proxy limits alone, and a partition served by N proxies is admitted up
// to N times its limit. It is named after the file's coordination section;
// the code that runs it calls the feature fleet (package fleet).
type CoordinationConfig struct {
	// Addresses are Redis's host:port; empty turns coordination off. With
	// Cluster, they are seeds of a Redis Cluster.
	Addresses []string `yaml:"addresses"`
	Cluster   bool     `yaml:"cluster"`
	// Username is a Redis ACL user; empty for the default user.
	Username string `yaml:"username"`
	// PasswordFile or PasswordEnv holds the password, never the
	// configuration file itself.
	PasswordFile string `yaml:"password_file"`
	PasswordEnv  string `yaml:"password_env"`
	// TLS, when enabled, encrypts the connections to Redis.
	TLS CoordinationTLSConfig `yaml:"tls"`
	// KeyPrefix starts every key cqlguard writes, so that fleets (or
	// other users of the same Redis) stay apart.
	KeyPrefix string `yaml:"key_prefix"`
	// SyncInterval is how often a proxy reports, each report one
	// pipelined round trip, and the length of the buckets its counts are
	// kept in: the same on every proxy of a fleet.
	SyncInterval Duration `yaml:"sync_interval"`
	// Fallback is FallbackLocal or FallbackShare.
	Fallback string `yaml:"fallback"`
	// MaxPartitionsPerReport bounds the partitions one report carries,
	// hottest first.
	MaxPartitionsPerReport int `yaml:"max_partitions_per_report"`
	// TrackedPartitions is the size of the table of partitions a proxy
	// tracks between reports.
	TrackedPartitions int `yaml:"tracked_partitions"`
}

// CoordinationTLSConfig configures TLS towards Redis.
type CoordinationTLSConfig struct {
	Enabled bool `yaml:"enabled"`
	// CAFile holds the CAs that sign Redis's certificates (PEM); empty
	// means the system's.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a client certificate, for a Redis that
	// asks for one (PEM).
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name Redis's certificate must carry; empty means
	// the host of each address.
	ServerName string `yaml:"server_name"`
}

// Enabled reports whether the fleet's limits are coordinated.
func (c CoordinationConfig) Enabled() bool { return len(c.Addresses) > 0 }

// Password reads the Redis password from the file or the environment
// variable named; "" when none is named.
func (c CoordinationConfig) Password() (string, error) {
	switch {
	case c.PasswordFile != "":
		b, err := os.ReadFile(c.PasswordFile)
		if err != nil {
			return "", fmt.Errorf("coordination.password_file: %w", err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	case c.PasswordEnv != "":
		v, ok := os.LookupEnv(c.PasswordEnv)
		if !ok {
			return "", fmt.Errorf("coordination.password_env: %s is not set", c.PasswordEnv)
		}
		return v, nil
	}
	return "", nil
}

func defaultCoordination() CoordinationConfig {
	return CoordinationConfig{
		KeyPrefix:              "cqlguard:",
		SyncInterval:           Duration(100 * time.Millisecond),
		Fallback:               FallbackLocal,
		MaxPartitionsPerReport: 1000,
		TrackedPartitions:      16384,
	}
}

func (c CoordinationConfig) validate(ps *problems) {
	bad := func(err error, path ...string) { ps.add(err, append([]string{"coordination"}, path...)...) }
	for _, a := range c.Addresses {
		if err := checkAddr(a, toDial); err != nil {
			bad(err, "addresses")
		}
	}
	if len(c.Addresses) > 1 && !c.Cluster {
		bad(fmt.Errorf("%d addresses name a Redis Cluster's seeds: set cluster: true, or give one", len(c.Addresses)), "addresses")
	}
	if c.PasswordFile != "" && c.PasswordEnv != "" {
		bad(errors.New("password_file and password_env are exclusive"))
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		bad(errors.New("cert_file and key_file go together"), "tls")
	}
	// Rates are read over a sliding second of reports, which must hold
	// more than one report of every proxy.
	if d := time.Duration(c.SyncInterval); d < 10*time.Millisecond || d > 500*time.Millisecond {
		bad(fmt.Errorf("%s is outside 10ms to 500ms", d), "sync_interval")
	}
	switch c.Fallback {
	case FallbackLocal, FallbackShare:
	default:
		bad(fmt.Errorf("%q is neither %q nor %q", c.Fallback, FallbackLocal, FallbackShare), "fallback")
	}
	if c.MaxPartitionsPerReport < 1 {
		bad(fmt.Errorf("%d must be positive", c.MaxPartitionsPerReport), "max_partitions_per_report")
	}
	if c.TrackedPartitions < 4 || c.TrackedPartitions > 1<<24 {
		bad(fmt.Errorf("%d is outside 4 to %d", c.TrackedPartitions, 1<<24), "tracked_partitions")
	}
	if c.KeyPrefix == "" {
		bad(errors.New("must not be empty"), "key_prefix")
	}
}
