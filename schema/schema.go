package schema

// A snapshot of the upstream cluster's schema: for every table, what the
// proxy needs to find a request's partition (the partition key columns and
// their types), whether it is a counter table, and ScyllaDB's per-partition
// rate limit if one is set. Package schema/loader reads them from the
// cluster's system_schema and keeps them fresh; this file only holds them.

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// Table is what the proxy needs of a table or materialized view.
type Table struct {
	// Keyspace and Name are as stored, case preserved and unquoted.
	Keyspace, Name string
	// PartitionKey lists the partition key columns in partition key order,
	// which is the order their values are serialized in to compute a token.
	PartitionKey []Column
	// Counter is set for counter tables, which ScyllaDB's limiter does not
	// count.
	Counter bool
	// RateLimit is the table's per_partition_rate_limit option (ScyllaDB
	// only); zero when absent.
	RateLimit RateLimit
}

// Column is a partition key column.
type Column struct {
	// Name is the column name as stored, case preserved and unquoted.
	Name string
	// Type is the column's CQL type, user types resolved.
	Type Type
}

// RateLimit is ScyllaDB's per_partition_rate_limit table option: the
// operations per second one partition of the table may take, per
// coordinator. Zero means no limit.
type RateLimit struct {
	MaxReadsPerSecond  uint32
	MaxWritesPerSecond uint32
}

// Snapshot is an immutable view of the tables of a cluster at one time. Its
// tables are shared by every reader and must not be modified.
type Snapshot struct {
	// keyspaces maps keyspace name to table name to table. Two levels rather
	// than one composite key so that Table can look up []byte names without
	// building a key, which would allocate.
	keyspaces map[string]map[string]*Table
	n         int
}

// Table returns the table keyspace.table, or nil if the snapshot has none
// such. Names are compared exactly, as stored: the caller unquotes and
// lower-cases unquoted identifiers first. It does not allocate.
func (s *Snapshot) Table(keyspace, table []byte) *Table {
	if s == nil {
		return nil
	}
	// The compiler does not allocate for string(b) used directly as a map
	// index.
	return s.keyspaces[string(keyspace)][string(table)]
}

// Len returns the number of tables in the snapshot.
func (s *Snapshot) Len() int {
	if s == nil {
		return 0
	}
	return s.n
}

// Tables returns every table, sorted by keyspace and name, in a new slice.
func (s *Snapshot) Tables() []*Table {
	if s == nil {
		return nil
	}
	out := make([]*Table, 0, s.n)
	for _, ts := range s.keyspaces {
		for _, t := range ts {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b *Table) int {
		return cmp.Or(cmp.Compare(a.Keyspace, b.Keyspace), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// NewSnapshot indexes tables into a snapshot: what a loader returns, and
// what tests and tools build by hand.
func NewSnapshot(tables []*Table) *Snapshot {
	s := &Snapshot{keyspaces: make(map[string]map[string]*Table)}
	for _, t := range tables {
		ks := s.keyspaces[t.Keyspace]
		if ks == nil {
			ks = make(map[string]*Table)
			s.keyspaces[t.Keyspace] = ks
		}
		if _, dup := ks[t.Name]; !dup {
			s.n++
		}
		ks[t.Name] = t
	}
	return s
}

// ParseRateLimit decodes the per_partition_rate_limit extension: a
// little-endian uint32 count of pairs, then each pair's key and value, each
// a little-endian uint32 length and that many bytes; values are decimal.
// Keys it does not know are skipped, so that an option added by a later
// ScyllaDB does not hide the limits it does know.
func ParseRateLimit(b []byte) (RateLimit, error) {
	var rl RateLimit
	next := func() ([]byte, error) {
		if len(b) < 4 {
			return nil, errors.New("truncated")
		}
		n := binary.LittleEndian.Uint32(b)
		if uint64(n) > uint64(len(b)-4) {
			return nil, errors.New("truncated")
		}
		s := b[4 : 4+n]
		b = b[4+n:]
		return s, nil
	}
	if len(b) < 4 {
		return rl, errors.New("truncated")
	}
	count := binary.LittleEndian.Uint32(b)
	b = b[4:]
	for range count {
		k, err := next()
		if err != nil {
			return RateLimit{}, err
		}
		v, err := next()
		if err != nil {
			return RateLimit{}, err
		}
		var dst *uint32
		switch string(k) {
		case "max_reads_per_second":
			dst = &rl.MaxReadsPerSecond
		case "max_writes_per_second":
			dst = &rl.MaxWritesPerSecond
		default:
			continue
		}
		n, err := strconv.ParseUint(string(v), 10, 32)
		if err != nil {
			return RateLimit{}, fmt.Errorf("%s: %w", k, err)
		}
		*dst = uint32(n)
	}
	if len(b) != 0 {
		return RateLimit{}, fmt.Errorf("%d bytes after the last pair", len(b))
	}
	return rl, nil
}

// UserType is the type of a user type with the given fields.
func UserType(keyspace, name string, fieldNames []string, fields []Type) Type {
	return Type{Kind: UDT, Keyspace: keyspace, Name: name, Fields: fieldNames, Elems: fields}
}
