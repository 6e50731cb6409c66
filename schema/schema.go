package schema

// The schema of the upstream cluster: for every table, what the proxy needs
// to find a request's partition (the partition key columns and their types),
// whether it is a counter table, and ScyllaDB's per-partition rate limit if
// one is set. Loader reads them from system_schema; Schema keeps them fresh.

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/apache/cassandra-gocql-driver/v2/gocqlzerolog"
	"github.com/rs/zerolog"
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

// NewSnapshot indexes tables into a snapshot: what Load returns, and what
// tests and tools build by hand.
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

// NewLoader returns a Loader that reads through session. Dial makes a
// suitable session.
func NewLoader(session *gocql.Session) *Loader {
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
func (l *Loader) Load(ctx context.Context) (*Snapshot, error) {
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

	udts := &userTypes{defs: types, done: make(map[name]Type), busy: make(map[name]bool)}
	var (
		out  = make([]*Table, 0, len(keys))
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
	return NewSnapshot(out), errors.Join(errs...)
}

// buildTable assembles table tn from its partition key columns and its
// system_schema.tables row (nil for a materialized view).
func buildTable(tn name, cols []keyColumn, def *tableDef, counterColumn bool, udts *userTypes) (*Table, error) {
	slices.SortFunc(cols, func(a, b keyColumn) int { return cmp.Compare(a.position, b.position) })
	t := &Table{
		Keyspace:     tn.keyspace,
		Name:         tn.name,
		PartitionKey: make([]Column, len(cols)),
		Counter:      counterColumn,
	}
	for i, c := range cols {
		// A gap means a column row was missed, and a key with a column
		// missing would give every request the wrong token.
		if c.position != i {
			return nil, fmt.Errorf("partition key column %q has position %d, want %d", c.name, c.position, i)
		}
		typ, err := ParseType(c.typ, udts.resolve, tn.keyspace)
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", c.name, err)
		}
		t.PartitionKey[i] = Column{Name: c.name, Type: typ}
	}
	if def == nil {
		return t, nil
	}
	if slices.Contains(def.flags, "counter") {
		t.Counter = true
	}
	if b, ok := def.extensions[rateLimitExtension]; ok {
		rl, err := parseRateLimit(b)
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
	done map[name]Type
	// busy holds the types being resolved, to turn a cycle (which the
	// server forbids, but a torn read could show) into an error rather
	// than endless recursion.
	busy map[name]bool
}

// resolve is ParseType's callback for user type names.
func (u *userTypes) resolve(keyspace, typeName string) (Type, error) {
	n := name{keyspace, typeName}
	if t, ok := u.done[n]; ok {
		return t, nil
	}
	def, ok := u.defs[n]
	if !ok {
		return Type{}, errors.New("not in system_schema.types")
	}
	if u.busy[n] {
		return Type{}, errors.New("refers to itself")
	}
	if len(def.fieldNames) != len(def.fieldTypes) {
		return Type{}, fmt.Errorf("%d field names and %d field types", len(def.fieldNames), len(def.fieldTypes))
	}
	u.busy[n] = true
	defer delete(u.busy, n)
	fields := make([]Type, len(def.fieldTypes))
	for i, s := range def.fieldTypes {
		t, err := ParseType(s, u.resolve, keyspace)
		if err != nil {
			return Type{}, fmt.Errorf("field %q: %w", def.fieldNames[i], err)
		}
		fields[i] = t
	}
	t := userType(keyspace, typeName, def.fieldNames, fields)
	u.done[n] = t
	return t, nil
}

// parseRateLimit decodes the per_partition_rate_limit extension: a
// little-endian uint32 count of pairs, then each pair's key and value, each
// a little-endian uint32 length and that many bytes; values are decimal.
// Keys it does not know are skipped, so that an option added by a later
// ScyllaDB does not hide the limits it does know.
func parseRateLimit(b []byte) (RateLimit, error) {
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

// Source gives snapshots of the schema; *Loader is one.
type Source interface {
	Load(ctx context.Context) (*Snapshot, error)
}

// Schema holds the current snapshot and reloads it from a Source
// periodically and when asked. Its methods are safe for concurrent use.
type Schema struct {
	src   Source
	log   zerolog.Logger
	every time.Duration
	// settle is how long Run waits after a Refresh before loading, so that
	// the rest of a burst of schema changes lands in the same load.
	settle time.Duration
	// timeout bounds one load, so that a hung upstream does not stop the
	// periodic reloads.
	timeout time.Duration
	cur     atomic.Pointer[Snapshot]
	// kick holds at most one pending Refresh; more are redundant.
	kick chan struct{}
}

// Defaults for Schema's internal timings.
const (
	defaultSettle  = 250 * time.Millisecond
	defaultTimeout = time.Minute
	// maxRetry caps the delay between attempts after failed loads; retries
	// start at a second so that a proxy started before its cluster learns
	// the schema soon after the cluster is up.
	maxRetry = 30 * time.Second
)

// New returns a Schema that loads from src every period, and on Refresh,
// once Run is running. If every is zero or negative it loads only at start
// and on Refresh. Until the first load succeeds, Current is an empty
// snapshot.
func New(src Source, log zerolog.Logger, every time.Duration) *Schema {
	s := &Schema{
		src:     src,
		log:     log,
		every:   every,
		settle:  defaultSettle,
		timeout: defaultTimeout,
		kick:    make(chan struct{}, 1),
	}
	s.cur.Store(NewSnapshot(nil))
	return s
}

// Current returns the latest snapshot; never nil.
func (s *Schema) Current() *Snapshot {
	return s.cur.Load()
}

// Refresh asks for a reload soon, without waiting for it. A burst of
// Refresh calls, such as a DDL script gives, causes one reload, or two if
// the burst outlasts a load.
func (s *Schema) Refresh() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run loads the schema at once and then every period and after each
// Refresh, until ctx ends. Failures are logged and keep the previous
// snapshot; after one, Run retries sooner than the period.
func (s *Schema) Run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-s.kick:
			if !sleep(ctx, s.settle) {
				return
			}
		}
		// This load will see every change announced so far; only a Refresh
		// from now on needs another.
		select {
		case <-s.kick:
		default:
		}
		next := s.every
		if s.load(ctx) {
			failures = 0
		} else {
			failures++
			if retry := retryDelay(failures); next <= 0 || retry < next {
				next = retry
			}
		}
		if next > 0 {
			timer.Reset(next)
		}
	}
}

