// Package loader reads the schema of the upstream cluster from its
// system_schema tables over a gocql session, and keeps a schema.Snapshot
// fresh. It is the only part of cqlguard's schema handling that talks to
// the cluster; package schema holds the snapshot, the types and the token,
// and knows nothing of sessions.
package loader

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/cqlguard/cqlguard/schema"
)

// rows is what Loader needs of a query's result; *gocql.Iter has it.
type rows interface {
	Scan(dest ...any) bool
	Close() error
}

// querier runs a query that takes no bind values. It lets tests feed Loader
// without a cluster.
type querier interface {
	query(ctx context.Context, stmt string) rows
}

// sessionQuerier runs queries on a gocql session.
type sessionQuerier struct{ s *gocql.Session }

func (q sessionQuerier) query(ctx context.Context, stmt string) rows {
	// system_schema is local to each node, so one replica's answer is the
	// answer; reading it twice is harmless.
	return q.s.Query(stmt).Consistency(gocql.One).Idempotent(true).IterContext(ctx)
}

// Loader reads the schema from a cluster.
type Loader struct {
	q querier
}

// New returns a Loader that reads through session. Dial makes a suitable
// session.
func New(session *gocql.Session) *Loader {
	return &Loader{q: sessionQuerier{session}}
}

// The system_schema queries Load makes. Every column is read rather than
// only partition key ones: filtering on kind would need ALLOW FILTERING, and
// a counter column marks a counter table whatever the server puts in flags.
const (
	selectTypes   = "SELECT keyspace_name, type_name, field_names, field_types FROM system_schema.types"
	selectTables  = "SELECT keyspace_name, table_name, flags, extensions FROM system_schema.tables"
	selectColumns = "SELECT keyspace_name, table_name, column_name, kind, position, type FROM system_schema.columns"
)

// rateLimitExtension is the system_schema.tables extensions key under which
// ScyllaDB stores the per_partition_rate_limit option.
const rateLimitExtension = "per_partition_rate_limit"

// name is a keyspace-qualified table or type name.
type name struct{ keyspace, name string }

func (n name) String() string { return n.keyspace + "." + n.name }

// userTypeDef is a row of system_schema.types.
type userTypeDef struct {
	fieldNames, fieldTypes []string
}

// tableDef is a row of system_schema.tables.
type tableDef struct {
	flags      []string
	extensions map[string][]byte
}

// keyColumn is a partition key row of system_schema.columns.
type keyColumn struct {
	name, typ string
	position  int
}

// Load reads the tables of the cluster, materialized views included.
//
// A table Load cannot understand (a type ParseType does not know, a
// malformed option, a user type that is missing because it was created
// between two of Load's queries) is left out of the snapshot, and Load
// returns the snapshot together with an error naming each such table. If it
// cannot read the schema at all it returns a nil snapshot and the error.
func (l *Loader) Load(ctx context.Context) (*schema.Snapshot, error) {
	types, err := l.readTypes(ctx)
	if err != nil {
		return nil, err
	}
	tables, err := l.readTables(ctx)
	if err != nil {
		return nil, err
	}
	keys, counters, err := l.readColumns(ctx)
	if err != nil {
		return nil, err
	}

	udts := &userTypes{defs: types, done: make(map[name]schema.Type), busy: make(map[name]bool)}
	var (
		out  = make([]*schema.Table, 0, len(keys))
		errs []error
	)
	for tn, cols := range keys {
		t, err := buildTable(tn, cols, tables[tn], counters[tn], udts)
		if err != nil {
			errs = append(errs, fmt.Errorf("schema: table %s: %w", tn, err))
			continue
		}
		out = append(out, t)
	}
	// Map order is random; sorted errors make the log stable.
	slices.SortFunc(errs, func(a, b error) int { return cmp.Compare(a.Error(), b.Error()) })
	return schema.NewSnapshot(out), errors.Join(errs...)
}

