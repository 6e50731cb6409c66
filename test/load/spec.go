package load

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cqlguard/cqlguard/frame"
)

// Mode is how a loader sends its statement.
type Mode string

// Modes.
const (
	// Execute prepares the statement once per connection and sends EXECUTE
	// with the key bound.
	Execute Mode = "execute"
	// Query sends the statement as an inline QUERY with the key written in
	// its text, so that every request has a new text.
	Query Mode = "query"
)

// Op is what the statement does.
type Op string

// Operations.
const (
	Read  Op = "read"  // SELECT v FROM ks.t WHERE k = ?
	Write Op = "write" // INSERT INTO ks.t (k, v) VALUES (?, ?)
)

// Dist is how keys are drawn.
type Dist string

// Key distributions.
const (
	// Uniform draws every key of [0, Keys) alike.
	Uniform Dist = "uniform"
	// Hot sends HotFraction of the requests to the HotKeys keys [0, HotKeys)
	// and the rest uniformly over [0, Keys).
	Hot Dist = "hot"
	// Zipf draws key k with probability proportional to 1/(k+1)^ZipfS.
	Zipf Dist = "zipf"
)

// Spec describes one loader: its workload and how hard it drives it.
type Spec struct {
	Name        string            // label in reports
	Addr        string            // host:port of the node or proxy
	Version     uint8             // protocol version, 3 to 5
	Compression frame.Compression // none, LZ4 or Snappy (v5: none or LZ4, on segments)
	Conns       int               // connections
	Concurrency int               // requests in flight per connection
	// Rate is the total requests per second over all connections, each
	// request's latency measured from when it was due, so that a stall is
	// not hidden by the requests it kept from being sent; 0 sends as fast
	// as Concurrency allows.
	Rate        float64
	Mode        Mode
	Op          Op
	Keyspace    string
	Table       string
	Keys        uint64  // distinct partition keys
	Dist        Dist    // key distribution
	HotFraction float64 // Hot: share of requests on the hot keys
	HotKeys     uint64  // Hot: number of hot keys
	ZipfS       float64 // Zipf: exponent, over 1
	ValueBytes  int     // Write: size of v
	Consistency uint16  // consistency level code
	Username    string  // PasswordAuthenticator, when set
	Password    string
	// OptIn asks for ScyllaDB's rate-limit error where the server offers it.
	OptIn bool
	// App, when set, is sent as the STARTUP option APPLICATION_NAME, which
	// cqlguard's client classes match on.
	App string
	// Start and Stop are when, from the start of the run, the loader starts
	// and stops; Stop 0 means at the end of the run.
	Start, Stop time.Duration
}

// DefaultSpec is the loader used where a spec says nothing: a uniform read
// workload over a million keys of bench.kv, 4 connections with 64 requests
// in flight each, protocol v4, prepared statements.
func DefaultSpec() Spec {
	return Spec{
		Name: "load", Addr: "127.0.0.1:9042", Version: 4, Conns: 4, Concurrency: 64,
		Mode: Execute, Op: Read, Keyspace: "bench", Table: "kv", Keys: 1_000_000,
		Dist: Uniform, HotFraction: 0.9, HotKeys: 1, ZipfS: 1.1, ValueBytes: 64,
		Consistency: consistencies["one"],
	}
}

// Consistency level codes by name.
var consistencies = map[string]uint16{
	"any": 0, "one": 1, "two": 2, "three": 3, "quorum": 4, "all": 5,
	"local_quorum": 6, "each_quorum": 7, "local_one": 10,
}

// SpecKeys lists the keys Set accepts, in the order help shows them.
var SpecKeys = []string{"name", "addr", "version", "compression", "conns", "concurrency", "rate",
	"mode", "op", "keyspace", "table", "keys", "dist", "hot-fraction", "hot-keys", "zipf-s",
	"value-bytes", "consistency", "user", "password", "opt-in", "app", "start", "stop"}