// load loads and installs one snapshot, and reports whether it got one.
func (s *Schema) load(parent context.Context) bool {
	ctx, cancel := context.WithTimeout(parent, s.timeout)
	defer cancel()
	start := time.Now()
	snap, err := s.src.Load(ctx)
	elapsed := time.Since(start)
	if snap == nil {
		if err == nil {
			err = errors.New("schema: source returned no snapshot")
		}
		// A load cut short because Run is stopping is no failure to report.
		if parent.Err() == nil {
			s.log.Error().Err(err).Dur("took", elapsed).Int("tables", s.Current().Len()).
				Msg("loading the schema failed; keeping the previous one")
		}
		return false
	}
	if err != nil {
		// Some tables could not be understood: the rest are still better
		// than a snapshot that misses every change since the last good load.
		s.log.Warn().Err(err).Msg("some tables of the schema were left out")
	}
	prev := s.cur.Swap(snap)
	ev := s.log.Debug()
	if prev.Len() != snap.Len() {
		ev = s.log.Info()
	}
	ev.Int("tables", snap.Len()).Dur("took", elapsed).Msg("schema loaded")
	return true
}

// retryDelay is the wait before the next attempt after n consecutive
// failures: doubling from a second, up to maxRetry.
func retryDelay(n int) time.Duration {
	d := time.Second
	for i := 1; i < n && d < maxRetry; i++ {
		d *= 2
	}
	return min(d, maxRetry)
}

