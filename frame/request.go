package frame

// Decoders of the request bodies that carry statements: QUERY, EXECUTE and
// BATCH (native_protocol_v{3,4,5}.spec, sections 4.1.4, 4.1.6 and 4.1.7).
//
// Supported: protocol versions 3, 4 and 5; every query flag those versions
// define (values, positional or named; skip metadata; page size; paging
// state; serial consistency; default timestamp; keyspace and now in
// seconds), the flags being a byte in v3 and v4 and an int in v5; null
// values, and not-set values from v4 on (in v3 every negative length means
// null, as the v3 spec's [bytes] says and Cassandra does); the result
// metadata id of a v5 EXECUTE; the BATCH trailer, decoded as Cassandra does
// with the same code as QUERY's parameters.
//
// Tolerated: flag bits no version defines are ignored, as are bytes after
// the last field the flags announce, so that an extension appending fields
// (DSE continuous paging) still parses. The keyspace and now-in-seconds
// bits are honoured in any version: their layout is the same everywhere.
//
// Not supported: names before the values of BATCH statements (the spec's
// own note says the 0x40 flag cannot work there; Cassandra, like this
// package, reads those values as positional); ScyllaDB extensions that
// change these layouts (SCYLLA_USE_METADATA_ID on v4, TABLETS_ROUTING_V2),
// which the proxy strips from SUPPORTED; DSE protocol versions.
//
// Bodies must be decompressed and past any custom payload. Every decoder
// checks every field its body announces, values included, so that the
// iterators it returns need no error; results are slices into the body,
// nothing is copied and nothing allocated.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrMalformed means a body holds a field whose value makes the rest
// impossible to decode: a negative length, an unknown kind.
var ErrMalformed = errors.New("frame: malformed body")

// Query flags (<flags> of <query_parameters>, and of the BATCH trailer).
const (
	QueryFlagValues            uint32 = 0x0001
	QueryFlagSkipMetadata      uint32 = 0x0002
	QueryFlagPageSize          uint32 = 0x0004
	QueryFlagPagingState       uint32 = 0x0008
	QueryFlagSerialConsistency uint32 = 0x0010
	QueryFlagDefaultTimestamp  uint32 = 0x0020
	QueryFlagValueNames        uint32 = 0x0040
	QueryFlagWithKeyspace      uint32 = 0x0080 // v5
	QueryFlagNowInSeconds      uint32 = 0x0100 // v5
)

// Query holds what a QUERY or EXECUTE body says, as slices into the body.
type Query struct {
	Text              []byte // QUERY: the CQL text
	ID                []byte // EXECUTE: the prepared statement id
	ResultMetadataID  []byte // EXECUTE, v5
	Consistency       uint16
	Flags             uint32 // the query flags (a byte in v3 and v4, an int in v5)
	PageSize          int32  // -1 when absent
	PagingState       []byte // nil when absent or null
	SerialConsistency uint16 // 0 when absent
	Timestamp         int64  // the default timestamp; see HasTimestamp
	TimestampAt       int    // the offset of Timestamp's 8 bytes in the body, when it has one
	Keyspace          []byte // QueryFlagWithKeyspace
	NowInSeconds      int32  // QueryFlagNowInSeconds
	Values            Values // the bound values; empty without QueryFlagValues
}

// HasTimestamp reports whether the query carries a default timestamp.
func (q *Query) HasTimestamp() bool { return q.Flags&QueryFlagDefaultTimestamp != 0 }

// ParseQuery decodes a QUERY body of protocol version v.
func ParseQuery(body []byte, v uint8) (q Query, err error) {
	// Filling the named result in place spares copying the large Query.
	c := bodyCursor{b: body}
	if q.Text, err = c.longString(); err != nil {
		return Query{}, fmt.Errorf("frame: QUERY string: %w", err)
	}
	if field, err := c.queryParams(&q, v); err != nil {
		return Query{}, fmt.Errorf("frame: QUERY %s: %w", field, err)
	}
	return q, nil
}

// ParseExecute decodes an EXECUTE body of protocol version v.
func ParseExecute(body []byte, v uint8) (q Query, err error) {
	c := bodyCursor{b: body}
	if q.ID, err = c.shortBytes(); err != nil {
		return Query{}, fmt.Errorf("frame: EXECUTE id: %w", err)
	}
	if v >= 5 {
		if q.ResultMetadataID, err = c.shortBytes(); err != nil {
			return Query{}, fmt.Errorf("frame: EXECUTE result metadata id: %w", err)
		}
	}
	if field, err := c.queryParams(&q, v); err != nil {
		return Query{}, fmt.Errorf("frame: EXECUTE %s: %w", field, err)
	}
	return q, nil
}

