package integration

import (
	"context"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/schema"
	"github.com/cqlguard/cqlguard/schema/loader"
)

const schemaKeyspace = "cqlguard_schema"

// schemaDDL creates tables whose partition keys cover what the proxy must
// serialize: one column, several of mixed types, frozen collections,
// tuples, user types nested in user types, counters, and quoted mixed-case
// names.
var schemaDDL = []string{
	`DROP KEYSPACE IF EXISTS ` + schemaKeyspace,
	`CREATE KEYSPACE ` + schemaKeyspace + ` WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}`,
	`CREATE TYPE ` + schemaKeyspace + `.address (street text, zip int)`,
	`CREATE TYPE ` + schemaKeyspace + `.person (name text, home frozen<address>)`,
	`CREATE TYPE ` + schemaKeyspace + `."MixedType" ("Field" int, plain text)`,
	`CREATE TABLE ` + schemaKeyspace + `.simple (k int PRIMARY KEY, v text)`,
	`CREATE TABLE ` + schemaKeyspace + `.composite (zeta text, alpha bigint, mid uuid, c int, v text, PRIMARY KEY ((zeta, alpha, mid), c))`,
	`CREATE TABLE ` + schemaKeyspace + `.frozen_coll (k frozen<map<text, frozen<list<int>>>>, s frozen<set<timeuuid>>, v int, PRIMARY KEY ((k, s)))`,
	`CREATE TABLE ` + schemaKeyspace + `.tuple_key (k tuple<int, text, frozen<list<blob>>> PRIMARY KEY, v int)`,
	`CREATE TABLE ` + schemaKeyspace + `.udt_key (k frozen<person> PRIMARY KEY, v int)`,
	`CREATE TABLE ` + schemaKeyspace + `.counts (k text PRIMARY KEY, n counter)`,
	`CREATE TABLE ` + schemaKeyspace + `."MixedCase" ("PartKey" text, "Other" frozen<"MixedType">, "Clust" int, v int, PRIMARY KEY (("PartKey", "Other"), "Clust"))`,
}

// keyOf renders a table's partition key as "name type, ..." with a counter
// mark, for comparison.
func keyOf(t *schema.Table) string {
	if t == nil {
		return "<missing>"
	}
	cols := make([]string, len(t.PartitionKey))
	for i, c := range t.PartitionKey {
		cols[i] = c.Name + " " + c.Type.String()
	}
	s := strings.Join(cols, ", ")
	if t.Counter {
		s += " (counter)"
	}
	return s
}

func dialSchema(t *testing.T) *gocql.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := loader.Dial(ctx, loader.DialConfig{
		Upstreams: []string{cassandraAddr},
		Username:  user,
		Password:  password,
		Timeout:   20 * time.Second,
	})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestSchemaLoad(t *testing.T) {
	skipUnlessEnabled(t)
	session := dialSchema(t)
	for _, stmt := range schemaDDL {
		if err := session.Query(stmt).Exec(); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}

	l := loader.New(session)
	ctx := context.Background()
	var (
		snap  *schema.Snapshot
		times []time.Duration
	)
	for range 5 {
		start := time.Now()
		var err error
		snap, err = l.Load(ctx)
		times = append(times, time.Since(start))
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
	}
	slices.Sort(times)
	t.Logf("Load of %d tables: min %v, median %v, max %v", snap.Len(), times[0], times[len(times)/2], times[len(times)-1])

	want := map[string]string{
		"simple":      "k int",
		"composite":   "zeta text, alpha bigint, mid uuid",
		"frozen_coll": "k frozen<map<text, frozen<list<int>>>>, s frozen<set<timeuuid>>",
		"tuple_key":   "k frozen<tuple<int, text, frozen<list<blob>>>>",
		"udt_key":     "k frozen<person>",
		"counts":      "k text (counter)",
		"MixedCase":   `PartKey text, Other frozen<"MixedType">`,
	}
	for name, key := range want {
		if got := keyOf(snap.Table([]byte(schemaKeyspace), []byte(name))); got != key {
			t.Errorf("%s: partition key %q, want %q", name, got, key)
		}
	}
	for _, tb := range snap.Tables() {
		if tb.Keyspace == schemaKeyspace && want[tb.Name] == "" {
			t.Errorf("unexpected table %s.%s", tb.Keyspace, tb.Name)
		}
		if tb.RateLimit != (schema.RateLimit{}) {
			t.Errorf("%s.%s has a rate limit %+v on Cassandra", tb.Keyspace, tb.Name, tb.RateLimit)
		}
	}
	if snap.Table([]byte(schemaKeyspace), []byte("mixedcase")) != nil {
		t.Error("lookup of a quoted name ignored case")
	}
	if got := keyOf(snap.Table([]byte("system_schema"), []byte("columns"))); got != "keyspace_name text" {
		t.Errorf("system_schema.columns: partition key %q", got)
	}

	// The user types are resolved to their fields, nested ones included.
	if tb := snap.Table([]byte(schemaKeyspace), []byte("udt_key")); tb != nil {
		person := tb.PartitionKey[0].Type
		if person.Kind != schema.UDT || person.Keyspace != schemaKeyspace || !slices.Equal(person.Fields, []string{"name", "home"}) {
			t.Fatalf("person = %+v", person)
		}
		home := person.Elems[1]
		if home.Kind != schema.UDT || home.Name != "address" || !home.Frozen || !slices.Equal(home.Fields, []string{"street", "zip"}) ||
			home.Elems[0].Kind != schema.Text || home.Elems[1].Kind != schema.Int {
			t.Errorf("person.home = %+v", home)
		}
	}
	if tb := snap.Table([]byte(schemaKeyspace), []byte("MixedCase")); tb != nil {
		if mt := tb.PartitionKey[1].Type; mt.Kind != schema.UDT || mt.Name != "MixedType" || !slices.Equal(mt.Fields, []string{"Field", "plain"}) {
			t.Errorf("MixedType = %+v", mt)
		}
	}
}

