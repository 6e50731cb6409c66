package ratelimit

import (
	"encoding/binary"
	"testing"
)

// FuzzAllow runs a sequence of operations decoded from the input against a
// small limiter with a fake clock that jumps, steps back and idles, and
// checks that nothing panics and that the stats agree with the decisions.
//
// Input: byte 0 picks the algorithm and shard count; then 4-byte records:
// token (low 4 bits of byte 0, which also pick its limit, 0 meaning
// unlimited), label (bit 4), clock unit (bits 0-1) and clock step (bytes
// 1-3, signed).
func FuzzAllow(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 0})
	f.Add([]byte{1, 0xff, 0x10, 0, 0, 0x21, 0xff, 0xff, 0xff, 0x42, 0, 0, 0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		alg := algorithms[data[0]&1]
		clk := &fakeClock{ns: epoch}
		l := newTest(t, Config{Algorithm: alg, Shards: int(data[0]>>1&3) + 1, MemoryBytes: 4 << 12}, clk)
		var want Stats
		counted := map[Decision]uint64{}
		perKey := map[refKey]uint64{}
		monotonic := true
		for rec := data[1:]; len(rec) >= 4; rec = rec[4:] {
			tok := int64(rec[0] & 15)
			label := Label(rec[0] >> 4 & 1)
			// Each partition has a fixed limit, as a table's limit
			// is, for the no-rejection property below.
			limit := []uint32{0, 1, 2, 10, 1000, 1 << 20, 1<<32 - 1, 3}[tok&7]
			step := int64(int32(binary.LittleEndian.Uint32(rec)) >> 8)
			unit := []int64{1, 1e3, 1e6, 1e9}[rec[0]&3]
			clk.ns += step * unit
			monotonic = monotonic && step >= 0
			d := l.Allow(tok, label, limit)
			if limit == 0 {
				if d != Accept {
					t.Fatalf("limit 0: %v", d)
				}
				continue
			}
			counted[d]++
			k := refKey{tok, label}
			perKey[k]++
			// A partition that has seen no more operations than its
			// limit, ever, is never rejected by either algorithm, as
			// long as time does not run backwards (a token bucket
			// refills in the future then).
			if d == Reject && perKey[k] <= uint64(limit) && monotonic {
				t.Fatalf("op %d on %v with limit %d rejected", perKey[k], k, limit)
			}
		}
		want.Accepted, want.Rejected, want.FailedAllocations = counted[Accept], counted[Reject], counted[AcceptUntracked]
		st := l.Stats()
		if st.Accepted != want.Accepted || st.Rejected != want.Rejected || st.FailedAllocations != want.FailedAllocations {
			t.Fatalf("stats %+v, decisions %+v", st, want)
		}
		if st.Entries > st.Capacity || st.Evictions > st.Allocations {
			t.Fatalf("inconsistent stats %+v", st)
		}
	})
}
