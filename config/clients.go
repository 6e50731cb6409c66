package config

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
)

// ClientsConfig maps client connections to named classes by what the proxy
// sees of them, so that metrics, budgets and shedding can tell
// applications apart. Classes come from this file only, never from what a
// client sends, so the metrics' cardinality is the file's. Reloadable: a
// connection takes its class again on its next request.
type ClientsConfig struct {
	// Classes are tried in order; the first that matches a connection is
	// its class.
	Classes []ClientClass `yaml:"classes"`
	// Default is the class of connections no class matches. Its name is
	// "default" unless set; its match is ignored.
	Default ClientClass `yaml:"default"`
}

// ClientClass is one class of client connections.
type ClientClass struct {
	// Name names the class in metrics and errors: letters, digits,
	// underscores and dashes.
	Name string `yaml:"name"`
	// Tier is how important the class's requests are, 0 to 9: 0 is the
	// most important; shedding, when the cluster slows, starts from the
	// highest tier. Unset: DefaultTier.
	Tier *int `yaml:"tier"`
	// Match says which connections are of the class.
	Match ClientMatch `yaml:"match"`
	// MaxUnitsPerSecond is the class's budget in request units per second
	// over all its connections through this proxy; 0 means none.
	MaxUnitsPerSecond float64 `yaml:"max_units_per_second"`
	// BurstSeconds is how many seconds of its budget an idle class may
	// spend at once (unset or 0: 1); the budget may also go into debt by
	// the cost of the requests in flight, which the next ones repay.
	BurstSeconds float64 `yaml:"burst_seconds"`
}

// DefaultTier is the tier of a class that sets none.
const DefaultTier = 1

// TierOrDefault returns the class's tier, DefaultTier when unset.
func (c ClientClass) TierOrDefault() int {
	if c.Tier == nil {
		return DefaultTier
	}
	return *c.Tier
}

// Burst returns the class's burst in seconds, 1 when unset.
func (c ClientClass) Burst() float64 {
	if c.BurstSeconds == 0 {
		return 1
	}
	return c.BurstSeconds
}

// ClientMatch says which connections are of a class. Each list that is
// set must hold a connection's value: the lists are and-ed, the values in
// one list or-ed. A match with no list set matches every connection.
//
// Users and Addresses are verified: the node checks the user's password,
// and the address is the connection's own. ApplicationNames, ClientIDs and
// DriverNames are asserted: the client chooses them, so any client can
// claim a class matched by them alone (Warnings says so of such a class
// more privileged than the default).
type ClientMatch struct {
	// Users are authenticated user names, as the client gave them with
	// SASL PLAIN (PasswordAuthenticator) through the proxy, once the node
	// accepted the login.
	Users []string `yaml:"users"`
	// ApplicationNames, ClientIDs and DriverNames are the STARTUP options
	// APPLICATION_NAME, CLIENT_ID and DRIVER_NAME.
	ApplicationNames []string `yaml:"application_names"`
	ClientIDs        []string `yaml:"client_ids"`
	DriverNames      []string `yaml:"driver_names"`
	// Addresses are client addresses: IPs or CIDR prefixes.
	Addresses []string `yaml:"addresses"`
}

// asserted returns the keys of m that are set and whose values the client
// chooses, when no key that the proxy or the node verifies is set; nil
// otherwise.
func (m ClientMatch) asserted() []string {
	if len(m.Users) > 0 || len(m.Addresses) > 0 {
		return nil
	}
	var keys []string
	for _, k := range []struct {
		name string
		set  bool
	}{{"application_names", len(m.ApplicationNames) > 0}, {"client_ids", len(m.ClientIDs) > 0}, {"driver_names", len(m.DriverNames) > 0}} {
		if k.set {
			keys = append(keys, k.name)
		}
	}
	return keys
}

// Prefixes returns m's Addresses as prefixes, an IP as its one-address
// prefix. Validate has checked that they parse.
func (m ClientMatch) Prefixes() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, a := range m.Addresses {
		p, err := parseAddressMatch(a)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func parseAddressMatch(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is neither an IP nor a CIDR prefix", s)
		}
		return p.Masked(), nil
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is neither an IP nor a CIDR prefix", s)
	}
	ip = ip.Unmap()
	return netip.PrefixFrom(ip, ip.BitLen()), nil
}