func TestSchemaRefresh(t *testing.T) {
	skipUnlessEnabled(t)
	session := dialSchema(t)
	exec := func(stmt string) {
		t.Helper()
		if err := session.Query(stmt).Exec(); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	for _, stmt := range []string{
		`CREATE KEYSPACE IF NOT EXISTS ` + schemaKeyspace + ` WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}`,
		`DROP TABLE IF EXISTS ` + schemaKeyspace + `.refresh_new`,
		`DROP TABLE IF EXISTS ` + schemaKeyspace + `.refresh_udt`,
		`DROP TABLE IF EXISTS ` + schemaKeyspace + `.refresh_gone`,
		`DROP TYPE IF EXISTS ` + schemaKeyspace + `.refresh_point`,
		`CREATE TYPE ` + schemaKeyspace + `.refresh_point (x int)`,
		`CREATE TABLE ` + schemaKeyspace + `.refresh_udt (p frozen<refresh_point> PRIMARY KEY)`,
		`CREATE TABLE ` + schemaKeyspace + `.refresh_gone (k int PRIMARY KEY)`,
	} {
		exec(stmt)
	}

	level := zerolog.WarnLevel
	if os.Getenv("CQLGUARD_DEBUG") == "1" {
		level = zerolog.DebugLevel
	}
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).Level(level).With().Timestamp().Logger()
	// An hour between periodic loads: only Refresh can explain a change.
	src := &countingSource{src: loader.New(session)}
	s := loader.NewSchema(src, log, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		s.Run(ctx)
		close(done)
	}()
	defer func() {
		cancel()
		<-done
	}()

	ks := []byte(schemaKeyspace)
	waitSchema := func(what string, cond func(*schema.Snapshot) bool) {
		t.Helper()
		start := time.Now()
		for !cond(s.Current()) {
			if time.Since(start) > 5*time.Second {
				t.Fatalf("%s: not seen within 5s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("%s: seen after %v", what, time.Since(start).Round(time.Millisecond))
	}
	waitSchema("first load", func(snap *schema.Snapshot) bool {
		return snap.Table(ks, []byte("refresh_gone")) != nil
	})

	// A DDL storm, as a migration would run; the proxy calls Refresh for
	// each SCHEMA_CHANGE it forwards. (Cassandra refuses to add fields to a
	// user type in a partition key, but lets them be renamed.)
	for _, stmt := range []string{
		`CREATE TABLE ` + schemaKeyspace + `.refresh_new (a text, b int, c int, PRIMARY KEY ((b, a), c))`,
		`ALTER TYPE ` + schemaKeyspace + `.refresh_point RENAME x TO y`,
		`DROP TABLE ` + schemaKeyspace + `.refresh_gone`,
	} {
		exec(stmt)
		s.Refresh()
	}
	waitSchema("the changes", func(snap *schema.Snapshot) bool {
		udt := snap.Table(ks, []byte("refresh_udt"))
		return keyOf(snap.Table(ks, []byte("refresh_new"))) == "b int, a text" &&
			snap.Table(ks, []byte("refresh_gone")) == nil &&
			udt != nil && slices.Equal(udt.PartitionKey[0].Type.Fields, []string{"y"})
	})
	// Three statements, each answered only once the cluster agrees on the
	// schema, give at most three loads after the first; usually fewer.
	if n := src.loads.Load(); n < 2 || n > 4 {
		t.Errorf("%d loads, want 2 to 4", n)
	} else {
		t.Logf("%d loads in all", n)
	}
}

// countingSource counts the loads a Schema makes.
type countingSource struct {
	src   loader.Source
	loads atomic.Int32
}

func (c *countingSource) Load(ctx context.Context) (*schema.Snapshot, error) {
	c.loads.Add(1)
	return c.src.Load(ctx)
}

func TestSchemaDialRefusesBadPassword(t *testing.T) {
	skipUnlessEnabled(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := loader.Dial(ctx, loader.DialConfig{
		Upstreams: []string{cassandraAddr},
		Username:  user,
		Password:  "wrong",
		Timeout:   10 * time.Second,
	})
	if err == nil {
		s.Close()
		t.Fatal("Dial with a wrong password succeeded")
	}
	t.Logf("Dial: %v", err)
}
