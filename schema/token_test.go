package schema

import (
	"encoding/hex"
	"math"
	"testing"
)

// Tokens computed by Cassandra 5.0 (SELECT token(k) on a blob key).
var tokenVectors = []struct {
	key  string // hex
	want int64
}{
	{"00", 5048724184180415669},
	{"01", 8849112093580131862},
	{"ff", -4442228696663692417},
	{"80", -5284281814142962636},
	{"7f", 5072634478945617755},
	{"000102030405060708090a0b0c0d0e", 5125964547706398185},
	{"000102030405060708090a0b0c0d0e0f", 4920504430128807728},
	{"000102030405060708090a0b0c0d0e0f10", 6662781046685680142},
	{"fffefdfcfbfaf9f8f7f6f5f4f3f2f1f0efeeed", -4541641662164024060},
	{"6b6579", -6847573755651342660},                     // "key"
	{"00000001", -4069959284402364209},                   // int 1
	{"48656c6c6f2c20776f726c6421", -1058014058246674977}, // "Hello, world!"
}

func TestToken(t *testing.T) {
	for _, tc := range tokenVectors {
		key, err := hex.DecodeString(tc.key)
		if err != nil {
			t.Fatal(err)
		}
		if got := Token(key); got != tc.want {
			t.Errorf("Token(%s) = %d, want %d", tc.key, got, tc.want)
		}
	}
}

func TestTokenEmpty(t *testing.T) {
	// MurmurHash3 of nothing with seed 0 is 0, which is no special case.
	if got := Token(nil); got != 0 {
		t.Errorf("Token(nil) = %d, want 0", got)
	}
}

func TestKeyBuilder(t *testing.T) {
	var kb KeyBuilder
	tests := []struct {
		name  string
		comps []string // hex
		bytes string   // hex
		want  int64    // from Cassandra where known, else 0
	}{
		{"empty", nil, "", 0},
		{"one", []string{"00000001"}, "00000001", -4069959284402364209},
		// PRIMARY KEY ((a int, b text)) with a = 1, b = 'x'.
		{"two", []string{"00000001", "78"}, "0004000000010000017800", 746584927563629270},
		{"empty component", []string{"", "ff"}, "0000000001ff00", 0},
	}
	for _, tc := range tests {
		kb.Reset()
		for _, c := range tc.comps {
			b, _ := hex.DecodeString(c)
			kb.Add(b)
		}
		if got := hex.EncodeToString(kb.Bytes()); got != tc.bytes {
			t.Errorf("%s: Bytes() = %s, want %s", tc.name, got, tc.bytes)
		}
		if kb.Len() != len(tc.comps) {
			t.Errorf("%s: Len() = %d, want %d", tc.name, kb.Len(), len(tc.comps))
		}
		if tc.want != 0 && kb.Token() != tc.want {
			t.Errorf("%s: Token() = %d, want %d", tc.name, kb.Token(), tc.want)
		}
		if kb.Token() != Token(kb.Bytes()) {
			t.Errorf("%s: Token() differs from Token(Bytes())", tc.name)
		}
	}
}

func TestTokenAllocs(t *testing.T) {
	key := make([]byte, 37)
	var kb KeyBuilder
	kb.Add(key)
	kb.Add(key)
	allocs := testing.AllocsPerRun(100, func() {
		Token(key)
		kb.Reset()
		kb.Add(key[:16])
		kb.Add(key[:5])
		kb.Token()
	})
	if allocs != 0 {
		t.Errorf("allocs = %v, want 0", allocs)
	}
}

func BenchmarkToken16(b *testing.B) {
	key := []byte("0123456789abcdef")
	b.ReportAllocs()
	b.SetBytes(int64(len(key)))
	for b.Loop() {
		Token(key)
	}
}

func BenchmarkToken100(b *testing.B) {
	key := make([]byte, 100)
	b.ReportAllocs()
	b.SetBytes(int64(len(key)))
	for b.Loop() {
		Token(key)
	}
}

func BenchmarkKeyBuilder(b *testing.B) {
	var kb KeyBuilder
	c1, c2 := []byte{0, 0, 0, 1}, []byte("some text")
	b.ReportAllocs()
	for b.Loop() {
		kb.Reset()
		kb.Add(c1)
		kb.Add(c2)
		kb.Token()
	}
}

func FuzzToken(f *testing.F) {
	for _, tc := range tokenVectors {
		key, _ := hex.DecodeString(tc.key)
		f.Add(key)
	}
	f.Fuzz(func(t *testing.T, key []byte) {
		tok := Token(key)
		if tok == math.MinInt64 {
			t.Fatalf("Token(%x) = MinInt64", key)
		}
		var kb KeyBuilder
		kb.Add(key)
		if kb.Token() != tok {
			t.Fatalf("KeyBuilder with one component %x: %d, want %d", key, kb.Token(), tok)
		}
	})
}
