package cql

import (
	"bytes"
	"testing"
)

func TestWithoutTimeout(t *testing.T) {
	tests := []struct {
		q, want string // want is "" when the text keeps its clause
	}{
		{"SELECT * FROM system.local USING TIMEOUT 30000ms", "SELECT * FROM system.local"},
		{"select keyspace_name from system_schema.keyspaces using timeout 1m30s;", "select keyspace_name from system_schema.keyspaces"},
		{"SELECT * FROM system.peers\n  USING\tTIMEOUT  5s ; \n", "SELECT * FROM system.peers"},
		{"SELECT * FROM system.local WHERE key = 'local' /* c */ USING TIMEOUT 5s", "SELECT * FROM system.local WHERE key = 'local'"},
		{"SELECT * FROM system.local WHERE key = 'local' USING TIMEOUT 5", "SELECT * FROM system.local WHERE key = 'local'"},
		{"INSERT INTO t (k) VALUES (1) USING TIMEOUT 5s", "INSERT INTO t (k) VALUES (1)"},
		{"DELETE FROM t WHERE k = 1 USING TIMEOUT 5s", "DELETE FROM t WHERE k = 1"},
		{"SELECT * FROM system.local", ""},
		{"SELECT * FROM t USING TIMEOUT", ""},
		{"SELECT * FROM t USING TIMEOUT ms", ""},
		{"SELECT * FROM t USINGTIMEOUT 5s", ""},
		{"SELECT * FROM t USING TIMEOUT 5s AND x", ""},
		{"SELECT * FROM t USING TIMEOUT 5s; SELECT 1", ""},
		{"SELECT * FROM t WHERE k = 'USING TIMEOUT' AND x = 5", ""},
		{"SELECT * FROM t WHERE k = (USING TIMEOUT 5s)", ""},
		{"INSERT INTO t (k) VALUES (1) USING TTL 5 AND TIMEOUT 5s", ""},
		{"UPDATE t USING TIMEOUT 5s SET v = 1 WHERE k = 1", ""},
		{"USING TIMEOUT 5s", ""},
		{"", ""},
	}
	var r Recognizer
	for _, tt := range tests {
		n := r.Recognize([]byte(tt.q)).WithoutTimeout
		got := ""
		if n > 0 {
			got = tt.q[:n]
		}
		if got != tt.want {
			t.Errorf("%q: without timeout %q, want %q", tt.q, got, tt.want)
		}
	}
}

// FuzzWithoutTimeout checks that the clause, when found, is cut whole:
// what remains is a prefix of q that does not end in space, and what was cut
// holds the clause's words.
func FuzzWithoutTimeout(f *testing.F) {
	f.Add([]byte("SELECT * FROM system.local USING TIMEOUT 30000ms"))
	f.Add([]byte("select x from t using timeout 1m30s ;"))
	f.Add([]byte("DELETE FROM t WHERE k = 1 USING TIMEOUT 5"))
	f.Fuzz(func(t *testing.T, q []byte) {
		var r Recognizer
		n := r.Recognize(q).WithoutTimeout
		if n == 0 {
			return
		}
		if n < 0 || n > len(q) || IsSpace(q[n-1]) {
			t.Fatalf("%q cut to %d", q, n)
		}
		cut := bytes.ToLower(q[n:])
		if !bytes.Contains(cut, []byte("using")) || !bytes.Contains(cut, []byte("timeout")) {
			t.Fatalf("%q: cut %q", q, q[n:])
		}
	})
}
