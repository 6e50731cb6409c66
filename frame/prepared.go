package frame

// A decoder of RESULT bodies of kind Prepared, the answer to PREPARE
// (native_protocol_v{3,4,5}.spec, section 4.2.5.4), and of the column type
// specs they carry (section 4.2.5.2).
//
// Supported: protocol versions 3, 4 and 5; the statement id, the v5 result
// metadata id, the bound variables' metadata (the partition key indexes
// from v4 on; in v3 the metadata of a Rows result, paging state included),
// a global table spec or one per column, every column type of the specs
// (native, custom, list, set, map, tuple, UDT, nested to any reasonable
// depth) and the result metadata after the variables: flags, paging state,
// new metadata id, no-metadata.
//
// Tolerated: Metadata_changed (a new metadata id) in any version, as the
// oracle writes it and ScyllaDB's SCYLLA_USE_METADATA_ID would on v4; flag
// bits no version defines, among them ScyllaDB's LWT mark
// (bit 31 of the variables' flags, SCYLLA_LWT_ADD_METADATA_MARK), which is
// reported as Prepared.LWT; bytes after the result metadata; type id
// 0x000A (text in protocol v1 and v2), which has no value either.
//
// Not supported: the result metadata id that SCYLLA_USE_METADATA_ID adds
// to v4 Prepared results, which the proxy strips from SUPPORTED; DSE
// continuous paging fields in the result metadata.
//
// Like the request decoders (request.go), ParsePrepared checks the whole
// body once and returns slices into it; iterators need no error, and
// nothing is copied or allocated.

import (
	"encoding/binary"
	"fmt"
)

// ResultKindPrepared is the [int] that starts a RESULT body of kind Prepared.
const ResultKindPrepared = 0x0004

// Metadata flags (<flags> of the Rows metadata and of the Prepared
// variables metadata).
const (
	MetadataGlobalTableSpec uint32 = 0x0001
	MetadataHasMorePages    uint32 = 0x0002 // Rows metadata and v3 variables
	MetadataNoMetadata      uint32 = 0x0004 // Rows metadata and v3 variables
	MetadataChanged         uint32 = 0x0008 // Rows metadata; v5, honoured in any version
	MetadataScyllaLWT       uint32 = 1 << 31
)

// maxTypeDepth bounds the nesting of type specs, so that a hostile body
// cannot exhaust the stack; CQL schemas nest a handful of levels.
const maxTypeDepth = 64

// errTypeTooDeep reports a type spec nested more than maxTypeDepth levels.
var errTypeTooDeep = fmt.Errorf("type spec nested more than %d levels: %w", maxTypeDepth, ErrMalformed)

// Prepared holds what a RESULT Prepared body says, as slices into the body.
type Prepared struct {
	ID               []byte
	ResultMetadataID []byte // v5
	// Keyspace and Table are those of the bound variables: the global
	// table spec, or the first variable's; empty without variables.
	Keyspace, Table []byte
	LWT             bool    // ScyllaDB marked the statement a lightweight transaction
	PKIndexes       Indexes // v4 on: the variables that are partition key columns, in partition key order
	Variables       Columns // the bound variables
	Result          Columns // the columns of the rows an EXECUTE returns; none under No_metadata
}

// ParsePrepared decodes a RESULT body of kind Prepared, from its kind on,
// in protocol version v.
func ParsePrepared(body []byte, v uint8) (Prepared, error) {
	c := bodyCursor{b: body}
	kind, err := c.u32()
	if err != nil {
		return Prepared{}, fmt.Errorf("frame: RESULT kind: %w", err)
	}
	if kind != ResultKindPrepared {
		return Prepared{}, fmt.Errorf("frame: RESULT kind %#x is not Prepared: %w", kind, ErrMalformed)
	}
	var p Prepared
	if p.ID, err = c.shortBytes(); err != nil {
		return Prepared{}, fmt.Errorf("frame: PREPARED id: %w", err)
	}
	if v >= 5 {
		if p.ResultMetadataID, err = c.shortBytes(); err != nil {
			return Prepared{}, fmt.Errorf("frame: PREPARED result metadata id: %w", err)
		}
	}
	var flags uint32
	if v >= 4 {
		flags, p.PKIndexes, p.Variables, err = c.variablesMetadata()
	} else {
		// v3 has no variables metadata of its own: it is a Rows metadata.
		flags, p.Variables, err = c.rowsMetadata()
	}
	if err != nil {
		return Prepared{}, fmt.Errorf("frame: PREPARED variables: %w", err)
	}
	p.LWT = flags&MetadataScyllaLWT != 0
	if _, p.Result, err = c.rowsMetadata(); err != nil {
		return Prepared{}, fmt.Errorf("frame: PREPARED result metadata: %w", err)
	}
	if p.Variables.global {
		p.Keyspace, p.Table = p.Variables.keyspace, p.Variables.table
	} else if col, ok := p.Variables.At(0); ok {
		p.Keyspace, p.Table = col.Keyspace, col.Table
	}
	return p, nil
}