// buildTable assembles table tn from its partition key columns and its
// system_schema.tables row (nil for a materialized view).
func buildTable(tn name, cols []keyColumn, def *tableDef, counterColumn bool, udts *userTypes) (*schema.Table, error) {
	slices.SortFunc(cols, func(a, b keyColumn) int { return cmp.Compare(a.position, b.position) })
	t := &schema.Table{
		Keyspace:     tn.keyspace,
		Name:         tn.name,
		PartitionKey: make([]schema.Column, len(cols)),
		Counter:      counterColumn,
	}
	for i, c := range cols {
		// A gap means a column row was missed, and a key with a column
		// missing would give every request the wrong token.
		if c.position != i {
			return nil, fmt.Errorf("partition key column %q has position %d, want %d", c.name, c.position, i)
		}
		typ, err := schema.ParseType(c.typ, udts.resolve, tn.keyspace)
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", c.name, err)
		}
		t.PartitionKey[i] = schema.Column{Name: c.name, Type: typ}
	}
	if def == nil {
		return t, nil
	}
	if slices.Contains(def.flags, "counter") {
		t.Counter = true
	}
	if b, ok := def.extensions[rateLimitExtension]; ok {
		rl, err := schema.ParseRateLimit(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", rateLimitExtension, err)
		}
		t.RateLimit = rl
	}
	return t, nil
}

func (l *Loader) readTypes(ctx context.Context) (map[name]userTypeDef, error) {
	out := make(map[name]userTypeDef)
	var (
		ks, tn      string
		names, typs []string
	)
	it := l.q.query(ctx, selectTypes)
	for it.Scan(&ks, &tn, &names, &typs) {
		out[name{ks, tn}] = userTypeDef{fieldNames: names, fieldTypes: typs}
		// Start each row afresh so that stored rows never share memory with
		// the next, whatever the driver does with a non-nil destination.
		names, typs = nil, nil
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("schema: reading system_schema.types: %w", err)
	}
	return out, nil
}

func (l *Loader) readTables(ctx context.Context) (map[name]*tableDef, error) {
	out := make(map[name]*tableDef)
	var (
		ks, tn string
		flags  []string
		ext    map[string][]byte
	)
	it := l.q.query(ctx, selectTables)
	for it.Scan(&ks, &tn, &flags, &ext) {
		out[name{ks, tn}] = &tableDef{flags: flags, extensions: ext}
		flags, ext = nil, nil
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("schema: reading system_schema.tables: %w", err)
	}
	return out, nil
}

// readColumns returns the partition key columns of every table and view,
// and the tables that have a column of type counter.
func (l *Loader) readColumns(ctx context.Context) (map[name][]keyColumn, map[name]bool, error) {
	keys := make(map[name][]keyColumn)
	counters := make(map[name]bool)
	var (
		ks, tn, col, kind, typ string
		pos                    int
	)
	it := l.q.query(ctx, selectColumns)
	for it.Scan(&ks, &tn, &col, &kind, &pos, &typ) {
		switch {
		case kind == "partition_key":
			n := name{ks, tn}
			keys[n] = append(keys[n], keyColumn{name: col, typ: typ, position: pos})
		case typ == "counter":
			counters[name{ks, tn}] = true
		}
	}
	if err := it.Close(); err != nil {
		return nil, nil, fmt.Errorf("schema: reading system_schema.columns: %w", err)
	}
	return keys, counters, nil
}

// userTypes resolves user type names to types during one Load. User types
// refer to each other by name, so each is parsed on first use and
// remembered.
type userTypes struct {
	defs map[name]userTypeDef
	done map[name]schema.Type
	// busy holds the types being resolved, to turn a cycle (which the
	// server forbids, but a torn read could show) into an error rather
	// than endless recursion.
	busy map[name]bool
}

// resolve is ParseType's callback for user type names.
func (u *userTypes) resolve(keyspace, typeName string) (schema.Type, error) {
	n := name{keyspace, typeName}
	if t, ok := u.done[n]; ok {
		return t, nil
	}
	def, ok := u.defs[n]
	if !ok {
		return schema.Type{}, errors.New("not in system_schema.types")
	}
	if u.busy[n] {
		return schema.Type{}, errors.New("refers to itself")
	}
	if len(def.fieldNames) != len(def.fieldTypes) {
		return schema.Type{}, fmt.Errorf("%d field names and %d field types", len(def.fieldNames), len(def.fieldTypes))
	}
	u.busy[n] = true
	defer delete(u.busy, n)
	fields := make([]schema.Type, len(def.fieldTypes))
	for i, s := range def.fieldTypes {
		t, err := schema.ParseType(s, u.resolve, keyspace)
		if err != nil {
			return schema.Type{}, fmt.Errorf("field %q: %w", def.fieldNames[i], err)
		}
		fields[i] = t
	}
	t := schema.UserType(keyspace, typeName, def.fieldNames, fields)
	u.done[n] = t
	return t, nil
}