// RequestUnitsConfig prices a request in request units (RU) once it is
// answered: fixed + per_row × rows + per_kib × (request and answer bytes)
// / 1024 + per_ms × upstream latency in milliseconds. Rows are a RESULT's
// row count, read from its header.
type RequestUnitsConfig struct {
	Fixed  float64 `yaml:"fixed"`
	PerRow float64 `yaml:"per_row"`
	PerKiB float64 `yaml:"per_kib"`
	PerMs  float64 `yaml:"per_ms"`
}

// DefaultClass is the name of the class of connections no class matches,
// unless clients.default.name says otherwise.
const DefaultClass = "default"

// maxTier bounds a class's tier.
const maxTier = 9

func defaultClients() ClientsConfig {
	return ClientsConfig{Default: ClientClass{Name: DefaultClass}}
}

func defaultRequestUnits() RequestUnitsConfig {
	// A point read of a small row answered in a millisecond costs about 2
	// RU; a 1 MiB answer 257 more; a scan of 10,000 rows 1,000 more.
	return RequestUnitsConfig{Fixed: 1, PerRow: 0.1, PerKiB: 0.25, PerMs: 1}
}

// validate checks the clients section.
func (c *ClientsConfig) validate(ps *problems) {
	seen := map[string]bool{}
	check := func(cl ClientClass, path ...string) {
		bad := func(err error, key ...string) { ps.add(err, append(append([]string{"clients"}, path...), key...)...) }
		if !isClassName(cl.Name) {
			bad(fmt.Errorf("%q: a class is named with letters, digits, underscores and dashes", cl.Name), "name")
		} else if seen[cl.Name] {
			bad(fmt.Errorf("%q names two classes", cl.Name), "name")
		}
		seen[cl.Name] = true
		if t := cl.TierOrDefault(); t < 0 || t > maxTier {
			bad(fmt.Errorf("%d is outside 0 to %d", t, maxTier), "tier")
		}
		if !(cl.MaxUnitsPerSecond >= 0) || math.IsInf(cl.MaxUnitsPerSecond, 0) {
			bad(fmt.Errorf("%v must be a number of request units from 0", cl.MaxUnitsPerSecond), "max_units_per_second")
		}
		if !(cl.BurstSeconds >= 0) || cl.BurstSeconds > maxBurst {
			bad(fmt.Errorf("%v must be a positive number of seconds", cl.BurstSeconds), "burst_seconds")
		}
		for _, a := range cl.Match.Addresses {
			if _, err := parseAddressMatch(a); err != nil {
				bad(err, "match", "addresses")
			}
		}
	}
	check(c.Default, "default")
	for i, cl := range c.Classes {
		check(cl, "classes", fmt.Sprint(i))
	}
}

// warn notes each class that any client can claim, matched on keys the
// client asserts alone, and that is more privileged than the default class:
// a client that names it gets what the file meant for another.
func (c *ClientsConfig) warn(ps *problems) {
	def := c.Default
	for i, cl := range c.Classes {
		keys := cl.Match.asserted()
		if keys == nil {
			continue
		}
		var more []string
		if t, d := cl.TierOrDefault(), def.TierOrDefault(); t < d {
			more = append(more, fmt.Sprintf("tier %d against %d", t, d))
		}
		switch u, d := cl.MaxUnitsPerSecond, def.MaxUnitsPerSecond; {
		case d > 0 && u == 0:
			more = append(more, fmt.Sprintf("no budget against max_units_per_second %g", d))
		case d > 0 && u > d:
			more = append(more, fmt.Sprintf("max_units_per_second %g against %g", u, d))
		}
		if more == nil {
			continue
		}
		ps.add(fmt.Errorf("class %s is matched on %s alone, which the client asserts in its STARTUP, so any client can claim it; it is more privileged than the default class %s (%s): match on users or addresses too",
			cl.Name, strings.Join(keys, " and "), def.Name, strings.Join(more, ", ")), "clients", "classes", strconv.Itoa(i), "match")
	}
}

func isClassName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// validate checks the request_units section.
func (c *RequestUnitsConfig) validate(ps *problems) {
	for _, f := range []struct {
		key string
		v   float64
	}{{"fixed", c.Fixed}, {"per_row", c.PerRow}, {"per_kib", c.PerKiB}, {"per_ms", c.PerMs}} {
		if !(f.v >= 0) || math.IsInf(f.v, 0) {
			ps.add(errors.New("must be a number from 0"), "request_units", f.key)
		}
	}
}