// AppendPreparedLWT appends the RESULT frame of header h and uncompressed
// body, of kind Prepared, with ScyllaDB's LWT mark (MetadataScyllaLWT) set
// in the variables' flags, as ScyllaDB marks a conditional statement for a
// driver that asked for SCYLLA_LWT_ADD_METADATA_MARK. The frame is
// uncompressed.
func AppendPreparedLWT(dst []byte, h Header, body []byte) ([]byte, error) {
	msg, ok := ResponseMessage(body, h)
	if !ok {
		return dst, fmt.Errorf("frame: RESULT prefix: %w", ErrShortBody)
	}
	if _, err := ParsePrepared(msg, h.Version); err != nil {
		return dst, err
	}
	// The flags follow the kind, the id and, in v5, the result metadata
	// id; ParsePrepared has checked that they are there.
	c := bodyCursor{b: msg, off: 4}
	c.shortBytes()
	if h.Version >= 5 {
		c.shortBytes()
	}
	flagsAt := len(body) - len(msg) + c.off
	start := len(dst)
	h.Flags &^= FlagCompression
	dst = AppendHeader(dst, h)
	dst = append(dst, body...)
	dst[start+HeaderSize+flagsAt] |= byte(MetadataScyllaLWT >> 24)
	SetLength(dst[start:])
	return dst, nil
}

// Indexes is a list of [short] indexes, left encoded in the body.
type Indexes struct {
	b []byte
}

// Len returns the number of indexes.
func (x Indexes) Len() int { return len(x.b) / 2 }

// At returns the i-th index; it panics if i is out of range, like a slice.
func (x Indexes) At(i int) uint16 { return binary.BigEndian.Uint16(x.b[2*i:]) }

// Column is the spec of a bound variable or result column.
type Column struct {
	Keyspace, Table []byte
	Name            []byte
	Type            []byte // the encoded [option]: the id, then what the type needs; see SkipTypeSpec
}

// TypeID returns the id of the column's type (0x0009 for int, 0x0020 for a
// list, ...).
func (col *Column) TypeID() uint16 { return binary.BigEndian.Uint16(col.Type) }

// Columns iterates over column specs: call Next until it reports false.
// Copies iterate independently.
type Columns struct {
	all             []byte // every column spec, encoded
	off             int    // where in all the spec Next returns starts
	n               int    // how many columns there are
	i               int    // how many Next has returned
	global          bool   // the specs carry no keyspace and table of their own
	keyspace, table []byte // of the global table spec
}

// Len returns the number of columns.
func (cs *Columns) Len() int { return cs.n }

// Next returns the next column; ok is false after the last.
func (cs *Columns) Next() (col Column, ok bool) {
	if cs.i >= cs.n {
		return Column{}, false
	}
	c := bodyCursor{b: cs.all, off: cs.off}
	col, err := c.column(cs.global)
	if err != nil { // the parser checked every column
		cs.i = cs.n
		return Column{}, false
	}
	if cs.global {
		col.Keyspace, col.Table = cs.keyspace, cs.table
	}
	cs.i++
	cs.off = c.off
	return col, true
}

// At returns the column at index i, counting from the first whatever Next
// has returned; ok is false when there is no such column.
func (cs *Columns) At(i int) (col Column, ok bool) {
	if i < 0 || i >= cs.n {
		return Column{}, false
	}
	it := *cs
	it.off, it.i = 0, 0
	for range i {
		it.Next()
	}
	return it.Next()
}

// SkipTypeSpec returns the length of the column type spec (an [option])
// at the start of b.
func SkipTypeSpec(b []byte) (n int, err error) {
	c := bodyCursor{b: b}
	if err := c.skipType(0); err != nil {
		return 0, fmt.Errorf("frame: type spec: %w", err)
	}
	return c.off, nil
}

// skipType reads past one type spec nested depth levels deep.
func (c *bodyCursor) skipType(depth int) error {
	if depth > maxTypeDepth {
		return errTypeTooDeep
	}
	id, err := c.u16()
	if err != nil {
		return err
	}
	switch {
	case id == 0x0000: // custom: the class name
		_, err = c.string()
	case id <= 0x0015: // native types, no value
	case id == 0x0020 || id == 0x0022: // list, set: the element type
		err = c.skipType(depth + 1)
	case id == 0x0021: // map: key and value types
		if err = c.skipType(depth + 1); err == nil {
			err = c.skipType(depth + 1)
		}
	case id == 0x0030: // UDT: keyspace, name, then named fields
		err = c.skipUDT(depth)
	case id == 0x0031: // tuple: the component types
		var n uint16
		if n, err = c.u16(); err != nil {
			return err
		}
		for range int(n) {
			if err = c.skipType(depth + 1); err != nil {
				return err
			}
		}
	default:
		err = fmt.Errorf("unknown type id %#04x: %w", id, ErrMalformed)
	}
	return err
}