// BatchType is the <type> of a BATCH.
type BatchType uint8

// Batch types.
const (
	BatchLogged   BatchType = 0
	BatchUnlogged BatchType = 1
	BatchCounter  BatchType = 2
)

// Batch holds what a BATCH body says, as slices into the body, and iterates
// over its statements: call Next until it reports false. Copies iterate
// independently.
type Batch struct {
	Type              BatchType // not checked: Cassandra refuses types above 2 itself
	Consistency       uint16
	Flags             uint32 // the query flags (a byte in v3 and v4, an int in v5)
	SerialConsistency uint16 // 0 when absent
	Timestamp         int64  // the default timestamp; see HasTimestamp
	Keyspace          []byte // QueryFlagWithKeyspace
	NowInSeconds      int32  // QueryFlagNowInSeconds

	stmts  []byte // the statements not yet returned by Next
	n      int    // how many statements the batch holds
	i      int    // how many Next has returned
	legacy bool   // v3 values
}

// BatchStatement is one statement of a batch.
type BatchStatement struct {
	Prepared bool   // ID is set rather than Text
	Text     []byte // the CQL text of a statement that is not prepared
	ID       []byte // the prepared statement id
	Values   Values // positional
}

// ParseBatch decodes a BATCH body of protocol version v, trailer included,
// so that the batch's keyspace is known before its statements are read.
func ParseBatch(body []byte, v uint8) (Batch, error) {
	c := bodyCursor{b: body}
	t, err := c.u8()
	if err != nil {
		return Batch{}, fmt.Errorf("frame: BATCH type: %w", err)
	}
	n, err := c.u16()
	if err != nil {
		return Batch{}, fmt.Errorf("frame: BATCH statement count: %w", err)
	}
	start := c.off
	for i := range int(n) {
		if _, err := c.batchStatement(v < 4); err != nil {
			return Batch{}, fmt.Errorf("frame: BATCH statement %d: %w", i, err)
		}
	}
	stmts := body[start:c.off:c.off]
	// Cassandra reads the trailer as query parameters, so bits the spec
	// says must be zero (values, page size, ...) still announce fields.
	var q Query
	if field, err := c.queryParams(&q, v); err != nil {
		return Batch{}, fmt.Errorf("frame: BATCH %s: %w", field, err)
	}
	return Batch{
		Type:              BatchType(t),
		Consistency:       q.Consistency,
		Flags:             q.Flags,
		SerialConsistency: q.SerialConsistency,
		Timestamp:         q.Timestamp,
		Keyspace:          q.Keyspace,
		NowInSeconds:      q.NowInSeconds,
		stmts:             stmts,
		n:                 int(n),
		legacy:            v < 4,
	}, nil
}

// HasTimestamp reports whether the batch carries a default timestamp.
func (b *Batch) HasTimestamp() bool { return b.Flags&QueryFlagDefaultTimestamp != 0 }

// Len returns the number of statements in the batch.
func (b *Batch) Len() int { return b.n }

// Next returns the next statement of the batch; ok is false after the last.
func (b *Batch) Next() (s BatchStatement, ok bool) {
	if b.i >= b.n {
		return BatchStatement{}, false
	}
	c := bodyCursor{b: b.stmts}
	s, err := c.batchStatement(b.legacy)
	if err != nil { // ParseBatch checked every statement
		b.i = b.n
		return BatchStatement{}, false
	}
	b.i++
	b.stmts = b.stmts[c.off:]
	return s, true
}

// ValueKind says whether a bound value is set.
type ValueKind uint8

// Value kinds.
const (
	ValueSet    ValueKind = iota // Bytes holds the serialized value, maybe empty
	ValueNull                    // length -1 (any negative length in v3)
	ValueNotSet                  // length -2, v4 on: leave the column unchanged
)

// Value is one bound value.
type Value struct {
	Name  []byte // the marker's name when the values are named, else nil
	Bytes []byte // the serialized value; nil unless Kind is ValueSet
	Kind  ValueKind
}

