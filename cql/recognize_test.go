package cql

import (
	"fmt"
	"strings"
	"testing"
)

// want describes a recognised statement compactly: kind, keyspace, table,
// and restrictions as "col=term|term" with terms written as lit:TEXT, ?N,
// :name or other; a trailing ! marks a column that pins nothing.
type recognizeCase struct {
	q       string
	kind    StatementKind
	ks, tbl string
	rs      string // "a=lit:1 b=?0|?1 c!"
	lwt     bool
	markers int
}

func describe(s *Statement) string {
	var parts []string
	for _, r := range s.Restrictions {
		var terms []string
		for _, t := range r.Terms {
			switch t.Kind {
			case TermLiteral:
				terms = append(terms, "lit:"+strings.Join(strings.Fields(string(t.Text)), " "))
			case TermPositional:
				terms = append(terms, fmt.Sprint("?", t.Index))
			case TermNamed:
				terms = append(terms, ":"+string(t.Text))
			default:
				terms = append(terms, "other")
			}
		}
		p := string(r.Column)
		if len(terms) > 0 {
			p += "=" + strings.Join(terms, "|")
		}
		if !r.Pinned {
			p += "!"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, " ")
}

var recognizeCases = []recognizeCase{
	// SELECT
	{q: "SELECT * FROM ks.t WHERE k = 1", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:1"},
	{q: "select * from t where k = 'a''b'", kind: StmtSelect, tbl: "t", rs: "k=lit:'a''b'"},
	{q: "SELECT a, b FROM ks.t WHERE k = ? AND c = ?", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=?0 c=?1", markers: 2},
	{q: "SELECT * FROM ks.t WHERE k IN (1, 2, 3)", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:1|lit:2|lit:3"},
	{q: "SELECT * FROM ks.t WHERE k IN ?", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k!", markers: 1},
	{q: "SELECT * FROM ks.t WHERE k IN ()", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k"},
	{q: "SELECT * FROM ks.t WHERE k = :key", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=:key", markers: 1},
	{q: `SELECT * FROM ks.t WHERE k = :"Key"`, kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=:Key", markers: 1},
	{q: `SELECT * FROM "Ks"."T" WHERE "K" = 1`, kind: StmtSelect, ks: "Ks", tbl: "T", rs: "K=lit:1"},
	{q: `SELECT * FROM "my""ks".t WHERE k = 1`, kind: StmtSelect, ks: `my"ks`, tbl: "t", rs: "k=lit:1"},
	{q: "SELECT * FROM KS.T WHERE K = 1", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:1"},
	{q: "SELECT * FROM ks.t", kind: StmtSelect, ks: "ks", tbl: "t"},
	{q: "SELECT * FROM ks.t LIMIT 10", kind: StmtSelect, ks: "ks", tbl: "t"},
	{q: "SELECT * FROM ks.t WHERE token(k) > 100", kind: StmtSelect, ks: "ks", tbl: "t"},
	{q: "SELECT * FROM ks.t WHERE token(k) > ? AND token(k) <= ?", kind: StmtSelect, ks: "ks", tbl: "t", markers: 2},
	{q: "SELECT * FROM ks.t WHERE k > 5", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k!"},
	{q: "SELECT * FROM ks.t WHERE k = 1 AND c > 5 AND c <= ?", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:1 c! c!", markers: 1},
	{q: "SELECT * FROM ks.t WHERE k = 1 AND (c1, c2) > (1, 2)", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:1"},
	{q: "SELECT * FROM ks.t WHERE k = 1 AND (c1, c2) IN ((1, 2), (3, ?))", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:1", markers: 1},
	{q: "SELECT * FROM ks.t WHERE v = 3 ALLOW FILTERING", kind: StmtSelect, ks: "ks", tbl: "t", rs: "v=lit:3"},
	{q: "SELECT * FROM ks.t WHERE tags CONTAINS 'x'", kind: StmtSelect, ks: "ks", tbl: "t", rs: "tags!"},
	{q: "SELECT * FROM ks.t WHERE m CONTAINS KEY 'x'", kind: StmtSelect, ks: "ks", tbl: "t", rs: "m!"},
	{q: "SELECT * FROM ks.t WHERE k = 1 AND k = 2", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:1! k=lit:2!"},
	{q: "SELECT count(*) FROM ks.t WHERE k = 1", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:1"},
	{q: "SELECT token(k), writetime(v) FROM ks.t WHERE k = 1", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:1"},
	{q: "SELECT JSON * FROM ks.t WHERE k = 1", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:1"},
	{q: "SELECT DISTINCT k FROM ks.t", kind: StmtSelect, ks: "ks", tbl: "t"},
	{q: "SELECT * FROM ks.t WHERE k = 1 ORDER BY c DESC LIMIT ?", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:1", markers: 1},
	{q: "SELECT * FROM ks.t WHERE k = 1 PER PARTITION LIMIT 2", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:1"},
	{q: "SELECT * FROM ks.t WHERE k = now()", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=other!"},
	{q: "SELECT * FROM ks.t WHERE k = toTimestamp(now())", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=other!"},
	{q: "SELECT * FROM ks.t WHERE k = 1 + 2", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=other!"},
	{q: "SELECT * FROM ks.t WHERE k = (int) 3", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:3"},
	{q: "SELECT * FROM ks.t WHERE k = (bigint) -5", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:-5"},
	{q: "SELECT * FROM ks.t WHERE k = (frozen<list<int>>) [1, 2]", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:[1, 2]"},
	{q: "SELECT * FROM ks.t WHERE k IN ((int) 1, (int) 2)", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:1|lit:2"},
	{q: "SELECT * FROM ks.t WHERE k = (int) ?", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=?0", markers: 1},
	{q: "SELECT * FROM ks.t WHERE k = (int) now()", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=other!"},
	{q: "SELECT * FROM ks.t WHERE k = (int) 3 + 1", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=other!"},
	{q: "INSERT INTO ks.t (k, v) VALUES ((bigint) 42, 'x')", kind: StmtInsert, ks: "ks", tbl: "t", rs: "k=lit:42 v=lit:'x'"},
	{q: "SELECT * FROM ks.t WHERE k = -5", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:-5"},
	{q: "SELECT * FROM ks.t WHERE k = -NaN", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:-NaN"},
	{q: "SELECT * FROM ks.t WHERE k = Infinity", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:Infinity"},
	{q: "SELECT * FROM ks.t WHERE k = 1.5e-3", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:1.5e-3"},
	{q: "SELECT * FROM ks.t WHERE k = .5", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:.5"},
	{q: "SELECT * FROM ks.t WHERE k = 0xCAFE", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:0xCAFE"},
	{q: "SELECT * FROM ks.t WHERE k = 123e4567-e89b-12d3-a456-426614174000", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:123e4567-e89b-12d3-a456-426614174000"},
	{q: "SELECT * FROM ks.t WHERE k = e7d1ab00-0000-1000-8000-000000000000", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:e7d1ab00-0000-1000-8000-000000000000"},
	{q: "SELECT * FROM ks.t WHERE k = true", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:true"},
	{q: "SELECT * FROM ks.t WHERE k = $$it's$$", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:$$it's$$"},
	{q: "SELECT * FROM ks.t WHERE k = [1, 2]", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:[1, 2]"},
	{q: "SELECT * FROM ks.t WHERE k = {1, 2}", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:{1, 2}"},
	{q: "SELECT * FROM ks.t WHERE k = {'a': 1, 'b': 2}", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:{'a': 1, 'b': 2}"},
	{q: "SELECT * FROM ks.t WHERE k = (1, 'x')", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:(1, 'x')"},
	{q: "SELECT * FROM ks.t WHERE k = {f1: 1, f2: 'x'}", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:{f1: 1, f2: 'x'}"},
	{q: "SELECT * FROM ks.t WHERE k = [1, ?]", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=other!", markers: 1},
	{q: "SELECT * FROM ks.t WHERE k = 1h30m", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:1h30m"},
	{q: "SELECT * FROM ks.t WHERE k = null", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:null"},
	{q: "  -- leading comment\n SELECT /* c */ * FROM ks.t // trailing\n WHERE k = 1", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:1"},
	{q: "SELECT * FROM ks.t WHERE k = 1;", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=lit:1"},
	{q: "SELECT * FROM ks.t WHERE a = 1 AND b = 'x' AND c = ?", kind: StmtSelect, ks: "ks", tbl: "t", rs: "a=lit:1 b=lit:'x' c=?0", markers: 1},
	{q: "SELECT * FROM ks.t WHERE a IN (1, 2) AND b IN ('x', ?)", kind: StmtSelect, ks: "ks", tbl: "t", rs: "a=lit:1|lit:2 b=lit:'x'|?0", markers: 1},
	{q: "SELECT * FROM ks.t WHERE a = ? AND b = ? AND c IN (?, ?)", kind: StmtSelect, ks: "ks", tbl: "t", rs: "a=?0 b=?1 c=?2|?3", markers: 4},
	{q: "SELECT ? FROM ks.t WHERE k = ?", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k=?1", markers: 2},
	{q: "SELECT * FROM ks.t WHERE v LIKE 'a%'", kind: StmtSelect, ks: "ks", tbl: "t", rs: "v!"},
	{q: "SELECT * FROM ks.t WHERE k != 1", kind: StmtSelect, ks: "ks", tbl: "t", rs: "k!"},
	{q: "SELECT * FROM system.local WHERE key='local'", kind: StmtSelect, ks: "system", tbl: "local", rs: "key=lit:'local'"},
	{q: "SELECT peer, data_center, host_id, rack, release_version, rpc_address, schema_version, tokens FROM system.peers", kind: StmtSelect, ks: "system", tbl: "peers"},
	{q: "SELECT * FROM system.peers_v2", kind: StmtSelect, ks: "system", tbl: "peers_v2"},
	{q: "SELECT schema_version FROM system.local WHERE key='local'", kind: StmtSelect, ks: "system", tbl: "local", rs: "key=lit:'local'"},
	{q: "SELECT * FROM system_schema.keyspaces", kind: StmtSelect, ks: "system_schema", tbl: "keyspaces"},
	{q: "SELECT * FROM system_schema.tables WHERE keyspace_name = 'ks'", kind: StmtSelect, ks: "system_schema", tbl: "tables", rs: "keyspace_name=lit:'ks'"},
	{q: "SELECT * FROM system_schema.columns WHERE keyspace_name = ? AND table_name = ?", kind: StmtSelect, ks: "system_schema", tbl: "columns", rs: "keyspace_name=?0 table_name=?1", markers: 2},
	{q: "SELECT * FROM system_virtual_schema.keyspaces", kind: StmtSelect, ks: "system_virtual_schema", tbl: "keyspaces"},
	{q: "SELECT cluster_name, release_version FROM system.local", kind: StmtSelect, ks: "system", tbl: "local"},
	{q: "SELECT * FROM system_traces.sessions WHERE session_id = 7d4b2e00-0000-1000-8000-000000000000", kind: StmtSelect, ks: "system_traces", tbl: "sessions", rs: "session_id=lit:7d4b2e00-0000-1000-8000-000000000000"},
	{q: "SELECT * FROM ks.t WHERE", kind: StmtOther},
	{q: "SELECT * FROM", kind: StmtOther},
	{q: "SELECT * ks.t", kind: StmtOther},
	{q: "SELECT * FROM ks.t WHERE k = 'unterminated", kind: StmtOther},
	{q: "SELECT * FROM ks.t WHERE k IN (1, 2", kind: StmtOther},
	{q: "SELECT * FROM ks.t WHERE k", kind: StmtOther},

	// INSERT
	{q: "INSERT INTO ks.t (k, v) VALUES (1, 'x')", kind: StmtInsert, ks: "ks", tbl: "t", rs: "k=lit:1 v=lit:'x'"},
	{q: "insert into t (k, v) values (?, ?)", kind: StmtInsert, tbl: "t", rs: "k=?0 v=?1", markers: 2},
	{q: "INSERT INTO ks.t (a, b, c) VALUES (:a, :b, :c)", kind: StmtInsert, ks: "ks", tbl: "t", rs: "a=:a b=:b c=:c", markers: 3},
	{q: "INSERT INTO ks.t (k, v) VALUES (1, 'x') IF NOT EXISTS", kind: StmtInsert, ks: "ks", tbl: "t", rs: "k=lit:1 v=lit:'x'", lwt: true},
	{q: "INSERT INTO ks.t (k, v) VALUES (1, 'x') USING TTL 10", kind: StmtInsert, ks: "ks", tbl: "t", rs: "k=lit:1 v=lit:'x'"},
	{q: "INSERT INTO ks.t (k, v) VALUES (?, ?) USING TTL ? AND TIMESTAMP ?", kind: StmtInsert, ks: "ks", tbl: "t", rs: "k=?0 v=?1", markers: 4},
	{q: "INSERT INTO ks.t (k, v) VALUES (uuid(), 'x')", kind: StmtInsert, ks: "ks", tbl: "t", rs: "k=other! v=lit:'x'"},
	{q: "INSERT INTO ks.t (k, v) VALUES (now(), ?)", kind: StmtInsert, ks: "ks", tbl: "t", rs: "k=other! v=?0", markers: 1},
	{q: "INSERT INTO ks.t (k, l) VALUES (1, [1, 2, 3])", kind: StmtInsert, ks: "ks", tbl: "t", rs: "k=lit:1 l=lit:[1, 2, 3]"},
	{q: `INSERT INTO "Ks"."Tab" ("Key", v) VALUES (1, 2)`, kind: StmtInsert, ks: "Ks", tbl: "Tab", rs: "Key=lit:1 v=lit:2"},
	{q: "INSERT INTO ks.t JSON '{\"k\": 1, \"v\": \"x\"}'", kind: StmtInsert, ks: "ks", tbl: "t"},
	{q: "INSERT INTO ks.t JSON ?", kind: StmtInsert, ks: "ks", tbl: "t", markers: 1},
	{q: "INSERT INTO ks.t (k, v) VALUES (1)", kind: StmtOther},
	{q: "INSERT INTO ks.t (k) VALUES (1, 2)", kind: StmtOther},
	{q: "INSERT INTO ks.t VALUES (1)", kind: StmtOther},
	{q: "INSERT ks.t (k) VALUES (1)", kind: StmtOther},

	// UPDATE
	{q: "UPDATE ks.t SET v = 'x' WHERE k = 1", kind: StmtUpdate, ks: "ks", tbl: "t", rs: "k=lit:1"},
	{q: "UPDATE ks.t SET v = ? WHERE k = ?", kind: StmtUpdate, ks: "ks", tbl: "t", rs: "k=?1", markers: 2},
	{q: "UPDATE ks.t USING TTL ? SET v = ?, w = w + ? WHERE k = ? AND c = ?", kind: StmtUpdate, ks: "ks", tbl: "t", rs: "k=?3 c=?4", markers: 5},
	{q: "UPDATE ks.t SET v = 'x' WHERE k = 1 IF v = 'y'", kind: StmtUpdate, ks: "ks", tbl: "t", rs: "k=lit:1", lwt: true},
	{q: "UPDATE ks.t SET v = 'x' WHERE k = 1 IF EXISTS", kind: StmtUpdate, ks: "ks", tbl: "t", rs: "k=lit:1", lwt: true},
	{q: "UPDATE ks.counters SET n = n + 1 WHERE k = 'a'", kind: StmtUpdate, ks: "ks", tbl: "counters", rs: "k=lit:'a'"},
	{q: "UPDATE ks.t SET m['key'] = ? WHERE k IN (1, 2)", kind: StmtUpdate, ks: "ks", tbl: "t", rs: "k=lit:1|lit:2", markers: 1},
	{q: "UPDATE ks.t SET l = l + [1] WHERE k = :k", kind: StmtUpdate, ks: "ks", tbl: "t", rs: "k=:k", markers: 1},
	{q: "UPDATE ks.t SET v = 1", kind: StmtOther},

	// DELETE
	{q: "DELETE FROM ks.t WHERE k = 1", kind: StmtDelete, ks: "ks", tbl: "t", rs: "k=lit:1"},
	{q: "DELETE v, w FROM ks.t WHERE k = ?", kind: StmtDelete, ks: "ks", tbl: "t", rs: "k=?0", markers: 1},
	{q: "DELETE m[?] FROM ks.t USING TIMESTAMP ? WHERE k = ?", kind: StmtDelete, ks: "ks", tbl: "t", rs: "k=?2", markers: 3},
	{q: "DELETE FROM ks.t WHERE k = 1 IF EXISTS", kind: StmtDelete, ks: "ks", tbl: "t", rs: "k=lit:1", lwt: true},
	{q: "DELETE FROM ks.t WHERE k = 1 AND c > 3", kind: StmtDelete, ks: "ks", tbl: "t", rs: "k=lit:1 c!"},
	{q: "DELETE FROM ks.t", kind: StmtOther},

	// USE and others
	{q: "USE ks", kind: StmtUse, ks: "ks"},
	{q: `USE "MyKs"`, kind: StmtUse, ks: "MyKs"},
	{q: "use KS;", kind: StmtUse, ks: "ks"},
	{q: "BEGIN BATCH INSERT INTO ks.t (k) VALUES (1) APPLY BATCH", kind: StmtBatch},
	{q: "CREATE TABLE ks.t (k int PRIMARY KEY)", kind: StmtOther},
	{q: "CREATE KEYSPACE ks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}", kind: StmtOther},
	{q: "DROP TABLE ks.t", kind: StmtOther},
	{q: "ALTER TABLE ks.t ADD v int", kind: StmtOther},
	// A ':' in a map or user type literal separates; a marker inside one
	// still counts, so later markers keep their positions.
	{q: "INSERT INTO ks.t (m, k) VALUES ({'a':1}, ?)", kind: StmtInsert, ks: "ks", tbl: "t", rs: "m=lit:{'a':1} k=?0", markers: 1},
	{q: "INSERT INTO ks.t (u, k) VALUES ({f:true,g:x}, ?)", kind: StmtInsert, ks: "ks", tbl: "t", rs: "u=lit:{f:true,g:x} k=?0", markers: 1},
	{q: "INSERT INTO ks.t (m, k) VALUES ({'a': :v}, ?)", kind: StmtInsert, ks: "ks", tbl: "t", rs: "m=other! k=?1", markers: 2},
	{q: "UPDATE ks.t SET m = {:a : :b, 'c': [:d]} WHERE k = ?", kind: StmtUpdate, ks: "ks", tbl: "t", rs: "k=?3", markers: 4},
	{q: "INSERT INTO ks.t (s, k) VALUES ({(int) :x}, ?)", kind: StmtInsert, ks: "ks", tbl: "t", rs: "s=other! k=?1", markers: 2},
	{q: "INSERT INTO ks.t (m, k) VALUES ({'a': (int) :x}, ?)", kind: StmtInsert, ks: "ks", tbl: "t", rs: "m=other! k=?1", markers: 2},
	{q: "UPDATE ks.t SET m = {'a': (bigint) :x} WHERE k = ?", kind: StmtUpdate, ks: "ks", tbl: "t", rs: "k=?1", markers: 2},
	{q: "INSERT INTO ks.t (m, k) VALUES ({(1, 2): 3}, ?)", kind: StmtInsert, ks: "ks", tbl: "t", rs: "m=lit:{(1, 2): 3} k=?0", markers: 1},
	{q: "INSERT INTO ks.t (m, k) VALUES ({(true, x): 3}, ?)", kind: StmtInsert, ks: "ks", tbl: "t", rs: "m=lit:{(true, x): 3} k=?0", markers: 1},
	{q: "TRUNCATE ks.t", kind: StmtOther},
	{q: "CREATE INDEX ON ks.t (v)", kind: StmtOther},
	{q: "GRANT SELECT ON ks.t TO role", kind: StmtOther},
	{q: "LIST ROLES", kind: StmtOther},
	{q: "", kind: StmtOther},
	{q: "   ", kind: StmtOther},
	{q: "/* only a comment */", kind: StmtOther},
	{q: "SELEC nonsense", kind: StmtOther},
}

// recognizeVariants multiplies the cases: the same statements with keywords
// in other cases, extra white space and comments must read the same.
func recognizeVariants() []recognizeCase {
	out := append([]recognizeCase(nil), recognizeCases...)
	for _, c := range recognizeCases {
		if c.kind == StmtOther || strings.ContainsAny(c.q, "\"$") || strings.Contains(c.q, "--") {
			continue
		}
		upper := c
		upper.q = strings.NewReplacer("SELECT", "SeLeCt", "select", "SELECT", "FROM", "from", "WHERE", "wHeRe",
			"INSERT", "insert", "UPDATE", "update", "DELETE", "Delete", " AND ", " and ", " IN ", " in ").Replace(c.q)
		out = append(out, upper)
		spaced := c
		spaced.q = "/* hint */\n\t" + strings.ReplaceAll(c.q, " ", "  \n ") + " -- done"
		out = append(out, spaced)
	}
	return out
}

func TestRecognize(t *testing.T) {
	cases := recognizeVariants()
	if len(cases) < 200 {
		t.Fatalf("only %d statements", len(cases))
	}
	var r Recognizer
	for _, c := range cases {
		s := r.Recognize([]byte(c.q))
		if s.Kind != c.kind {
			t.Errorf("%q: kind %d, want %d", c.q, s.Kind, c.kind)
			continue
		}
		if c.kind == StmtOther || c.kind == StmtBatch {
			continue
		}
		if string(s.Keyspace) != c.ks || string(s.Table) != c.tbl {
			t.Errorf("%q: table %q.%q, want %q.%q", c.q, s.Keyspace, s.Table, c.ks, c.tbl)
		}
		if got := describe(s); got != c.rs {
			t.Errorf("%q: restrictions %q, want %q", c.q, got, c.rs)
		}
		if s.LWT != c.lwt {
			t.Errorf("%q: LWT %v", c.q, s.LWT)
		}
		if c.kind != StmtUse && s.Markers != c.markers {
			t.Errorf("%q: %d markers, want %d", c.q, s.Markers, c.markers)
		}
	}
}

func TestRecognizeBatchText(t *testing.T) {
	var r Recognizer
	q := "BEGIN UNLOGGED BATCH USING TIMESTAMP ? " +
		"INSERT INTO ks.t (k, v) VALUES (?, 'a'); " +
		"UPDATE ks.u SET v = ? WHERE k = 7; " +
		"DELETE FROM t WHERE k IN (1, ?) " +
		"APPLY BATCH"
	var got []string
	ok := r.Statements([]byte(q), func(s *Statement) {
		got = append(got, fmt.Sprintf("%d %s.%s %s m%d", s.Kind, s.Keyspace, s.Table, describe(s), s.Markers))
	})
	want := []string{
		"2 ks.t k=?1 v=lit:'a' m1",
		"3 ks.u k=lit:7 m1",
		"4 .t k=lit:1|?3 m1",
	}
	if !ok || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r.Statements([]byte("SELECT * FROM ks.t"), func(*Statement) {}) {
		t.Error("a SELECT is not a batch")
	}
}

func TestRecognizeNoAllocation(t *testing.T) {
	var r Recognizer
	qs := [][]byte{
		[]byte("SELECT * FROM ks.t WHERE a = ? AND b = 'x' AND c IN (1, 2, 3)"),
		[]byte(`INSERT INTO "Ks".Tab (K, v) VALUES (123e4567-e89b-12d3-a456-426614174000, 'x') USING TTL 5`),
	}
	for _, q := range qs {
		r.Recognize(q)
		if n := testing.AllocsPerRun(200, func() { r.Recognize(q) }); n != 0 {
			t.Errorf("%q: %v allocations", q, n)
		}
	}
}

func BenchmarkRecognizeSelect(b *testing.B) {
	var r Recognizer
	q := []byte("SELECT v FROM ks.kv WHERE k = 'user:12345' AND c = 42")
	b.ReportAllocs()
	for b.Loop() {
		r.Recognize(q)
	}
}

func BenchmarkRecognizeInsert(b *testing.B) {
	var r Recognizer
	q := []byte("INSERT INTO ks.kv (k, c, v) VALUES ('user:12345', 42, 'some value') USING TTL 3600")
	b.ReportAllocs()
	for b.Loop() {
		r.Recognize(q)
	}
}

func FuzzRecognize(f *testing.F) {
	for _, c := range recognizeCases {
		f.Add(c.q)
	}
	f.Fuzz(func(t *testing.T, q string) {
		var r Recognizer
		s := r.Recognize([]byte(q))
		for _, rs := range s.Restrictions {
			for _, term := range rs.Terms {
				if term.Kind == TermPositional && term.Index >= s.Markers {
					t.Fatalf("marker %d of %d", term.Index, s.Markers)
				}
			}
		}
		r.Statements([]byte(q), func(*Statement) {})
	})
}

func TestFrom(t *testing.T) {
	tests := []struct {
		q       string
		ks, tbl string
		ok      bool
	}{
		{"SELECT * FROM system.local WHERE key='local'", "system", "local", true},
		{"select peer, rpc_address from system.peers", "system", "peers", true},
		{"SELECT * FROM system.peers_v2", "system", "peers_v2", true},
		{"SELECT * FROM system.local WHERE key='local' USING TIMEOUT 30000ms", "system", "local", true},
		{"  /* c */ SeLeCt schema_version FrOm \"system\".\"local\" -- x", "system", "local", true},
		{"SELECT * FROM System.Local", "system", "local", true},
		{"SELECT * FROM system.\"Local\"", "system", "Local", true},
		{"SELECT token(k) FROM ks.t", "ks", "t", true},
		{"SELECT count(*) FROM t", "", "t", true},
		{"SELECT 'from x' AS a FROM ks.t", "ks", "t", true},
		{"SELECT fromage FROM ks.t", "ks", "t", true},
		{"SELECT * FROM ks.t WHERE k ~ nonsense", "ks", "t", true},
		{"SELECT * FROM \"Ks\".\"My\"\"T\"", "Ks", "My\"T", true},
		{"INSERT INTO system.local (key) VALUES ('x')", "", "", false},
		{"SELECTx FROM t", "", "", false},
		{"SELECT * FROM", "", "", false},
		{"", "", "", false},
	}
	var r Recognizer
	for _, tt := range tests {
		r.Recognize([]byte(tt.q))
		ks, tbl, ok := r.From()
		if ok != tt.ok || string(ks) != tt.ks || string(tbl) != tt.tbl {
			t.Errorf("From(%q) = %q, %q, %v; want %q, %q, %v", tt.q, ks, tbl, ok, tt.ks, tt.tbl, tt.ok)
		}
	}
}
