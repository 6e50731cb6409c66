// Package schema knows Cassandra's data model as far as partitioning needs
// it: CQL types, the serialization of CQL literals to the bytes a driver
// would bind, and the Murmur3 token of a partition key.
package schema

// CQL types, as Cassandra 4 and 5 write them in system_schema.columns.type
// and system_schema.types.field_types.
//
// Supported by ParseType: the native types (ascii, bigint, blob, boolean,
// counter, date, decimal, double, duration, float, inet, int, smallint,
// text, varchar, time, timestamp, timeuuid, tinyint, uuid, varint), list,
// set, map, tuple and vector<type, n>, frozen<...> around any of them, user
// types by name (unquoted, lower-cased as CQL does, or "Quoted" with ""
// escapes, optionally keyspace-qualified) resolved through a callback, and
// custom types written as a quoted Java class name ('org.apache...'). Names
// are case-insensitive and white space is free between tokens.
//
// Not supported: the Java class-name form of the native and collection
// types (org.apache.cassandra.db.marshal.Int32Type and so on, as in
// pre-3.0 schemas): it parses as a custom type, whose values
// AppendLiteral can take only as blobs.

import (
	"fmt"
	"strconv"
	"strings"
)

// Kind is a CQL type's kind.
type Kind uint8

// Kinds of CQL types.
const (
	Invalid Kind = iota
	Ascii
	Bigint
	Blob
	Boolean
	Counter
	Date
	Decimal
	Double
	Duration
	Float
	Inet
	Int
	Smallint
	Text // also varchar
	Time
	Timestamp
	Timeuuid
	Tinyint
	Uuid
	Varint
	List
	Set
	Map
	Tuple
	UDT
	Vector
	Custom
)

// nativeNames are the CQL names of the native kinds, indexed by Kind.
var nativeNames = [...]string{
	Ascii:     "ascii",
	Bigint:    "bigint",
	Blob:      "blob",
	Boolean:   "boolean",
	Counter:   "counter",
	Date:      "date",
	Decimal:   "decimal",
	Double:    "double",
	Duration:  "duration",
	Float:     "float",
	Inet:      "inet",
	Int:       "int",
	Smallint:  "smallint",
	Text:      "text",
	Time:      "time",
	Timestamp: "timestamp",
	Timeuuid:  "timeuuid",
	Tinyint:   "tinyint",
	Uuid:      "uuid",
	Varint:    "varint",
	List:      "list",
	Set:       "set",
	Map:       "map",
	Tuple:     "tuple",
	UDT:       "udt",
	Vector:    "vector",
	Custom:    "custom",
}

