package frame

import (
	"bufio"
	"bytes"
	"fmt"
	"runtime"
	"testing"
)

// segmentLoads are the frames a v5 connection's segments carry in the
// benchmarks and allocation tests: one small answer, as a request-response
// driver gets, a batch of 32 pipelined ones, and one frame of 64 KiB, all
// compressible.
func segmentLoads() []struct {
	name   string
	frames []byte
} {
	row := bytes.Repeat([]byte("row text "), 24)
	one := frameBytes(5, 1, OpResult, row)
	return []struct {
		name   string
		frames []byte
	}{
		{"one", one},
		{"batch32", bytes.Repeat(one, 32)},
		{"64KiB", frameBytes(5, 1, OpResult, bytes.Repeat(row, 64<<10/len(row)))},
	}
}

// Encoding and decoding segments allocate nothing once their buffers have
// grown, compressed or not.
func TestSegmentsNoAllocation(t *testing.T) {
	for _, load := range segmentLoads() {
		for _, compressed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/lz4=%v", load.name, compressed), func(t *testing.T) {
				w := NewSegmentWriter(compressed)
				wire := w.AppendFrames(nil, load.frames)
				if n := testing.AllocsPerRun(100, func() { wire = w.AppendFrames(wire[:0], load.frames) }); n != 0 {
					t.Errorf("writing: %v allocations per call", n)
				}
				src := bytes.NewReader(wire)
				br := bufio.NewReader(src)
				r := NewSegmentReader(br, compressed)
				next := func() {
					src.Reset(wire)
					br.Reset(src)
					if _, _, err := r.Next(); err != nil {
						t.Fatal(err)
					}
				}
				next()
				if n := testing.AllocsPerRun(100, next); n != 0 {
					t.Errorf("reading: %v allocations per segment", n)
				}
			})
		}
	}
}

// A segment writer that has written LZ4 segments holds no LZ4 state once
// done, nor does one that negotiated no compression: an idle v5 connection
// keeps no compressor (one is 136 KiB).
func TestSegmentWritersHoldNothing(t *testing.T) {
	frames := segmentLoads()[1].frames
	heap := func() uint64 {
		var m runtime.MemStats
		// Three collections empty the pool, whose contents survive one.
		for range 3 {
			runtime.GC()
		}
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	for _, compressed := range []bool{false, true} {
		const n = 100
		ws := make([]*SegmentWriter, n)
		before := heap()
		for i := range ws {
			ws[i] = NewSegmentWriter(compressed)
			ws[i].AppendFrames(nil, frames)
		}
		per := (float64(heap()) - float64(before)) / n
		runtime.KeepAlive(ws)
		t.Logf("lz4=%v: %.0f B per writer", compressed, per)
		if per > 1<<10 {
			t.Errorf("lz4=%v: a writer that wrote a segment holds %.0f B, want under 1 KiB", compressed, per)
		}
	}
}

func BenchmarkSegmentWriter(b *testing.B) {
	for _, load := range segmentLoads() {
		for _, compressed := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/lz4=%v", load.name, compressed), func(b *testing.B) {
				w := NewSegmentWriter(compressed)
				var wire []byte
				b.SetBytes(int64(len(load.frames)))
				b.ReportAllocs()
				for b.Loop() {
					wire = w.AppendFrames(wire[:0], load.frames)
				}
			})
		}
	}
}

func BenchmarkSegmentReader(b *testing.B) {
	for _, load := range segmentLoads() {
		for _, compressed := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/lz4=%v", load.name, compressed), func(b *testing.B) {
				wire := NewSegmentWriter(compressed).AppendFrames(nil, load.frames)
				src := bytes.NewReader(wire)
				br := bufio.NewReaderSize(src, 16<<10)
				r := NewSegmentReader(br, compressed)
				b.SetBytes(int64(len(load.frames)))
				b.ReportAllocs()
				for b.Loop() {
					src.Reset(wire)
					br.Reset(src)
					if _, _, err := r.Next(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