// sleep waits for d or until ctx ends, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// DialConfig says how to reach the upstream cluster for schema queries.
type DialConfig struct {
	// Upstreams are the nodes to connect to, host:port. No other node is
	// contacted, even if the cluster has more.
	Upstreams []string
	// Username and Password authenticate when Username is set.
	Username, Password string
	// Timeout bounds connecting and each query; zero means 10s.
	Timeout time.Duration
	// TLS, when set, is the configuration of TLS towards the nodes; the
	// driver verifies each node's certificate against its host unless
	// TLS.ServerName is set or TLS.InsecureSkipVerify.
	TLS *tls.Config
	// Log receives the driver's messages; the zero Logger discards them.
	Log zerolog.Logger
}

// Dial opens a gocql session on the configured upstream nodes for a Loader.
// The proxy dials its upstreams directly rather than through itself, and
// talks only to them: the nodes' own peers may be unreachable from the
// proxy, or reachable only at addresses the operator did not mean it to use.
func Dial(ctx context.Context, cfg DialConfig) (*gocql.Session, error) {
	if len(cfg.Upstreams) == 0 {
		return nil, errors.New("schema: no upstream to dial")
	}
	filter, err := resolveUpstreams(ctx, cfg.Upstreams)
	if err != nil {
		return nil, err
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	c := gocql.NewCluster(cfg.Upstreams...)
	c.DisableInitialHostLookup = true
	// DisableInitialHostLookup covers start-up; the filter covers nodes the
	// driver would learn of later from topology events.
	c.HostFilter = filter
	c.Timeout = timeout
	c.ConnectTimeout = timeout
	c.NumConns = 1
	c.Consistency = gocql.One
	// The driver's own schema cache would read all of system_schema a second
	// time on every change.
	c.Metadata.CacheMode = gocql.Disabled
	c.Logger = gocqlzerolog.NewZerologLogger(cfg.Log)
	if cfg.Username != "" {
		c.Authenticator = gocql.PasswordAuthenticator{Username: cfg.Username, Password: cfg.Password}
	}
	if cfg.TLS != nil {
		// With a Config whose InsecureSkipVerify is false, gocql verifies
		// hosts whatever EnableHostVerification says.
		c.SslOpts = &gocql.SslOptions{Config: cfg.TLS.Clone(), EnableHostVerification: !cfg.TLS.InsecureSkipVerify}
	}

	// gocql takes no context, so the session is made aside and abandoned,
	// then closed once it exists, if ctx ends first.
	type result struct {
		s   *gocql.Session
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := c.CreateSession()
		done <- result{s, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("schema: connecting to %v: %w", cfg.Upstreams, r.err)
		}
		return r.s, nil
	case <-ctx.Done():
		go func() {
			if r := <-done; r.s != nil {
				r.s.Close()
			}
		}()
		return nil, fmt.Errorf("schema: connecting to %v: %w", cfg.Upstreams, ctx.Err())
	}
}

// upstreamFilter accepts the hosts whose address and port are those of a
// configured upstream.
type upstreamFilter map[string]bool

// Accept implements gocql.HostFilter.
func (f upstreamFilter) Accept(h *gocql.HostInfo) bool {
	return f[net.JoinHostPort(h.ConnectAddress().String(), strconv.Itoa(h.Port()))]
}

// resolveUpstreams builds the filter for upstreams, host:port each, by the
// IP addresses their hosts have now.
func resolveUpstreams(ctx context.Context, upstreams []string) (upstreamFilter, error) {
	f := make(upstreamFilter)
	for _, u := range upstreams {
		host, port, err := net.SplitHostPort(u)
		if err != nil {
			return nil, fmt.Errorf("schema: upstream %q: %w", u, err)
		}
		addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
		if err != nil {
			return nil, fmt.Errorf("schema: upstream %q: %w", u, err)
		}
		for _, a := range addrs {
			f[net.JoinHostPort(a.IP.String(), port)] = true
		}
	}
	return f, nil
}

// userType is the type of a user type with the given fields.
func userType(keyspace, name string, fieldNames []string, fields []Type) Type {
	return Type{Kind: UDT, Keyspace: keyspace, Name: name, Fields: fieldNames, Elems: fields}
}
