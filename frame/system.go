package frame

// The rewriting of RESULT Rows bodies, for the system tables through
// which drivers learn the cluster (system.local, system.peers,
// system.peers_v2): the caller sees each row's cells by column name and
// changes, keeps or drops rows; what the values mean is its business.
//
// Supported: protocol versions 3 to 5; the Rows metadata as prepared.go
// reads it (paging state, new metadata id, no metadata, global or
// per-column table specs), kept as the upstream wrote it, and the response
// prefix (tracing id, warnings, custom payload), kept too.
//
// Not supported: DSE continuous paging fields in the metadata. Bytes after
// the last row, which no version defines, are left out.

import (
	"encoding/binary"
	"fmt"
)

// Row is a row of a RESULT Rows as AppendRows hands it to its caller: a
// cell by column, nil for null. Cells may be replaced; they are copied
// into the frame after the caller returns.
type Row struct {
	names []string
	Cells [][]byte
}

// Index returns the index of the first column named name, or -1.
func (r *Row) Index(name string) int {
	for i, n := range r.names {
		if n == name {
			return i
		}
	}
	return -1
}

// Cell returns the cell of column name; ok is false when the rows have no
// such column.
func (r *Row) Cell(name string) (v []byte, ok bool) {
	if i := r.Index(name); i >= 0 {
		return r.Cells[i], true
	}
	return nil, false
}

// Set sets the cell of column name to v, if the rows have such a column.
func (r *Row) Set(name string, v []byte) {
	if i := r.Index(name); i >= 0 {
		r.Cells[i] = v
	}
}

// AppendRows appends the RESULT frame of header h and uncompressed body
// with its rows passed through edit: each row is written as edit leaves
// it, or left out when edit returns false. columns names the columns when
// the result has no metadata (an EXECUTE that skipped it), as the
// statement's RESULT Prepared did. The frame is uncompressed. A RESULT of
// another kind is not appended, and rows is false.
func AppendRows(dst []byte, h Header, body []byte, columns []string, edit func(*Row) bool) (out []byte, rows bool, err error) {
	msg, ok := ResponseMessage(body, h)
	if !ok {
		return dst, false, fmt.Errorf("frame: RESULT prefix: %w", ErrShortBody)
	}
	c := bodyCursor{b: msg}
	kind, err := c.u32()
	if err != nil {
		return dst, false, fmt.Errorf("frame: RESULT kind: %w", err)
	}
	if kind != ResultKindRows {
		return dst, false, nil
	}
	if len(msg) < 12 {
		return dst, false, fmt.Errorf("frame: RESULT Rows metadata: %w", ErrShortBody)
	}
	n := int32(binary.BigEndian.Uint32(msg[8:]))
	_, cs, err := c.rowsMetadata()
	if err != nil {
		return dst, false, fmt.Errorf("frame: RESULT Rows metadata: %w", err)
	}
	if cs.Len() > 0 {
		columns = make([]string, 0, cs.Len())
		for col, ok := cs.Next(); ok; col, ok = cs.Next() {
			columns = append(columns, string(col.Name))
		}
	}
	if len(columns) != int(n) {
		return dst, false, fmt.Errorf("frame: RESULT Rows of %d columns, metadata for %d: %w", n, len(columns), ErrMalformed)
	}
	metaEnd := c.off
	count, err := c.u32()
	if err != nil {
		return dst, false, fmt.Errorf("frame: RESULT Rows count: %w", err)
	}
	// Every cell takes 4 bytes at least: a count the body cannot hold is
	// refused before anything is allocated for it.
	if int32(count) < 0 {
		return dst, false, fmt.Errorf("frame: RESULT Rows count %d: %w", int32(count), ErrMalformed)
	}
	if n == 0 && count > uint32(len(msg)) || int64(count)*int64(n) > int64(len(msg)-c.off)/4 {
		return dst, false, fmt.Errorf("frame: RESULT Rows count %d: %w", count, ErrShortBody)
	}

	start := len(dst)
	h.Flags &^= FlagCompression
	dst = AppendHeader(dst, h)
	dst = append(dst, body[:len(body)-len(msg)+metaEnd]...)
	countAt := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	row := Row{names: columns}
	if count > 0 {
		row.Cells = make([][]byte, n)
	}
	kept := 0
	for i := range int(count) {
		for j := range row.Cells {
			if row.Cells[j], err = c.bytes(); err != nil {
				return dst[:start], false, fmt.Errorf("frame: RESULT Rows row %d column %d: %w", i, j, err)
			}
		}
		if !edit(&row) {
			continue
		}
		kept++
		for _, v := range row.Cells {
			dst = AppendValue(dst, v)
		}
	}
	binary.BigEndian.PutUint32(dst[countAt:], uint32(kept))
	SetLength(dst[start:])
	return dst, true, nil
}

// AppendValue appends v as a [bytes]: null when v is nil.
func AppendValue(dst, v []byte) []byte {
	if v == nil {
		return binary.BigEndian.AppendUint32(dst, 0xFFFFFFFF)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(v)))
	return append(dst, v...)
}

// IntValue returns the value of an int (a CQL int: 4 bytes, big-endian).
func IntValue(n int32) []byte {
	return binary.BigEndian.AppendUint32(make([]byte, 0, 4), uint32(n))
}

// TextSetValue returns the value of a set<text> of the given elements, in
// the layout of protocol v3 and later; the caller keeps them sorted and
// distinct, as a set is.
func TextSetValue(elems ...string) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(elems)))
	for _, s := range elems {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	return b
}
