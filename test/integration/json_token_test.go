package integration

// TestTokenJSONAndHints checks, against Cassandra itself, the partitions
// the proxy finds for the two request shapes that used to escape limits:
// INSERT ... JSON (a literal document and a bound one) and literals with a
// type hint. Each write's classification is compared with Cassandra's
// token(k) of the row it wrote.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/cqlguard/cqlguard/classify"
)

const jsonKeyspace = "cqlguard_json"

func TestTokenJSONAndHints(t *testing.T) {
	skipUnlessEnabled(t)
	observed.watch(jsonKeyspace)
	c := gocql.NewCluster(proxyAddr)
	c.Authenticator = gocql.PasswordAuthenticator{Username: user, Password: password}
	c.Timeout = 30 * time.Second
	c.Consistency = gocql.One
	s, err := c.CreateSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for _, q := range []string{
		"DROP KEYSPACE IF EXISTS " + jsonKeyspace,
		"CREATE KEYSPACE " + jsonKeyspace + " WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
	} {
		if err := s.Query(q).ExecContext(ctx); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// quoted: the JSON value is the literal's text as a JSON string.
	cases := []struct {
		typ    string
		gen    func(r *rand.Rand, i int) tokenValue
		quoted bool
	}{
		{"int", genInt(32), false},
		{"bigint", genInt(64), false},
		{"smallint", genInt(16), false},
		{"tinyint", genInt(8), false},
		{"varint", genVarint, false},
		{"boolean", genBool, false},
		{"text", genText(false, false), true},
		{"ascii", genText(true, false), true},
		{"uuid", genUUID(false), true},
		{"timeuuid", genUUID(true), true},
		{"timestamp", genTimestamp, true},
		{"date", genDate, true},
		{"time", genTime, true},
		{"inet", genInet, true},
		{"blob", genBlob(false), true},
	}
	for n, tc := range cases {
		t.Run(tc.typ, func(t *testing.T) {
			table := fmt.Sprintf("t_%s", tc.typ)
			full := jsonKeyspace + "." + table
			if err := s.Query(fmt.Sprintf("CREATE TABLE %s (k %s, id int, PRIMARY KEY (k, id))", full, tc.typ)).ExecContext(ctx); err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(uint64(n)+7, 9))
			probe := tc.gen(rand.New(rand.NewPCG(1, 1)), 1)
			waitForSchema(t, s, jsonKeyspace, table, fmt.Sprintf("SELECT id FROM %s WHERE k = %s", full, probe.lit))
			want := map[int]int64{} // the proxy's token, by id
			unpinned := 0
			write := func(id int, q string, args ...any) {
				observed.take(jsonKeyspace, table)
				if err := s.Query(q, args...).ExecContext(ctx); err != nil {
					return // a value Cassandra refuses: nothing was written
				}
				for _, o := range observed.take(jsonKeyspace, table) {
					if o.op != classify.OpWrite {
						continue
					}
					if !o.pinned || len(o.tokens) != 1 {
						unpinned++
						t.Logf("not pinned: %s %v", q, args)
						continue
					}
					want[id] = o.tokens[0]
				}
			}
			const count = 150
			for i := range count {
				v := tc.gen(r, i)
				if v.boundOnly {
					continue
				}
				jv := v.lit
				if tc.quoted {
					inner := v.lit
					switch {
					case strings.HasPrefix(inner, "$$"):
						inner = inner[2 : len(inner)-2]
					case strings.HasPrefix(inner, "'"):
						inner = strings.ReplaceAll(inner[1:len(inner)-1], "''", "'")
					}
					b, _ := json.Marshal(inner)
					jv = string(b)
				}
				if tc.typ == "timestamp" && !strings.HasPrefix(v.lit, "'") {
					jv = v.lit // milliseconds, as a JSON number
				}
				doc := fmt.Sprintf(`{"k": %s, "id": %d}`, jv, 3*i)
				write(3*i, fmt.Sprintf("INSERT INTO %s JSON '%s'", full, strings.ReplaceAll(doc, "'", "''")))
				write(3*i+1, fmt.Sprintf("INSERT INTO %s JSON ?", full), fmt.Sprintf(`{"k": %s, "id": %d}`, jv, 3*i+1))
				write(3*i+2, fmt.Sprintf("INSERT INTO %s (k, id) VALUES ((%s) %s, %d)", full, tc.typ, v.lit, 3*i+2))
			}
			got := map[int]int64{}
			iter := s.Query(fmt.Sprintf("SELECT token(k), id FROM %s", full)).PageSize(5000).IterContext(ctx)
			var tok int64
			var id int
			for iter.Scan(&tok, &id) {
				got[id] = tok
			}
			if err := iter.Close(); err != nil {
				t.Fatal(err)
			}
			mismatches := 0
			for id, tok := range got {
				if w, ok := want[id]; ok && w != tok {
					mismatches++
					if mismatches <= 5 {
						t.Errorf("id %d (%s): proxy token %d, Cassandra's %d", id, []string{"JSON literal", "JSON bound", "type hint"}[id%3], w, tok)
					}
				}
			}
			if mismatches > 0 || unpinned > 0 || len(got) < count {
				t.Errorf("%s: %d rows, %d pinned, %d mismatched, %d writes not pinned", tc.typ, len(got), len(want), mismatches, unpinned)
			}
			t.Logf("%s: %d rows written as JSON literal, JSON bound and type-hinted literal; %d pinned, tokens equal to Cassandra's", tc.typ, len(got), len(want))
		})
	}
}
