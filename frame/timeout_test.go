package frame

import (
	"bytes"
	"testing"
)

func TestTrimUsingTimeout(t *testing.T) {
	tests := []struct {
		q, want string
		ok      bool
	}{
		{"SELECT * FROM system.local USING TIMEOUT 30000ms", "SELECT * FROM system.local", true},
		{"select keyspace_name from system_schema.keyspaces using timeout 1m30s;", "select keyspace_name from system_schema.keyspaces", true},
		{"SELECT * FROM system.peers\n  USING\tTIMEOUT  5s ; \n", "SELECT * FROM system.peers", true},
		{"SELECT * FROM system.local", "SELECT * FROM system.local", false},
		{"SELECT * FROM t USING TIMEOUT", "SELECT * FROM t USING TIMEOUT", false},
		{"SELECT * FROM t USING TIMEOUT ms", "SELECT * FROM t USING TIMEOUT ms", false},
		{"SELECT * FROM t USINGTIMEOUT 5s", "SELECT * FROM t USINGTIMEOUT 5s", false},
		{"SELECT * FROM t WHERE k = 'USING TIMEOUT' AND x = 5", "SELECT * FROM t WHERE k = 'USING TIMEOUT' AND x = 5", false},
		{"INSERT INTO t (k) VALUES (1) USING TTL 5 AND TIMEOUT 5s", "INSERT INTO t (k) VALUES (1) USING TTL 5 AND TIMEOUT 5s", false},
		{"USING TIMEOUT 5s", "USING TIMEOUT 5s", false},
		{"", "", false},
	}
	for _, tt := range tests {
		n, ok := TrimUsingTimeout([]byte(tt.q))
		if got := tt.q[:n]; got != tt.want || ok != tt.ok {
			t.Errorf("TrimUsingTimeout(%q) = %q, %v; want %q, %v", tt.q, got, ok, tt.want, tt.ok)
		}
	}
}

// FuzzTrimUsingTimeout checks that the clause, when found, is cut whole:
// what remains is a prefix of q that does not end in space, and what was cut
// holds the clause's words.
func FuzzTrimUsingTimeout(f *testing.F) {
	f.Add([]byte("SELECT * FROM system.local USING TIMEOUT 30000ms"))
	f.Add([]byte("x using timeout 1m30s ;"))
	f.Add([]byte(" USING TIMEOUT 5"))
	f.Fuzz(func(t *testing.T, q []byte) {
		n, ok := TrimUsingTimeout(q)
		if n < 0 || n > len(q) {
			t.Fatalf("length %d of %d", n, len(q))
		}
		if !ok {
			if n != len(q) {
				t.Fatalf("not found, yet cut to %d of %d", n, len(q))
			}
			return
		}
		if n == 0 || isSpace(q[n-1]) {
			t.Fatalf("%q cut to %q", q, q[:n])
		}
		cut := bytes.ToLower(q[n:])
		if !bytes.Contains(cut, []byte("using")) || !bytes.Contains(cut, []byte("timeout")) {
			t.Fatalf("%q: cut %q", q, q[n:])
		}
	})
}
