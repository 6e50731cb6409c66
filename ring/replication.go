package ring

// A keyspace's replication, as system_schema.keyspaces stores it: a
// map<text, text> with the strategy's class under "class" and its options
// beside it, for example
//
//	{'class': 'org.apache.cassandra.locator.SimpleStrategy', 'replication_factor': '3'}
//	{'class': 'org.apache.cassandra.locator.NetworkTopologyStrategy', 'dc1': '3', 'dc2': '2'}
//
// A replication factor is "<replicas>" or, with transient replication,
// "<replicas>/<transient>": "3/1" is three replicas of which one is
// transient (Cassandra's ReplicationFactor.fromString).

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Strategy is a replication strategy class.
type Strategy uint8

const (
	// SimpleStrategy places a token's replicas on the next distinct nodes
	// clockwise round the ring, ignoring datacenters and racks.
	SimpleStrategy Strategy = iota + 1
	// NetworkTopologyStrategy places a number of replicas in each
	// datacenter, on distinct racks while it can.
	NetworkTopologyStrategy
	// LocalStrategy keeps each node's data on that node alone (the system
	// keyspace): no token has replicas elsewhere.
	LocalStrategy
	// EverywhereStrategy (ScyllaDB's and DSE's) places every token on every
	// node.
	EverywhereStrategy
)

// classPrefix is the package of Cassandra's (and ScyllaDB's) strategies;
// the server accepts a class name without it and stores it with it.
const classPrefix = "org.apache.cassandra.locator."

var strategyNames = map[string]Strategy{
	"SimpleStrategy":          SimpleStrategy,
	"NetworkTopologyStrategy": NetworkTopologyStrategy,
	"LocalStrategy":           LocalStrategy,
	"EverywhereStrategy":      EverywhereStrategy,
}

func (s Strategy) String() string {
	for name, v := range strategyNames {
		if v == s {
			return name
		}
	}
	return "Strategy(" + strconv.Itoa(int(s)) + ")"
}

// Factor is a replication factor: All replicas, of which Transient are
// transient (hold only data not yet repaired) and the rest are full.
type Factor struct {
	All, Transient int
}

// Full returns the number of full replicas.
func (f Factor) Full() int { return f.All - f.Transient }

func (f Factor) String() string {
	if f.Transient == 0 {
		return strconv.Itoa(f.All)
	}
	return strconv.Itoa(f.All) + "/" + strconv.Itoa(f.Transient)
}

// maxFactor bounds a parsed factor. Placement caps a factor at the number
// of nodes anyway; the bound keeps arithmetic on factors far from
// overflow whatever a replication map holds.
const maxFactor = 1 << 20

// ParseFactor parses a replication factor as Cassandra writes it: a
// decimal count, or count/transient with at least one full replica.
func ParseFactor(s string) (Factor, error) {
	all, trans, hasTrans := strings.Cut(s, "/")
	var f Factor
	var err error
	if f.All, err = parseCount(all); err != nil {
		return Factor{}, fmt.Errorf("replication factor %q: %w", s, err)
	}
	if hasTrans {
		if f.Transient, err = parseCount(trans); err != nil {
			return Factor{}, fmt.Errorf("replication factor %q: transient: %w", s, err)
		}
		if f.Transient > 0 && f.Full() < 1 {
			return Factor{}, fmt.Errorf("replication factor %q: no full replica", s)
		}
	}
	return f, nil
}

// parseCount parses a count of replicas: decimal digits only, as
// Cassandra's Integer.parseInt takes them less the sign.
func parseCount(s string) (int, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, errors.New("not a count")
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > maxFactor {
		return 0, fmt.Errorf("over %d", maxFactor)
	}
	return n, nil
}

// Replication is a keyspace's replication strategy and its factors.
type Replication struct {
	Strategy Strategy
	// Factor is SimpleStrategy's replication factor. For
	// NetworkTopologyStrategy it is the factor of each datacenter that
	// Datacenters does not name, when the map had the replication_factor
	// shorthand (Cassandra expands it into every datacenter when the
	// keyspace is created, so a stored map rarely has it); zero otherwise.
	Factor Factor
	// Datacenters holds NetworkTopologyStrategy's factor per datacenter.
	Datacenters map[string]Factor
}

// ErrUnknownStrategy is wrapped by ParseReplication's error for a class it
// does not know, whose placement cannot be computed.
var ErrUnknownStrategy = errors.New("unknown replication strategy")

// ParseReplication parses a replication map as system_schema.keyspaces
// stores it. Options a strategy does not use are ignored; a factor that
// does not parse is an error.
func ParseReplication(m map[string]string) (Replication, error) {
	class, ok := m["class"]
	if !ok {
		return Replication{}, errors.New("replication: no class")
	}
	name := strings.TrimPrefix(class, classPrefix)
	s, ok := strategyNames[name]
	if !ok {
		return Replication{}, fmt.Errorf("replication: class %q: %w", class, ErrUnknownStrategy)
	}
	r := Replication{Strategy: s}
	switch s {
	case SimpleStrategy:
		rf, ok := m["replication_factor"]
		if !ok {
			return Replication{}, errors.New("replication: SimpleStrategy without replication_factor")
		}
		f, err := ParseFactor(rf)
		if err != nil {
			return Replication{}, fmt.Errorf("replication: %w", err)
		}
		r.Factor = f
	case NetworkTopologyStrategy:
		r.Datacenters = make(map[string]Factor, len(m))
		// Sorted, so that of several bad factors the same one is named
		// each time.
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if k == "class" {
				continue
			}
			f, err := ParseFactor(m[k])
			if err != nil {
				return Replication{}, fmt.Errorf("replication: %s: %w", k, err)
			}
			if k == "replication_factor" {
				r.Factor = f
				continue
			}
			r.Datacenters[k] = f
		}
	}
	return r, nil
}

// String renders r as a replication map would read, options sorted.
func (r Replication) String() string {
	var b strings.Builder
	b.WriteString("{class: " + r.Strategy.String())
	switch r.Strategy {
	case SimpleStrategy:
		b.WriteString(", replication_factor: " + r.Factor.String())
	case NetworkTopologyStrategy:
		if r.Factor != (Factor{}) {
			b.WriteString(", replication_factor: " + r.Factor.String())
		}
		for _, dc := range slices.Sorted(maps.Keys(r.Datacenters)) {
			b.WriteString(", " + strconv.Quote(dc) + ": " + r.Datacenters[dc].String())
		}
	}
	b.WriteString("}")
	return b.String()
}
