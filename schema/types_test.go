package schema

import (
	"fmt"
	"reflect"
	"testing"
)

// testUDTs resolves the user types of the tests.
func testUDTs(keyspace, name string) (Type, error) {
	switch name {
	case "addr", "Addr":
		return Type{Kind: UDT, Keyspace: keyspace, Name: name,
			Fields: []string{"street", "No"},
			Elems:  []Type{{Kind: Text}, {Kind: Int}}}, nil
	}
	return Type{}, fmt.Errorf("no type %s.%s", keyspace, name)
}

func TestParseType(t *testing.T) {
	addr, _ := testUDTs("ks", "addr")
	frozenAddr := addr
	frozenAddr.Frozen = true
	quoted, _ := testUDTs("ks", "Addr")
	other, _ := testUDTs("other", "addr")
	tests := []struct {
		in   string
		want Type
		out  string // String(), when not in
	}{
		{"int", Type{Kind: Int}, ""},
		{"varchar", Type{Kind: Text}, "text"},
		{" BigInt ", Type{Kind: Bigint}, "bigint"},
		{"frozen<list<int>>", Type{Kind: List, Frozen: true, Elems: []Type{{Kind: Int}}}, ""},
		{"set<timeuuid>", Type{Kind: Set, Elems: []Type{{Kind: Timeuuid}}}, ""},
		{"frozen<map<text, frozen<set<uuid>>>>", Type{Kind: Map, Frozen: true, Elems: []Type{{Kind: Text},
			{Kind: Set, Frozen: true, Elems: []Type{{Kind: Uuid}}}}}, ""},
		{"frozen<tuple<int, text>>", Type{Kind: Tuple, Frozen: true, Elems: []Type{{Kind: Int}, {Kind: Text}}}, ""},
		{"vector<float, 3>", Type{Kind: Vector, Elems: []Type{{Kind: Float}}, Dim: 3}, ""},
		{"frozen<addr>", frozenAddr, ""},
		{"addr", addr, ""},
		{`"Addr"`, quoted, ""},
		{"other.addr", other, "addr"},
		{"'org.apache.cassandra.db.marshal.Whatever'", Type{Kind: Custom, Name: "org.apache.cassandra.db.marshal.Whatever"}, ""},
		{"'it''s'", Type{Kind: Custom, Name: "it's"}, ""},
	}
	for _, tc := range tests {
		got, err := ParseType(tc.in, testUDTs, "ks")
		if err != nil {
			t.Errorf("ParseType(%q): %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseType(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
		out := tc.out
		if out == "" {
			out = tc.in
		}
		if got.String() != out {
			t.Errorf("ParseType(%q).String() = %q, want %q", tc.in, got.String(), out)
		}
	}
}

func TestParseTypeErrors(t *testing.T) {
	for _, in := range []string{
		"", "list<int", "map<int>", "vector<float, 0>", "vector<float>", "tuple<>",
		"frozen<>", "nope", "int int", "'unterminated", `"unterminated`, "list<nope>",
	} {
		if got, err := ParseType(in, testUDTs, "ks"); err == nil {
			t.Errorf("ParseType(%q) = %v, want an error", in, got)
		}
	}
}

func FuzzParseType(f *testing.F) {
	for _, s := range []string{"int", "frozen<map<text, frozen<set<uuid>>>>", "vector<float, 3>",
		"frozen<tuple<int, text>>", `frozen<"Addr">`, "'x.Y'", "ks.addr"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		typ, err := ParseType(s, testUDTs, "ks")
		if err != nil {
			return
		}
		again, err := ParseType(typ.String(), testUDTs, "ks")
		if err != nil {
			// A qualified name reads back in the default keyspace.
			if typ.Kind == UDT || containsUDT(typ) {
				return
			}
			t.Fatalf("ParseType(%q).String() = %q does not parse: %v", s, typ.String(), err)
		}
		if !containsUDT(typ) && !reflect.DeepEqual(typ, again) {
			t.Fatalf("ParseType(%q) = %+v, after String() %+v", s, typ, again)
		}
	})
}

func containsUDT(t Type) bool {
	if t.Kind == UDT {
		return true
	}
	for _, e := range t.Elems {
		if containsUDT(e) {
			return true
		}
	}
	return false
}

func BenchmarkParseType(b *testing.B) {
	for _, bc := range []struct{ name, in string }{
		{"native", "timeuuid"},
		{"collection", "frozen<map<text, frozen<set<uuid>>>>"},
		{"tuple", "tuple<int, text, frozen<list<bigint>>, vector<float, 3>>"},
		{"udt", `frozen<ks."Addr">`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseType(bc.in, testUDTs, "ks"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
