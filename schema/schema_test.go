package schema

import (
	"encoding/binary"
	"fmt"
	"testing"
)

func TestSnapshotTable(t *testing.T) {
	snap := NewSnapshot([]*Table{
		{Keyspace: "ks", Name: "t"},
		{Keyspace: "ks", Name: "MixedCase"},
		{Keyspace: "Other", Name: "t"},
	})
	tests := []struct {
		keyspace, table string
		found           bool
	}{
		{"ks", "t", true},
		{"ks", "MixedCase", true},
		{"ks", "mixedcase", false},
		{"Other", "t", true},
		{"other", "t", false},
		{"ks", "", false},
		{"", "", false},
		{"nope", "t", false},
	}
	for _, tt := range tests {
		got := snap.Table([]byte(tt.keyspace), []byte(tt.table))
		if (got != nil) != tt.found {
			t.Errorf("Table(%q, %q) = %v, want found %v", tt.keyspace, tt.table, got, tt.found)
		}
		if got != nil && (got.Keyspace != tt.keyspace || got.Name != tt.table) {
			t.Errorf("Table(%q, %q) = %s.%s", tt.keyspace, tt.table, got.Keyspace, got.Name)
		}
	}
	if snap.Len() != 3 {
		t.Errorf("Len = %d, want 3", snap.Len())
	}
	var nilSnap *Snapshot
	if nilSnap.Table([]byte("ks"), []byte("t")) != nil || nilSnap.Len() != 0 || nilSnap.Tables() != nil {
		t.Error("nil snapshot is not empty")
	}
}

func TestSnapshotTableDoesNotAllocate(t *testing.T) {
	snap := NewSnapshot([]*Table{{Keyspace: "keyspace_name", Name: "table_name"}})
	ks, tb, missing := []byte("keyspace_name"), []byte("table_name"), []byte("not_a_table_name")
	allocs := testing.AllocsPerRun(1000, func() {
		if snap.Table(ks, tb) == nil || snap.Table(ks, missing) != nil {
			panic("wrong lookup")
		}
	})
	if allocs != 0 {
		t.Errorf("Table allocates %v times per call", allocs)
	}
}

func BenchmarkSnapshotTable(b *testing.B) {
	var tables []*Table
	for i := range 1000 {
		tables = append(tables, &Table{Keyspace: fmt.Sprintf("ks%d", i%10), Name: fmt.Sprintf("table_%d", i)})
	}
	snap := NewSnapshot(tables)
	ks, tb := []byte("ks7"), []byte("table_517")
	b.ReportAllocs()
	for b.Loop() {
		if snap.Table(ks, tb) == nil {
			b.Fatal("missing")
		}
	}
}

func TestParseRateLimit(t *testing.T) {
	tests := []struct {
		name    string
		blob    []byte
		want    RateLimit
		wantErr bool
	}{
		{"no pairs", rateLimitBlob(), RateLimit{}, false},
		{"both", rateLimitBlob("max_reads_per_second", "1000", "max_writes_per_second", "50"), RateLimit{1000, 50}, false},
		{"reads only", rateLimitBlob("max_reads_per_second", "3"), RateLimit{MaxReadsPerSecond: 3}, false},
		{"unknown key skipped", rateLimitBlob("max_bytes", "x", "max_writes_per_second", "9"), RateLimit{MaxWritesPerSecond: 9}, false},
		{"largest", rateLimitBlob("max_reads_per_second", "4294967295"), RateLimit{MaxReadsPerSecond: 1<<32 - 1}, false},
		{"too large", rateLimitBlob("max_reads_per_second", "4294967296"), RateLimit{}, true},
		{"not decimal", rateLimitBlob("max_reads_per_second", "1e3"), RateLimit{}, true},
		{"negative", rateLimitBlob("max_reads_per_second", "-1"), RateLimit{}, true},
		{"empty blob", nil, RateLimit{}, true},
		{"short count", []byte{1, 0, 0}, RateLimit{}, true},
		{"count beyond pairs", rateLimitBlob("max_reads_per_second", "1")[:0:0], RateLimit{}, true},
		{"missing value", binary.LittleEndian.AppendUint32(rateLimitBlob("max_reads_per_second")[:4:4], 1), RateLimit{}, true},
		{"length beyond blob", append(binary.LittleEndian.AppendUint32([]byte{1, 0, 0, 0}, 1<<31), 'x'), RateLimit{}, true},
		{"trailing bytes", append(rateLimitBlob("max_reads_per_second", "1"), 0), RateLimit{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRateLimit(tt.blob)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseRateLimit(%x) error = %v, want error %v", tt.blob, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("ParseRateLimit(%x) = %+v, want %+v", tt.blob, got, tt.want)
			}
		})
	}
}

func FuzzParseRateLimit(f *testing.F) {
	f.Add(rateLimitBlob("max_reads_per_second", "10", "max_writes_per_second", "20"))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		// Any input must give a limit or an error, never a panic or a hang.
		ParseRateLimit(b)
	})
}

// rateLimitBlob encodes the per_partition_rate_limit extension of pairs.
func rateLimitBlob(pairs ...string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(pairs)/2))
	for _, s := range pairs {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	return b
}