func (c *bodyCursor) skipUDT(depth int) error {
	if _, err := c.string(); err != nil {
		return err
	}
	if _, err := c.string(); err != nil {
		return err
	}
	n, err := c.u16()
	if err != nil {
		return err
	}
	for range int(n) {
		if _, err := c.string(); err != nil {
			return err
		}
		if err := c.skipType(depth + 1); err != nil {
			return err
		}
	}
	return nil
}

// column reads one <col_spec_i>, which starts with a table spec unless
// the metadata has a global one.
func (c *bodyCursor) column(global bool) (col Column, err error) {
	if !global {
		if col.Keyspace, err = c.string(); err != nil {
			return Column{}, err
		}
		if col.Table, err = c.string(); err != nil {
			return Column{}, err
		}
	}
	if col.Name, err = c.string(); err != nil {
		return Column{}, err
	}
	start := c.off
	if err := c.skipType(0); err != nil {
		return Column{}, err
	}
	col.Type = c.b[start:c.off:c.off]
	return col, nil
}

// columns reads n column specs after their global table spec, if any,
// checking every one.
func (c *bodyCursor) columns(n int32, global bool) (Columns, error) {
	if n < 0 {
		return Columns{}, fmt.Errorf("column count %d: %w", n, ErrMalformed)
	}
	cs := Columns{n: int(n), global: global}
	var err error
	if global {
		if cs.keyspace, err = c.string(); err != nil {
			return Columns{}, fmt.Errorf("global keyspace: %w", err)
		}
		if cs.table, err = c.string(); err != nil {
			return Columns{}, fmt.Errorf("global table: %w", err)
		}
	}
	start := c.off
	for i := range int(n) {
		if _, err := c.column(global); err != nil {
			return Columns{}, fmt.Errorf("column %d: %w", i, err)
		}
	}
	cs.all = c.b[start:c.off:c.off]
	return cs, nil
}

// variablesMetadata reads the <metadata> of a v4 or v5 Prepared result.
func (c *bodyCursor) variablesMetadata() (flags uint32, pk Indexes, cs Columns, err error) {
	if flags, err = c.u32(); err != nil {
		return 0, Indexes{}, Columns{}, fmt.Errorf("flags: %w", err)
	}
	n, err := c.u32()
	if err != nil {
		return 0, Indexes{}, Columns{}, fmt.Errorf("column count: %w", err)
	}
	pkCount, err := c.u32()
	if err != nil {
		return 0, Indexes{}, Columns{}, fmt.Errorf("pk count: %w", err)
	}
	if int32(pkCount) < 0 {
		return 0, Indexes{}, Columns{}, fmt.Errorf("pk count %d: %w", int32(pkCount), ErrMalformed)
	}
	if pkCount > uint32(len(c.b)-c.off)/2 {
		return 0, Indexes{}, Columns{}, fmt.Errorf("pk indexes: %w", ErrShortBody)
	}
	pk.b, _ = c.take(2 * int(pkCount))
	for i := range pk.Len() {
		// An index past the variables would send callers looking for a
		// value that is not there.
		if x := pk.At(i); int32(x) >= int32(n) {
			return 0, Indexes{}, Columns{}, fmt.Errorf("pk index %d is %d, past %d variables: %w", i, x, int32(n), ErrMalformed)
		}
	}
	if cs, err = c.columns(int32(n), flags&MetadataGlobalTableSpec != 0); err != nil {
		return 0, Indexes{}, Columns{}, err
	}
	return flags, pk, cs, nil
}

// rowsMetadata reads the <metadata> of a Rows result, which is also a
// Prepared result's <result_metadata> and, in v3, its <metadata>.
func (c *bodyCursor) rowsMetadata() (flags uint32, cs Columns, err error) {
	if flags, err = c.u32(); err != nil {
		return 0, Columns{}, fmt.Errorf("flags: %w", err)
	}
	n, err := c.u32()
	if err != nil {
		return 0, Columns{}, fmt.Errorf("column count: %w", err)
	}
	if flags&MetadataHasMorePages != 0 {
		if _, err := c.bytes(); err != nil {
			return 0, Columns{}, fmt.Errorf("paging state: %w", err)
		}
	}
	if flags&MetadataChanged != 0 {
		if _, err := c.shortBytes(); err != nil {
			return 0, Columns{}, fmt.Errorf("new metadata id: %w", err)
		}
	}
	if flags&MetadataNoMetadata != 0 {
		if int32(n) < 0 {
			return 0, Columns{}, fmt.Errorf("column count %d: %w", int32(n), ErrMalformed)
		}
		return flags, Columns{}, nil
	}
	cs, err = c.columns(int32(n), flags&MetadataGlobalTableSpec != 0)
	return flags, cs, err
}
