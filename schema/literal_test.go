package schema

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
)

// literalCases are literals with the serialization Cassandra gives them,
// as hex with spaces for reading; they cover each kind's forms.
var literalCases = []struct {
	typ, lit, want string
}{
	{"tinyint", "-128", "80"},
	{"smallint", "300", "012c"},
	{"int", "42", "0000002a"},
	{"int", "-1", "ffffffff"},
	{"int", "/* c */ 2147483647 -- max", "7fffffff"},
	{"bigint", "-2", "fffffffffffffffe"},
	{"counter", "1", "0000000000000001"},
	{"varint", "0", "00"},
	{"varint", "128", "0080"},
	{"varint", "-128", "80"},
	{"varint", "-129", "ff7f"},
	{"varint", "18446744073709551616", "01 0000000000000000"},
	{"decimal", "100", "00000000 64"},
	{"decimal", "1.5", "00000001 0f"},
	{"decimal", "-0.5", "00000001 fb"},
	{"decimal", "1e3", "fffffffd 01"},
	{"float", "1.5", "3fc00000"},
	{"float", "2", "40000000"},
	{"float", "1e100", "7f800000"}, // saturates as Java does
	{"float", "nan", "7fc00000"},
	{"float", "-Infinity", "ff800000"},
	{"double", "1.5", "3ff8000000000000"},
	{"double", "-NaN", "7ff8000000000000"},
	{"double", "INFINITY", "7ff0000000000000"},
	{"double", "-2.5E-3", "bf647ae147ae147b"},
	{"boolean", "TRUE", "01"},
	{"boolean", "false", "00"},
	{"text", "'it''s'", "69742773"},
	{"text", "$$raw$$", "726177"},
	{"text", "'é'", "c3a9"},
	{"text", "''", ""},
	{"ascii", "'abc'", "616263"},
	{"blob", "0xCAFE", "cafe"},
	{"blob", "0x", ""},
	{"'com.example.T'", "0x01", "01"},
	{"uuid", "123e4567-e89b-42d3-a456-426614174000", "123e4567e89b42d3a456426614174000"},
	{"timeuuid", "123e4567-e89b-12d3-a456-426614174000", "123e4567e89b12d3a456426614174000"},
	{"inet", "'127.1'", "7f000001"},
	{"inet", "'::1'", "00000000000000000000000000000001"},
	{"inet", "'::ffff:1.2.3.4'", "01020304"},
	{"date", "'1970-01-02'", "80000001"},
	{"date", "2147483648", "80000000"},
	{"time", "'12:34:56.789'", "000029327b048f40"},
	{"time", "1000", "00000000000003e8"},
	{"timestamp", "1000", "00000000000003e8"},
	{"timestamp", "-1000", "fffffffffffffc18"},
	{"timestamp", "'1970-01-01T00:00:01Z'", "00000000000003e8"},
	{"timestamp", "'1970-01-01 01:00:01+0100'", "00000000000003e8"},
	{"timestamp", "''", ""},
	{"list<int>", "[1, 2]", "00000002 00000004 00000001 00000004 00000002"},
	{"list<int>", "[]", "00000000"},
	{"set<int>", "{2, 1, 2}", "00000002 00000004 00000001 00000004 00000002"},
	{"map<text, int>", "{'b': 2, 'a': 1}", "00000002 00000001 61 00000004 00000001 00000001 62 00000004 00000002"},
	{"tuple<int, text>", "(1, null)", "00000004 00000001 ffffffff"},
	{"tuple<int, text>", "(1)", "00000004 00000001"},
	{"vector<float, 2>", "[1.5, 2]", "3fc00000 40000000"},
}

func TestAppendLiteral(t *testing.T) {
	for _, tc := range literalCases {
		typ, err := ParseType(tc.typ, nil, "ks")
		if err != nil {
			t.Fatal(err)
		}
		want, err := hex.DecodeString(strings.ReplaceAll(tc.want, " ", ""))
		if err != nil {
			t.Fatal(err)
		}
		prefix := []byte("prefix")
		got, err := AppendLiteral(prefix, typ, []byte(tc.lit))
		if err != nil || !bytes.Equal(got, append(prefix, want...)) {
			t.Errorf("AppendLiteral(%s, %s) = %x, %v; want %x", tc.typ, tc.lit, got, err, append(prefix, want...))
		}
	}
}

