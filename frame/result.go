package frame

// RowCount returns the row count of a RESULT message of kind Rows (msg as
// ResponseMessage returns it), read from its header: the rows themselves
// are not decoded, but the metadata before the count is checked as it is
// skipped. ok is false for any other message, or a malformed one. It does
// not allocate.
func RowCount(msg []byte) (n int, ok bool) {
	if kind, ok := ResultKind(msg); !ok || kind != ResultKindRows {
		return 0, false
	}
	c := bodyCursor{b: msg, off: 4}
	if _, _, err := c.rowsMetadata(); err != nil {
		return 0, false
	}
	rows, err := c.u32()
	if err != nil || int32(rows) < 0 {
		return 0, false
	}
	return int(rows), true
}