// Values iterates over the bound values of a statement: call Next until it
// reports false. Copies iterate independently.
type Values struct {
	all    []byte // every value, encoded
	off    int    // where in all the value Next returns starts
	n      int    // how many values there are
	i      int    // how many Next has returned
	named  bool
	legacy bool // v3: every negative length means null
}

// Len returns the number of values.
func (vs *Values) Len() int { return vs.n }

// Named reports whether each value comes with its marker's name.
func (vs *Values) Named() bool { return vs.named }

// Next returns the next value; ok is false after the last.
func (vs *Values) Next() (v Value, ok bool) {
	if vs.i >= vs.n {
		return Value{}, false
	}
	c := bodyCursor{b: vs.all, off: vs.off}
	if c.value(&v, vs.named, vs.legacy) != nil { // the parser checked every value
		vs.i = vs.n
		return Value{}, false
	}
	vs.i++
	vs.off = c.off
	return v, true
}

// At returns the value at index i, counting from the first whatever Next
// has returned; ok is false when there is no such value.
func (vs *Values) At(i int) (v Value, ok bool) {
	if i < 0 || i >= vs.n {
		return Value{}, false
	}
	// Values vary in length, so the only way to the i-th is through the
	// ones before it; partition keys have few columns.
	c := bodyCursor{b: vs.all}
	for range i {
		if c.skipValue(vs.named, vs.legacy) != nil { // the parser checked every value
			return Value{}, false
		}
	}
	if c.value(&v, vs.named, vs.legacy) != nil {
		return Value{}, false
	}
	return v, true
}

// Lookup returns the value bound to the marker called name, compared
// byte for byte; ok is false when the values are not named or none is
// called name.
func (vs *Values) Lookup(name []byte) (v Value, ok bool) {
	if !vs.named {
		return Value{}, false
	}
	it := Values{all: vs.all, n: vs.n, named: true, legacy: vs.legacy}
	for {
		v, ok := it.Next()
		if !ok || bytes.Equal(v.Name, name) {
			return v, ok
		}
	}
}

// bodyCursor reads protocol primitives from a body, never past its end.
// Slices it returns are capped at their length, so that appending to one
// cannot overwrite what follows it in the body.
type bodyCursor struct {
	b   []byte
	off int
}

func (c *bodyCursor) u8() (byte, error) {
	if c.off >= len(c.b) {
		return 0, ErrShortBody
	}
	c.off++
	return c.b[c.off-1], nil
}

func (c *bodyCursor) u16() (uint16, error) {
	if len(c.b)-c.off < 2 {
		return 0, ErrShortBody
	}
	c.off += 2
	return binary.BigEndian.Uint16(c.b[c.off-2:]), nil
}

func (c *bodyCursor) u32() (uint32, error) {
	if len(c.b)-c.off < 4 {
		return 0, ErrShortBody
	}
	c.off += 4
	return binary.BigEndian.Uint32(c.b[c.off-4:]), nil
}

func (c *bodyCursor) u64() (uint64, error) {
	if len(c.b)-c.off < 8 {
		return 0, ErrShortBody
	}
	c.off += 8
	return binary.BigEndian.Uint64(c.b[c.off-8:]), nil
}

// take returns the next n bytes.
func (c *bodyCursor) take(n int) ([]byte, error) {
	if n > len(c.b)-c.off {
		return nil, ErrShortBody
	}
	c.off += n
	return c.b[c.off-n : c.off : c.off], nil
}

// string reads a [string], or a [short bytes]: the layout is the same.
func (c *bodyCursor) string() ([]byte, error) {
	n, err := c.u16()
	if err != nil {
		return nil, err
	}
	return c.take(int(n))
}

func (c *bodyCursor) shortBytes() ([]byte, error) { return c.string() }

// longString reads a [long string].
func (c *bodyCursor) longString() ([]byte, error) {
	n, err := c.u32()
	if err != nil {
		return nil, err
	}
	if int32(n) < 0 {
		return nil, ErrMalformed
	}
	return c.take(int(n))
}

// bytes reads a [bytes], nil when null.
func (c *bodyCursor) bytes() ([]byte, error) {
	n, err := c.u32()
	if err != nil || int32(n) < 0 {
		return nil, err
	}
	return c.take(int(n))
}

