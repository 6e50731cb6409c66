package loader

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/schema"
)

// fakeRows replays rows through Scan the way *gocql.Iter does.
type fakeRows struct {
	rows [][]any
	err  error
	scan error // set when a row does not fit the destinations
}

func (r *fakeRows) Scan(dest ...any) bool {
	if r.err != nil || r.scan != nil || len(r.rows) == 0 {
		return false
	}
	row := r.rows[0]
	r.rows = r.rows[1:]
	if len(row) != len(dest) {
		r.scan = fmt.Errorf("row has %d values for %d destinations", len(row), len(dest))
		return false
	}
	for i, v := range row {
		d := reflect.ValueOf(dest[i]).Elem()
		if v == nil {
			d.SetZero()
			continue
		}
		d.Set(reflect.ValueOf(v))
	}
	return true
}

func (r *fakeRows) Close() error {
	if r.err != nil {
		return r.err
	}
	return r.scan
}

// fakeCluster answers Loader's queries from rows given per system_schema
// table.
type fakeCluster struct {
	types, tables, columns [][]any
	fail                   string // a table whose query fails
}

func (f *fakeCluster) query(_ context.Context, stmt string) rows {
	for _, q := range []struct {
		table string
		rows  [][]any
	}{
		{"system_schema.types", f.types},
		{"system_schema.tables", f.tables},
		{"system_schema.columns", f.columns},
	} {
		if strings.HasSuffix(stmt, "FROM "+q.table) {
			if f.fail == q.table {
				return &fakeRows{err: errors.New("unavailable")}
			}
			return &fakeRows{rows: q.rows}
		}
	}
	return &fakeRows{err: fmt.Errorf("unexpected query %q", stmt)}
}

// Row builders, in the column order of Loader's queries.
func typeRow(ks, name string, fields ...string) []any {
	var names, types []string
	for i := 0; i < len(fields); i += 2 {
		names = append(names, fields[i])
		types = append(types, fields[i+1])
	}
	return []any{ks, name, names, types}
}

func tableRow(ks, name string, flags []string, ext map[string][]byte) []any {
	return []any{ks, name, flags, ext}
}

func pk(ks, table, col string, pos int, typ string) []any {
	return []any{ks, table, col, "partition_key", pos, typ}
}

func regular(ks, table, col, typ string) []any {
	return []any{ks, table, col, "regular", -1, typ}
}

// rateLimitBlob encodes pairs as ScyllaDB stores per_partition_rate_limit.
func rateLimitBlob(pairs ...string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(pairs)/2))
	for _, s := range pairs {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	return b
}