// Set sets one field of s by its key in Keys, from its text.
func (s *Spec) Set(key, value string) error {
	var err error
	switch key {
	case "name":
		s.Name = value
	case "addr":
		if _, _, err = net.SplitHostPort(value); err == nil {
			s.Addr = value
		}
	case "version":
		var v uint64
		if v, err = strconv.ParseUint(value, 10, 8); err == nil {
			s.Version = uint8(v)
		}
	case "compression":
		if value == "none" {
			value = ""
		}
		s.Compression, err = frame.ParseCompression(value)
	case "conns":
		s.Conns, err = strconv.Atoi(value)
	case "concurrency":
		s.Concurrency, err = strconv.Atoi(value)
	case "rate":
		s.Rate, err = strconv.ParseFloat(value, 64)
	case "mode":
		s.Mode = Mode(value)
	case "op":
		s.Op = Op(value)
	case "keyspace":
		s.Keyspace = value
	case "table":
		s.Table = value
	case "keys":
		s.Keys, err = strconv.ParseUint(value, 10, 64)
	case "dist":
		s.Dist = Dist(value)
	case "hot-fraction":
		s.HotFraction, err = strconv.ParseFloat(value, 64)
	case "hot-keys":
		s.HotKeys, err = strconv.ParseUint(value, 10, 64)
	case "zipf-s":
		s.ZipfS, err = strconv.ParseFloat(value, 64)
	case "value-bytes":
		s.ValueBytes, err = strconv.Atoi(value)
	case "consistency":
		c, ok := consistencies[strings.ToLower(value)]
		if !ok {
			err = errors.New("not a consistency level")
		}
		s.Consistency = c
	case "user":
		s.Username = value
	case "password":
		s.Password = value
	case "opt-in":
		s.OptIn, err = strconv.ParseBool(value)
	case "app":
		s.App = value
	case "start":
		s.Start, err = time.ParseDuration(value)
	case "stop":
		s.Stop, err = time.ParseDuration(value)
	default:
		return fmt.Errorf("unknown key %q (keys: %s)", key, strings.Join(SpecKeys, ", "))
	}
	if err != nil {
		return fmt.Errorf("%s=%s: %w", key, value, err)
	}
	return nil
}

// ParseSpec applies "key=value,key=value" settings to base.
func ParseSpec(text string, base Spec) (Spec, error) {
	s := base
	for _, kv := range strings.Split(text, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return s, fmt.Errorf("%q: want key=value", kv)
		}
		if err := s.Set(strings.TrimSpace(k), strings.TrimSpace(v)); err != nil {
			return s, err
		}
	}
	return s, s.Validate()
}

// Validate checks s for values that cannot work.
func (s *Spec) Validate() error {
	switch {
	case s.Version < 3 || s.Version > 5:
		return fmt.Errorf("%s: version %d is not 3, 4 or 5", s.Name, s.Version)
	case s.Version >= 5 && s.Compression == frame.CompressionSnappy:
		return fmt.Errorf("%s: protocol v5 compresses segments with LZ4 only", s.Name)
	case s.Conns < 1:
		return fmt.Errorf("%s: conns must be positive", s.Name)
	case s.Concurrency < 1 || s.Concurrency > 32768:
		return fmt.Errorf("%s: concurrency %d is outside 1 to 32768 (the stream ids of a connection)", s.Name, s.Concurrency)
	case s.Rate < 0:
		return fmt.Errorf("%s: rate must not be negative", s.Name)
	case !slices.Contains([]Mode{Execute, Query}, s.Mode):
		return fmt.Errorf("%s: mode %q is neither execute nor query", s.Name, s.Mode)
	case !slices.Contains([]Op{Read, Write}, s.Op):
		return fmt.Errorf("%s: op %q is neither read nor write", s.Name, s.Op)
	case !slices.Contains([]Dist{Uniform, Hot, Zipf}, s.Dist):
		return fmt.Errorf("%s: dist %q is not uniform, hot or zipf", s.Name, s.Dist)
	case s.Keys < 1:
		return fmt.Errorf("%s: keys must be positive", s.Name)
	case s.Dist == Hot && (s.HotKeys < 1 || s.HotKeys > s.Keys || s.HotFraction < 0 || s.HotFraction > 1):
		return fmt.Errorf("%s: hot needs 1 <= hot-keys <= keys and hot-fraction in [0, 1]", s.Name)
	case s.Dist == Zipf && s.ZipfS <= 1:
		return fmt.Errorf("%s: zipf-s must be over 1", s.Name)
	case s.ValueBytes < 0:
		return fmt.Errorf("%s: value-bytes must not be negative", s.Name)
	case s.Stop != 0 && s.Stop <= s.Start:
		return fmt.Errorf("%s: stop %v is not after start %v", s.Name, s.Stop, s.Start)
	case s.Keyspace == "" || s.Table == "":
		return fmt.Errorf("%s: keyspace and table must be set", s.Name)
	}
	if _, _, err := net.SplitHostPort(s.Addr); err != nil {
		return fmt.Errorf("%s: addr: %w", s.Name, err)
	}
	return nil
}

// statement is the CQL text a loader prepares or, in Query mode, the
// text around the key.
func (s *Spec) statement() string {
	if s.Op == Write {
		return "INSERT INTO " + s.Keyspace + "." + s.Table + " (k, v) VALUES (?, ?)"
	}
	return "SELECT v FROM " + s.Keyspace + "." + s.Table + " WHERE k = ?"
}