// value reads a [value], preceded by its name when named, into v, which
// must be zero; filling it in place spares copying it around.
func (c *bodyCursor) value(v *Value, named, legacy bool) (err error) {
	if named {
		if v.Name, err = c.string(); err != nil {
			return err
		}
	}
	n, err := c.u32()
	switch l := int32(n); {
	case err != nil:
		return err
	case l >= 0:
		v.Bytes, err = c.take(int(l))
	case l == -1 || legacy:
		v.Kind = ValueNull
	case l == -2:
		v.Kind = ValueNotSet
	default:
		err = ErrMalformed
	}
	return err
}

// skipValue reads past what value would read, faster for not building
// the Value.
func (c *bodyCursor) skipValue(named, legacy bool) error {
	if named {
		n, err := c.u16()
		if err != nil {
			return err
		}
		if int(n) > len(c.b)-c.off {
			return ErrShortBody
		}
		c.off += int(n)
	}
	n, err := c.u32()
	switch l := int32(n); {
	case err != nil:
		return err
	case l >= 0:
		if int(l) > len(c.b)-c.off {
			return ErrShortBody
		}
		c.off += int(l)
	case l == -1 || l == -2 || legacy:
	default:
		return ErrMalformed
	}
	return nil
}

// values reads a [short] count and as many values, checking every one.
func (c *bodyCursor) values(named, legacy bool) (Values, error) {
	n, err := c.u16()
	if err != nil {
		return Values{}, err
	}
	start := c.off
	for i := range int(n) {
		if err := c.skipValue(named, legacy); err != nil {
			return Values{}, fmt.Errorf("value %d: %w", i, err)
		}
	}
	all := c.b[start:c.off:c.off]
	return Values{all: all, n: int(n), named: named, legacy: legacy}, nil
}

// queryParams reads <query_parameters> into q; on error it returns the
// name of the field it could not read.
func (c *bodyCursor) queryParams(q *Query, v uint8) (field string, err error) {
	if q.Consistency, err = c.u16(); err != nil {
		return "consistency", err
	}
	if v >= 5 {
		q.Flags, err = c.u32()
	} else {
		var f byte
		f, err = c.u8()
		q.Flags = uint32(f)
	}
	if err != nil {
		return "flags", err
	}
	if q.Flags&QueryFlagValues != 0 {
		if q.Values, err = c.values(q.Flags&QueryFlagValueNames != 0, v < 4); err != nil {
			return "values", err
		}
	}
	q.PageSize = -1
	if q.Flags&QueryFlagPageSize != 0 {
		n, err := c.u32()
		if err != nil {
			return "page size", err
		}
		q.PageSize = int32(n)
	}
	if q.Flags&QueryFlagPagingState != 0 {
		if q.PagingState, err = c.bytes(); err != nil {
			return "paging state", err
		}
	}
	if q.Flags&QueryFlagSerialConsistency != 0 {
		if q.SerialConsistency, err = c.u16(); err != nil {
			return "serial consistency", err
		}
	}
	if q.Flags&QueryFlagDefaultTimestamp != 0 {
		q.TimestampAt = c.off
		ts, err := c.u64()
		if err != nil {
			return "timestamp", err
		}
		q.Timestamp = int64(ts)
	}
	if q.Flags&QueryFlagWithKeyspace != 0 {
		if q.Keyspace, err = c.string(); err != nil {
			return "keyspace", err
		}
	}
	if q.Flags&QueryFlagNowInSeconds != 0 {
		n, err := c.u32()
		if err != nil {
			return "now in seconds", err
		}
		q.NowInSeconds = int32(n)
	}
	return "", nil
}

// batchStatement reads one <query_i> of a BATCH.
func (c *bodyCursor) batchStatement(legacy bool) (BatchStatement, error) {
	var s BatchStatement
	kind, err := c.u8()
	if err != nil {
		return s, err
	}
	switch kind {
	case 0:
		if s.Text, err = c.longString(); err != nil {
			return s, fmt.Errorf("query string: %w", err)
		}
	case 1:
		s.Prepared = true
		if s.ID, err = c.shortBytes(); err != nil {
			return s, fmt.Errorf("id: %w", err)
		}
	default:
		return s, fmt.Errorf("kind %d: %w", kind, ErrMalformed)
	}
	if s.Values, err = c.values(false, legacy); err != nil {
		return s, fmt.Errorf("values: %w", err)
	}
	return s, nil
}
