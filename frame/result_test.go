package frame

import (
	"testing"

	"github.com/datastax/go-cassandra-native-protocol/message"
)

func TestRowCountOracle(t *testing.T) {
	pagingState := []byte{1, 2, 3}
	for _, v := range []uint8{3, 4, 5} {
		for _, prefix := range []int{noPrefix, tracedWarnings} {
			for _, tc := range []struct {
				name string
				msg  message.Message
				rows int
				ok   bool
			}{
				{"rows with metadata", systemRows(1, 2, 3), 3, true},
				{"no rows", systemRows(), 0, true},
				{"no metadata, more pages", &message.RowsResult{Metadata: &message.RowsMetadata{ColumnCount: 2, PagingState: pagingState}, Data: message.RowSet{{{1}, {2}}, {{3}, {4}}}}, 2, true},
				{"void", &message.VoidResult{}, 0, false},
				{"set keyspace", &message.SetKeyspaceResult{Keyspace: "ks"}, 0, false},
			} {
				raw := encodeOracle(t, oracleResponse(t, v, tc.msg, prefix))
				h, err := ParseHeader(raw)
				if err != nil {
					t.Fatal(err)
				}
				msg, ok := ResponseMessage(raw[HeaderSize:], h)
				if !ok {
					t.Fatalf("v%d %s: no message", v, tc.name)
				}
				n, ok := RowCount(msg)
				if n != tc.rows || ok != tc.ok {
					t.Errorf("v%d prefix %d %s: RowCount = %d, %v; want %d, %v", v, prefix, tc.name, n, ok, tc.rows, tc.ok)
				}
				// Cut anywhere before the end of the count: never a count.
				for cut := 0; tc.ok && cut < rowCountEnd(msg); cut++ {
					if _, ok := RowCount(msg[:cut]); ok {
						t.Fatalf("v%d %s: RowCount of %d of %d bytes found a count", v, tc.name, cut, len(msg))
					}
				}
			}
		}
	}
}

// rowCountEnd is where the row count of a Rows message ends.
func rowCountEnd(msg []byte) int {
	c := bodyCursor{b: msg, off: 4}
	c.rowsMetadata()
	return c.off + 4
}

func FuzzRowCount(f *testing.F) {
	f.Add([]byte{0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add(encodeOracle(f, oracleResponse(f, 4, systemRows(1, 2), noPrefix))[HeaderSize:])
	f.Fuzz(func(t *testing.T, msg []byte) {
		n, ok := RowCount(msg)
		if ok && (n < 0 || len(msg) < 12) {
			t.Fatalf("RowCount(%x) = %d, %v", msg, n, ok)
		}
	})
}