// String returns the kind's CQL name (for UDT and Custom, a description).
func (k Kind) String() string {
	if int(k) < len(nativeNames) && nativeNames[k] != "" {
		return nativeNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Type is a CQL type.
type Type struct {
	Kind   Kind
	Frozen bool
	// Elems are the element types: one for list, set and vector, the key
	// and value types for map, the component types for tuple and the field
	// types for UDT.
	Elems []Type
	// Fields are a UDT's field names, as stored (case-sensitive).
	Fields []string
	// Name is a UDT's name, as stored, or a custom type's class name.
	Name string
	// Keyspace is a UDT's keyspace.
	Keyspace string
	// Dim is a vector's dimension.
	Dim int
}

// ParseType parses the text of a CQL type. User types are resolved by
// calling udt with their keyspace (keyspace, unless the name is
// qualified) and name; udt may be nil when the text names none. The
// result's Frozen is set where the text says frozen<...>, whatever udt
// returned.
func ParseType(s string, udt func(keyspace, name string) (Type, error), keyspace string) (Type, error) {
	p := typeParser{src: s, udt: udt, keyspace: keyspace}
	t, err := p.parse(0)
	if err != nil {
		return Type{}, fmt.Errorf("schema: parsing type %q: %w", s, err)
	}
	p.space()
	if p.pos != len(p.src) {
		return Type{}, fmt.Errorf("schema: parsing type %q: unexpected %q at offset %d", s, p.src[p.pos:], p.pos)
	}
	return t, nil
}

// maxTypeDepth bounds nesting, so that hostile text cannot exhaust the
// stack.
const maxTypeDepth = 64

type typeParser struct {
	src      string
	pos      int
	udt      func(keyspace, name string) (Type, error)
	keyspace string
}

func (p *typeParser) space() {
	for p.pos < len(p.src) && isSpace(p.src[p.pos]) {
		p.pos++
	}
}

// expect consumes the punctuation c.
func (p *typeParser) expect(c byte) error {
	p.space()
	if p.pos >= len(p.src) {
		return fmt.Errorf("expected %q, got end of text", c)
	}
	if p.src[p.pos] != c {
		return fmt.Errorf("expected %q at offset %d, got %q", c, p.pos, p.src[p.pos])
	}
	p.pos++
	return nil
}

// peek reports whether the next non-space byte is c.
func (p *typeParser) peek(c byte) bool {
	p.space()
	return p.pos < len(p.src) && p.src[p.pos] == c
}

// ident reads an identifier, lower-cased unless quoted, and reports
// whether it was quoted.
func (p *typeParser) ident() (string, bool, error) {
	p.space()
	if p.pos >= len(p.src) {
		return "", false, fmt.Errorf("expected a type, got end of text")
	}
	start := p.pos
	c := p.src[p.pos]
	switch {
	case c == '"':
		s, end, ok := unquote(p.src, p.pos, '"')
		if !ok {
			return "", false, fmt.Errorf("unterminated quoted name at offset %d", start)
		}
		p.pos = end
		return s, true, nil
	case isIdentStart(c):
		for p.pos < len(p.src) && isIdentByte(p.src[p.pos]) {
			p.pos++
		}
		return strings.ToLower(p.src[start:p.pos]), false, nil
	}
	return "", false, fmt.Errorf("expected a type at offset %d, got %q", start, c)
}

// parse reads one type: a custom type's quoted class name, a native type,
// a parameterised one (frozen, collections, tuple, vector) or a user type.
func (p *typeParser) parse(depth int) (Type, error) {
	if depth > maxTypeDepth {
		return Type{}, fmt.Errorf("types nested deeper than %d", maxTypeDepth)
	}
	p.space()
	if p.pos < len(p.src) && p.src[p.pos] == '\'' {
		return p.custom()
	}
	name, quoted, err := p.ident()
	if err != nil {
		return Type{}, err
	}
	if !quoted {
		// Without a '<', frozen, list and the rest name user types.
		switch name {
		case "frozen":
			if p.open() {
				return p.frozen(depth)
			}
		case "list":
			if p.open() {
				return p.elems(List, 1, depth)
			}
		case "set":
			if p.open() {
				return p.elems(Set, 1, depth)
			}
		case "map":
			if p.open() {
				return p.elems(Map, 2, depth)
			}
		case "tuple":
			if p.open() {
				return p.elems(Tuple, 0, depth)
			}
		case "vector":
			if p.open() {
				return p.vector(depth)
			}
		default:
			if k, ok := nativeKind(name); ok {
				return Type{Kind: k}, nil
			}
		}
	}
	return p.userType(name)
}

// custom reads a custom type's class name, quoted as a string.
func (p *typeParser) custom() (Type, error) {
	name, end, ok := unquote(p.src, p.pos, '\'')
	if !ok {
		return Type{}, fmt.Errorf("unterminated custom type name at offset %d", p.pos)
	}
	p.pos = end
	return Type{Kind: Custom, Name: name}, nil
}

// nativeKind returns the kind an unquoted native type name stands for.
func nativeKind(name string) (Kind, bool) {
	if name == "varchar" {
		return Text, true
	}
	for k := Ascii; k <= Varint; k++ {
		if nativeNames[k] == name {
			return k, true
		}
	}
	return Invalid, false
}

// open consumes the '<' that opens a type's parameters, if it is next.
func (p *typeParser) open() bool {
	if p.peek('<') {
		p.pos++
		return true
	}
	return false
}

// frozen reads frozen<...>'s type, after the '<', through the '>'.
func (p *typeParser) frozen(depth int) (Type, error) {
	t, err := p.parse(depth + 1)
	if err != nil {
		return Type{}, err
	}
	if err := p.expect('>'); err != nil {
		return Type{}, err
	}
	t.Frozen = true
	return t, nil
}

// elems reads the element types of a type of kind k, after the '<',
// through the '>': n of them, or for n == 0 (a tuple's) one or more.
func (p *typeParser) elems(k Kind, n, depth int) (Type, error) {
	elems := make([]Type, 0, max(n, 1))
	for {
		e, err := p.parse(depth + 1)
		if err != nil {
			return Type{}, err
		}
		elems = append(elems, e)
		if len(elems) == n || n == 0 && !p.peek(',') {
			break
		}
		if err := p.expect(','); err != nil {
			return Type{}, err
		}
	}
	if err := p.expect('>'); err != nil {
		return Type{}, err
	}
	return Type{Kind: k, Elems: elems}, nil
}

// vector reads a vector's element type and dimension, after the '<',
// through the '>'.
func (p *typeParser) vector(depth int) (Type, error) {
	e, err := p.parse(depth + 1)
	if err != nil {
		return Type{}, err
	}
	if err := p.expect(','); err != nil {
		return Type{}, err
	}
	p.space()
	start := p.pos
	for p.pos < len(p.src) && p.src[p.pos] >= '0' && p.src[p.pos] <= '9' {
		p.pos++
	}
	dim, err := strconv.Atoi(p.src[start:p.pos])
	if err != nil || dim <= 0 {
		return Type{}, fmt.Errorf("bad vector dimension %q at offset %d", p.src[start:p.pos], start)
	}
	if err := p.expect('>'); err != nil {
		return Type{}, err
	}
	return Type{Kind: Vector, Elems: []Type{e}, Dim: dim}, nil
}

// userType resolves a user type, [keyspace.]name, whose first name has
// been read.
func (p *typeParser) userType(name string) (Type, error) {
	ks := p.keyspace
	if p.peek('.') {
		p.pos++
		ks = name
		var err error
		if name, _, err = p.ident(); err != nil {
			return Type{}, err
		}
	}
	if p.udt == nil {
		return Type{}, fmt.Errorf("unknown type %s.%s", ks, name)
	}
	t, err := p.udt(ks, name)
	if err != nil {
		return Type{}, fmt.Errorf("resolving user type %s.%s: %w", ks, name, err)
	}
	t.Frozen = false
	return t, nil
}

// unquote reads the string quoted by q that starts at s[i], with doubled
// quotes standing for one, and returns it and the offset past it.
func unquote(s string, i int, q byte) (string, int, bool) {
	var b strings.Builder
	for j := i + 1; j < len(s); j++ {
		if s[j] != q {
			b.WriteByte(s[j])
			continue
		}
		if j+1 < len(s) && s[j+1] == q {
			b.WriteByte(q)
			j++
			continue
		}
		return b.String(), j + 1, true
	}
	return "", 0, false
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'
}

func isIdentStart(c byte) bool {
	return c|0x20 >= 'a' && c|0x20 <= 'z'
}

func isIdentByte(c byte) bool {
	return isIdentStart(c) || c >= '0' && c <= '9' || c == '_'
}

// String returns the type in CQL syntax, as system_schema writes it; user
// types are named without their keyspace.
func (t Type) String() string {
	var b strings.Builder
	t.write(&b)
	return b.String()
}

func (t Type) write(b *strings.Builder) {
	if t.Frozen {
		b.WriteString("frozen<")
	}
	switch t.Kind {
	case List, Set, Map, Tuple:
		b.WriteString(nativeNames[t.Kind])
		b.WriteByte('<')
		for i, e := range t.Elems {
			if i > 0 {
				b.WriteString(", ")
			}
			e.write(b)
		}
		b.WriteByte('>')
	case Vector:
		b.WriteString("vector<")
		if len(t.Elems) > 0 {
			t.Elems[0].write(b)
		}
		b.WriteString(", ")
		b.WriteString(strconv.Itoa(t.Dim))
		b.WriteByte('>')
	case UDT:
		writeIdent(b, t.Name)
	case Custom:
		writeQuoted(b, t.Name, '\'')
	default:
		b.WriteString(t.Kind.String())
	}
	if t.Frozen {
		b.WriteByte('>')
	}
}

// writeIdent writes name, quoted unless it reads back unchanged unquoted.
func writeIdent(b *strings.Builder, name string) {
	plain := name != "" && isIdentStart(name[0])
	for i := 0; plain && i < len(name); i++ {
		c := name[i]
		plain = isIdentByte(c) && !(c >= 'A' && c <= 'Z')
	}
	if plain && !isTypeKeyword(name) {
		b.WriteString(name)
		return
	}
	writeQuoted(b, name, '"')
}

// isTypeKeyword reports whether an unquoted name would parse as a built-in
// type rather than a user type.
func isTypeKeyword(name string) bool {
	switch name {
	case "frozen", "list", "set", "map", "tuple", "vector":
		return true
	}
	_, native := nativeKind(name)
	return native
}

func writeQuoted(b *strings.Builder, s string, q byte) {
	b.WriteByte(q)
	for i := 0; i < len(s); i++ {
		if s[i] == q {
			b.WriteByte(q)
		}
		b.WriteByte(s[i])
	}
	b.WriteByte(q)
}