// describe renders a table's partition key for comparison.
func describe(t *schema.Table) string {
	if t == nil {
		return "<nil>"
	}
	var parts []string
	for _, c := range t.PartitionKey {
		parts = append(parts, c.Name+" "+c.Type.String())
	}
	s := strings.Join(parts, ", ")
	if t.Counter {
		s += " counter"
	}
	if t.RateLimit != (schema.RateLimit{}) {
		s += fmt.Sprintf(" limit %d/%d", t.RateLimit.MaxReadsPerSecond, t.RateLimit.MaxWritesPerSecond)
	}
	return s
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name    string
		cluster fakeCluster
		want    map[string]string // keyspace.table -> describe
		wantErr string            // substring of Load's error; "" for none
		noSnap  bool              // Load returns no snapshot at all
	}{
		{
			name: "simple",
			cluster: fakeCluster{
				tables:  [][]any{tableRow("ks", "t", []string{"compound"}, nil)},
				columns: [][]any{pk("ks", "t", "k", 0, "int"), regular("ks", "t", "v", "text")},
			},
			want: map[string]string{"ks.t": "k int"},
		},
		{
			name: "composite key in position order, not row order",
			cluster: fakeCluster{
				tables: [][]any{tableRow("ks", "t", nil, nil)},
				columns: [][]any{
					pk("ks", "t", "a", 2, "uuid"),
					pk("ks", "t", "z", 0, "text"),
					{"ks", "t", "c", "clustering", 0, "int"},
					pk("ks", "t", "m", 1, "bigint"),
				},
			},
			want: map[string]string{"ks.t": "z text, m bigint, a uuid"},
		},
		{
			name: "counter by flag",
			cluster: fakeCluster{
				tables:  [][]any{tableRow("ks", "c", []string{"compound", "counter"}, nil)},
				columns: [][]any{pk("ks", "c", "k", 0, "text")},
			},
			want: map[string]string{"ks.c": "k text counter"},
		},
		{
			name: "counter by column type",
			cluster: fakeCluster{
				tables:  [][]any{tableRow("ks", "c", nil, nil)},
				columns: [][]any{pk("ks", "c", "k", 0, "text"), regular("ks", "c", "n", "counter")},
			},
			want: map[string]string{"ks.c": "k text counter"},
		},
		{
			name: "rate limit",
			cluster: fakeCluster{
				tables: [][]any{
					tableRow("ks", "both", nil, map[string][]byte{
						"per_partition_rate_limit": rateLimitBlob("max_reads_per_second", "100", "max_writes_per_second", "20"),
						"other":                    {1, 2, 3},
					}),
					tableRow("ks", "writes", nil, map[string][]byte{
						"per_partition_rate_limit": rateLimitBlob("max_writes_per_second", "7"),
					}),
					tableRow("ks", "none", nil, map[string][]byte{"other": nil}),
				},
				columns: [][]any{
					pk("ks", "both", "k", 0, "int"),
					pk("ks", "writes", "k", 0, "int"),
					pk("ks", "none", "k", 0, "int"),
				},
			},
			want: map[string]string{"ks.both": "k int limit 100/20", "ks.writes": "k int limit 0/7", "ks.none": "k int"},
		},
		{
			name: "malformed rate limit leaves only that table out",
			cluster: fakeCluster{
				tables: [][]any{
					tableRow("ks", "bad", nil, map[string][]byte{"per_partition_rate_limit": {1, 0}}),
					tableRow("ks", "good", nil, nil),
				},
				columns: [][]any{pk("ks", "bad", "k", 0, "int"), pk("ks", "good", "k", 0, "int")},
			},
			want:    map[string]string{"ks.good": "k int"},
			wantErr: "table ks.bad: per_partition_rate_limit: truncated",
		},
		{
			name: "materialized view has no tables row",
			cluster: fakeCluster{
				columns: [][]any{pk("ks", "by_email", "email", 0, "text")},
			},
			want: map[string]string{"ks.by_email": "email text"},
		},
		{
			name: "user types nest and are per keyspace",
			cluster: fakeCluster{
				types: [][]any{
					typeRow("ks", "person", "name", "text", "home", "frozen<address>"),
					typeRow("ks", "address", "street", "text", "zip", "int"),
					typeRow("other", "person", "id", "int"),
				},
				tables:  [][]any{tableRow("ks", "t", nil, nil), tableRow("other", "t", nil, nil)},
				columns: [][]any{pk("ks", "t", "p", 0, "frozen<person>"), pk("other", "t", "p", 0, "frozen<person>")},
			},
			want: map[string]string{"ks.t": "p frozen<person>", "other.t": "p frozen<person>"},
		},
		{
			name: "collections, tuples and quoted names",
			cluster: fakeCluster{
				types: [][]any{typeRow("Ks", "MyType", "Field", "int")},
				columns: [][]any{
					pk("Ks", "Coll", "k", 0, "frozen<map<text, frozen<list<int>>>>"),
					pk("Ks", "Tup", "k", 0, "frozen<tuple<int, text, frozen<set<blob>>>>"),
					pk("Ks", "Mixed", "PartKey", 0, "frozen<\"MyType\">"),
					pk("Ks", "Mixed", "Other", 1, "frozen<\"Ks\".\"MyType\">"),
				},
			},
			want: map[string]string{
				"Ks.Coll":  "k frozen<map<text, frozen<list<int>>>>",
				"Ks.Tup":   "k frozen<tuple<int, text, frozen<set<blob>>>>",
				"Ks.Mixed": "PartKey frozen<\"MyType\">, Other frozen<\"MyType\">",
			},
		},
		{
			name: "unknown user type",
			cluster: fakeCluster{
				columns: [][]any{pk("ks", "t", "p", 0, "frozen<ghost>"), pk("ks", "u", "k", 0, "int")},
			},
			want:    map[string]string{"ks.u": "k int"},
			wantErr: "table ks.t: column \"p\": schema: parsing type \"frozen<ghost>\": resolving user type ks.ghost: not in system_schema.types",
		},
		{
			name: "cyclic user types",
			cluster: fakeCluster{
				types: [][]any{
					typeRow("ks", "a", "b", "frozen<b>"),
					typeRow("ks", "b", "a", "frozen<a>"),
				},
				columns: [][]any{pk("ks", "t", "k", 0, "frozen<a>")},
			},
			want:    map[string]string{},
			wantErr: "refers to itself",
		},
		{
			name: "unparsable type",
			cluster: fakeCluster{
				columns: [][]any{pk("ks", "t", "k", 0, "map<int>")},
			},
			want:    map[string]string{},
			wantErr: "table ks.t: column \"k\"",
		},
		{
			name: "gap in partition key positions",
			cluster: fakeCluster{
				columns: [][]any{pk("ks", "t", "a", 0, "int"), pk("ks", "t", "c", 2, "int")},
			},
			want:    map[string]string{},
			wantErr: "position 2, want 1",
		},
		{
			name:    "columns unreadable",
			cluster: fakeCluster{fail: "system_schema.columns"},
			noSnap:  true,
			wantErr: "reading system_schema.columns: unavailable",
		},
		{
			name:    "types unreadable",
			cluster: fakeCluster{fail: "system_schema.types"},
			noSnap:  true,
			wantErr: "reading system_schema.types: unavailable",
		},
		{
			name:    "tables unreadable",
			cluster: fakeCluster{fail: "system_schema.tables"},
			noSnap:  true,
			wantErr: "reading system_schema.tables: unavailable",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &Loader{q: &tt.cluster}
			snap, err := l.Load(context.Background())
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Load: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Load error = %v, want one containing %q", err, tt.wantErr)
			}
			if tt.noSnap {
				if snap != nil {
					t.Fatalf("Load returned a snapshot of %d tables with %v", snap.Len(), err)
				}
				return
			}
			got := make(map[string]string)
			for _, tb := range snap.Tables() {
				got[tb.Keyspace+"."+tb.Name] = describe(tb)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("tables = %q, want %q", got, tt.want)
			}
			if snap.Len() != len(tt.want) {
				t.Errorf("Len = %d, want %d", snap.Len(), len(tt.want))
			}
		})
	}
}