func TestAppendLiteralErrors(t *testing.T) {
	for _, tc := range []struct{ typ, lit string }{
		{"int", ""},
		{"int", "null"},
		{"int", "42 43"},
		{"int", "2147483648"},
		{"int", "1.5"},
		{"int", "'1'"},
		{"int", "?"},
		{"int", ":k"},
		{"tinyint", "128"},
		{"bigint", "9223372036854775808"},
		{"varint", "1e3"},
		{"decimal", "'1'"},
		{"float", "'1.5'"},
		{"double", "nanx"},
		{"boolean", "yes"},
		{"text", "1"},
		{"text", "'\xff'"},
		{"ascii", "'é'"},
		{"blob", "0xabc"},
		{"blob", "'ab'"},
		{"uuid", "'123e4567-e89b-12d3-a456-426614174000'"},
		{"timeuuid", "123e4567-e89b-42d3-a456-426614174000"},
		{"inet", "'localhost'"},
		{"inet", "'1''2'"},
		{"date", "'1970-13-01'"},
		{"date", "1.5"},
		{"time", "'25:00:00'"},
		{"time", "1.5"},
		{"timestamp", "'now'"},
		{"timestamp", "9223372036854775808"},
		{"duration", "1h"},
		{"list<int>", "[1, null]"},
		{"list<int>", "[1, 2"},
		{"map<int, int>", "{1: 2, 1: 3}"},
		{"tuple<int>", "(1, 2)"},
		{"vector<int, 2>", "[1]"},
	} {
		typ, err := ParseType(tc.typ, nil, "ks")
		if err != nil {
			t.Fatal(err)
		}
		prefix := []byte("prefix")
		got, err := AppendLiteral(prefix, typ, []byte(tc.lit))
		if err == nil {
			t.Errorf("AppendLiteral(%s, %q) = %x, want an error", tc.typ, tc.lit, got)
		}
		if string(got) != "prefix" {
			t.Errorf("AppendLiteral(%s, %q) returned %q, want dst unchanged", tc.typ, tc.lit, got)
		}
	}
}

// TestAppendLiteralAllocs holds AppendLiteral's promise that scalars cost
// no allocation once dst has room: it runs for every key of a QUERY.
func TestAppendLiteralAllocs(t *testing.T) {
	dst := make([]byte, 0, 64)
	for _, tc := range literalCases {
		typ, err := ParseType(tc.typ, nil, "ks")
		if err != nil {
			t.Fatal(err)
		}
		if typ.Kind >= List && typ.Kind <= Vector || tc.lit == "1e100" {
			// Collections sort and allocate; strconv allocates the error
			// that says a float is out of range.
			continue
		}
		lit := []byte(tc.lit)
		if n := testing.AllocsPerRun(100, func() {
			dst, _ = AppendLiteral(dst[:0], typ, lit)
		}); n != 0 {
			t.Errorf("AppendLiteral(%s, %s): %v allocations", tc.typ, tc.lit, n)
		}
	}
}

func BenchmarkAppendLiteral(b *testing.B) {
	for _, bc := range []struct{ name, typ, lit string }{
		{"int", "int", "123456"},
		{"bigint", "bigint", "-1234567890123"},
		{"varint", "varint", "123456789012345678901234567890"},
		{"double", "double", "3.14159"},
		{"text", "text", "'user:12345'"},
		{"blob", "blob", "0x0123456789abcdef"},
		{"uuid", "uuid", "123e4567-e89b-42d3-a456-426614174000"},
		{"inet", "inet", "'192.168.1.20'"},
		{"date", "date", "'2024-02-29'"},
		{"timestamp", "timestamp", "'2024-02-29T12:34:56.789Z'"},
		{"tuple", "tuple<int, text>", "(42, 'x')"},
		{"set", "frozen<set<int>>", "{3, 1, 2}"},
	} {
		typ, err := ParseType(bc.typ, nil, "ks")
		if err != nil {
			b.Fatal(err)
		}
		lit := []byte(bc.lit)
		b.Run(bc.name, func(b *testing.B) {
			dst := make([]byte, 0, 128)
			b.ReportAllocs()
			for b.Loop() {
				if dst, err = AppendLiteral(dst[:0], typ, lit); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// literalFuzzTypes are the types FuzzAppendLiteral reads its literal as:
// every kind, and collections of them.
var literalFuzzTypes = []string{
	"tinyint", "smallint", "int", "bigint", "counter", "varint", "decimal",
	"float", "double", "boolean", "text", "ascii", "blob", "'c.T'", "uuid",
	"timeuuid", "inet", "date", "time", "timestamp", "duration",
	"list<int>", "set<text>", "map<text, frozen<list<double>>>",
	"tuple<int, text, timestamp>", "vector<float, 3>",
	"frozen<set<frozen<tuple<varint, decimal>>>>",
}

func FuzzAppendLiteral(f *testing.F) {
	for _, tc := range literalCases {
		f.Add(tc.lit)
	}
	f.Add("[[[[[[[[[[[[[[[[")
	f.Add("{'a': [1.5, NaN], 'b': []}")
	f.Add("(1, 'x', '2024-02-29 12:00:00+01:00')")
	var types []Type
	for _, s := range literalFuzzTypes {
		typ, err := ParseType(s, nil, "ks")
		if err != nil {
			f.Fatal(err)
		}
		types = append(types, typ)
	}
	f.Fuzz(func(t *testing.T, lit string) {
		for _, typ := range types {
			got, err := AppendLiteral([]byte("prefix"), typ, []byte(lit))
			if !bytes.HasPrefix(got, []byte("prefix")) || err != nil && len(got) != len("prefix") {
				t.Fatalf("AppendLiteral(%s, %q) = %q, %v: dst not kept", typ, lit, got, err)
			}
		}
	})
}