func TestLoadResolvesUserTypeFields(t *testing.T) {
	l := &Loader{q: &fakeCluster{
		types: [][]any{
			typeRow("ks", "person", "name", "text", "home", "frozen<address>"),
			typeRow("ks", "address", "street", "text"),
		},
		columns: [][]any{pk("ks", "t", "p", 0, "frozen<person>")},
	}}
	snap, err := l.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p := snap.Table([]byte("ks"), []byte("t")).PartitionKey[0].Type
	if p.Kind != schema.UDT || p.Name != "person" || len(p.Elems) != 2 {
		t.Fatalf("person = %+v", p)
	}
	if a := p.Elems[1]; a.Kind != schema.UDT || a.Name != "address" || !reflect.DeepEqual(a.Fields, []string{"street"}) {
		t.Fatalf("person.home = %+v", a)
	}
}

// fakeSource hands out numbered snapshots, or errors, and counts loads.
type fakeSource struct {
	mu      sync.Mutex
	loads   int
	started int // loads begun, at the gate or past it
	fail    bool
	gate    chan struct{} // when set, each load waits for a value
	calls   chan int      // when set, receives each load's number
}

func (f *fakeSource) Load(ctx context.Context) (*schema.Snapshot, error) {
	f.mu.Lock()
	f.started++
	f.mu.Unlock()
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	f.loads++
	n, fail := f.loads, f.fail
	f.mu.Unlock()
	if f.calls != nil {
		f.calls <- n
	}
	if fail {
		return nil, errors.New("cluster unavailable")
	}
	tables := make([]*schema.Table, n)
	for i := range tables {
		tables[i] = &schema.Table{Keyspace: "ks", Name: fmt.Sprint("t", i)}
	}
	return schema.NewSnapshot(tables), nil
}

func (f *fakeSource) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.loads
}

func (f *fakeSource) setFail(fail bool) {
	f.mu.Lock()
	f.fail = fail
	f.mu.Unlock()
}

// waitFor polls cond for up to 5s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// startSchema runs a Schema over src until the test ends.
func startSchema(t *testing.T, src Source, every, settle time.Duration) *Schema {
	t.Helper()
	s := NewSchema(src, zerolog.Nop(), every)
	s.settle = settle
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		s.Run(ctx)
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return s
}

func TestSchemaCurrentBeforeLoad(t *testing.T) {
	s := NewSchema(&fakeSource{}, zerolog.Nop(), time.Hour)
	if c := s.Current(); c == nil || c.Len() != 0 || c.Table([]byte("ks"), []byte("t")) != nil {
		t.Fatalf("Current before any load = %+v, want an empty snapshot", c)
	}
	if at := s.LoadedAt(); !at.IsZero() {
		t.Errorf("LoadedAt before any load = %v, want the zero time", at)
	}
	// Refresh without Run must not block, however often it is called.
	for range 100 {
		s.Refresh()
	}
}

func TestSchemaLoadsAtStartAndPeriodically(t *testing.T) {
	src := &fakeSource{}
	s := startSchema(t, src, 5*time.Millisecond, time.Millisecond)
	waitFor(t, "three loads", func() bool { return src.count() >= 3 })
	waitFor(t, "a snapshot of the third load", func() bool { return s.Current().Len() >= 3 })
}

func TestSchemaRefreshCoalesces(t *testing.T) {
	src := &fakeSource{gate: make(chan struct{})}
	s := startSchema(t, src, time.Hour, 20*time.Millisecond)
	src.gate <- struct{}{} // the load at start
	waitFor(t, "the first snapshot", func() bool { return s.Current().Len() == 1 })

	// A burst while idle gives one load.
	for range 1000 {
		s.Refresh()
	}
	src.gate <- struct{}{}
	waitFor(t, "the second snapshot", func() bool { return s.Current().Len() == 2 })

	// A burst during a load gives one more load after it.
	for range 1000 {
		s.Refresh()
	}
	waitFor(t, "the third load at the gate", func() bool {
		src.mu.Lock()
		defer src.mu.Unlock()
		return src.started == 3
	})
	for range 1000 {
		s.Refresh()
	}
	src.gate <- struct{}{}
	src.gate <- struct{}{}
	waitFor(t, "the fourth snapshot", func() bool { return s.Current().Len() == 4 })
	select {
	case src.gate <- struct{}{}:
		t.Fatal("a fifth load started")
	case <-time.After(100 * time.Millisecond):
	}
	if n := src.count(); n != 4 {
		t.Errorf("loads = %d, want 4", n)
	}
}

func TestSchemaRefreshDoesNotBlockDuringLoad(t *testing.T) {
	src := &fakeSource{gate: make(chan struct{})} // the load at start never finishes
	s := startSchema(t, src, time.Hour, 0)
	start := time.Now()
	for range 10000 {
		s.Refresh()
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("10000 Refresh calls took %v", d)
	}
}

func TestSchemaKeepsLastGoodSnapshot(t *testing.T) {
	src := &fakeSource{calls: make(chan int, 100)}
	s := startSchema(t, src, time.Hour, time.Millisecond)
	<-src.calls
	waitFor(t, "the first snapshot", func() bool { return s.Current().Len() == 1 })
	first := s.Current()
	loadedAt := s.LoadedAt()
	if loadedAt.IsZero() || s.Failures() != 0 {
		t.Fatalf("after the first load: LoadedAt %v, Failures %d", loadedAt, s.Failures())
	}

	src.setFail(true)
	s.Refresh()
	<-src.calls
	// The failed load must leave the snapshot alone; give Run time to
	// (wrongly) replace it.
	time.Sleep(20 * time.Millisecond)
	if s.Current() != first || s.LoadedAt() != loadedAt {
		t.Fatalf("a failed load replaced the snapshot")
	}
	waitFor(t, "the failure counted", func() bool { return s.Failures() >= 1 })

	// After a failure Run retries by itself, well before the hour.
	src.setFail(false)
	waitFor(t, "a retry", func() bool { return s.Current().Len() == 3 })
}

func TestSchemaRunStopsWithContext(t *testing.T) {
	src := &fakeSource{gate: make(chan struct{})} // the load at start never finishes
	s := NewSchema(src, zerolog.Nop(), time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		s.Run(ctx)
		close(done)
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

func TestRetryDelay(t *testing.T) {
	tests := []struct {
		failures int
		want     time.Duration
	}{
		{1, time.Second},
		{2, 2 * time.Second},
		{5, 16 * time.Second},
		{6, maxRetry},
		{100, maxRetry},
	}
	for _, tt := range tests {
		if got := retryDelay(tt.failures); got != tt.want {
			t.Errorf("retryDelay(%d) = %v, want %v", tt.failures, got, tt.want)
		}
	}
}

func TestUpstreamFilter(t *testing.T) {
	f, err := resolveUpstreams(context.Background(), []string{"127.0.0.2:9042", "[::1]:19042", "localhost:9043"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.2:9042", true},
		{"[::1]:19042", true},
		{"127.0.0.1:9043", true}, // localhost
		{"127.0.0.3:9042", false},
		{"127.0.0.2:9043", false},
	} {
		if got := f[tt.addr]; got != tt.want {
			t.Errorf("filter accepts %s = %v, want %v", tt.addr, got, tt.want)
		}
	}
	if _, err := resolveUpstreams(context.Background(), []string{"no-port"}); err == nil {
		t.Error("an upstream without a port was accepted")
	}
}
