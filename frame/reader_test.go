package frame

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

func frameBytes(v uint8, stream int16, op Opcode, body []byte) []byte {
	f := AppendHeader(nil, Header{Version: v, Stream: stream, Opcode: op, Length: len(body)})
	return append(f, body...)
}

func TestReaderPlainFrames(t *testing.T) {
	var in []byte
	in = append(in, frameBytes(4, 1, OpQuery, []byte("abc"))...)
	in = append(in, frameBytes(4, 2, OpQuery, make([]byte, 100))...) // over the max
	in = append(in, frameBytes(3, 3, OpOptions, nil)...)
	r := NewReader(bufio.NewReader(bytes.NewReader(in)), 50)

	f, h, err := r.Next()
	if err != nil || h.Stream != 1 || string(f[HeaderSize:]) != "abc" {
		t.Fatalf("first: %v %v %q", h, err, f)
	}
	_, h, err = r.Next()
	var tl *TooLargeError
	if !errors.As(err, &tl) || h.Stream != 2 {
		t.Fatalf("second: want TooLargeError on stream 2, got %v %v", h, err)
	}
	_, h, err = r.Next()
	if err != nil || h.Stream != 3 || h.Version != 3 || h.Opcode != OpOptions {
		t.Fatalf("third: %v %v", h, err)
	}
	if _, _, err = r.Next(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}

// A stream that ends before a frame's first byte ends with io.EOF; one that
// ends after it, wherever, with a TruncatedError: the peer left part way
// through a frame.
func TestReaderTruncated(t *testing.T) {
	body := []byte("abcdef")
	large := bytes.Repeat([]byte("x"), MaxSegmentPayload) // over two segments
	tests := []struct {
		name     string
		in       []byte
		segments bool
		max      int
	}{
		{"v4 frame", frameBytes(4, 1, OpQuery, body), false, 1 << 10},
		{"v4 frame over the maximum", frameBytes(4, 1, OpQuery, body), false, 2},
		{"v5 segment", NewSegmentWriter(false).AppendFrames(nil, frameBytes(5, 1, OpQuery, body)), true, 1 << 10},
		{"v5 LZ4 segment", NewSegmentWriter(true).AppendFrames(nil, frameBytes(5, 1, OpQuery, body)), true, 1 << 10},
		{"v5 frame over segments", NewSegmentWriter(false).AppendFrames(nil, frameBytes(5, 1, OpQuery, large)), true, 1 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cuts := make([]int, len(tt.in))
			for n := range cuts {
				cuts[n] = n
			}
			if len(tt.in) > 1<<10 {
				// Around the end of the first segment (a 6-byte header and
				// a 4-byte CRC) rather than everywhere.
				end := 6 + MaxSegmentPayload + 4
				cuts = []int{0, 1, 5, 6, 100, end - 1, end, end + 1, end + 6, end + 7, len(tt.in) - 1}
			}
			for _, n := range cuts {
				r := NewReader(bufio.NewReader(bytes.NewReader(tt.in[:n])), tt.max)
				if tt.segments {
					r.UseSegments(strings.Contains(tt.name, "LZ4"))
				}
				_, _, err := r.Next()
				var cut *TruncatedError
				switch {
				case n == 0 && err != io.EOF:
					t.Fatalf("no bytes: %v, want EOF", err)
				case n > 0 && (!errors.As(err, &cut) || !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF)):
					t.Fatalf("%d of %d bytes: %v, want a TruncatedError of an EOF", n, len(tt.in), err)
				}
			}
		})
	}
}

func TestReaderUnsupportedVersion(t *testing.T) {
	for _, v := range []byte{1, 2, 6, 0x41, 0x85 + 2} {
		r := NewReader(bufio.NewReader(bytes.NewReader([]byte{v, 0, 0, 0, 5, 0, 0, 0, 0})), 1<<10)
		var uv *UnsupportedVersionError
		if _, _, err := r.Next(); !errors.As(err, &uv) {
			t.Errorf("version %#x: %v", v, err)
		}
	}
}

func TestReaderSegments(t *testing.T) {
	small := frameBytes(5, 1, OpQuery, []byte("small"))
	big := frameBytes(5, 2, OpQuery, bytes.Repeat([]byte("x"), 300_000))
	for _, compressed := range []bool{false, true} {
		w := NewSegmentWriter(compressed)
		var in []byte
		in = w.AppendFrames(in, append(append(append([]byte{}, small...), small...), big...))
		in = w.AppendFrames(in, small)
		r := NewReader(bufio.NewReader(bytes.NewReader(in)), 1<<20)
		r.UseSegments(compressed)
		for i, want := range [][]byte{small, small, big, small} {
			f, _, err := r.Next()
			if err != nil || !bytes.Equal(f, want) {
				t.Fatalf("compressed=%v frame %d: %v (len %d, want %d)", compressed, i, err, len(f), len(want))
			}
		}
		// The same stream with a smaller maximum refuses the big frame and
		// carries on.
		r = NewReader(bufio.NewReader(bytes.NewReader(in)), 1<<10)
		r.UseSegments(compressed)
		for i := range 4 {
			_, _, err := r.Next()
			var tl *TooLargeError
			if (i == 2) != errors.As(err, &tl) || (i != 2 && err != nil) {
				t.Fatalf("compressed=%v with max 1 KiB, frame %d: %v", compressed, i, err)
			}
		}
	}
}

func TestReaderNoAllocation(t *testing.T) {
	one := frameBytes(4, 1, OpQuery, make([]byte, 200))
	in := bytes.Repeat(one, 2000)
	br := bytes.NewReader(in)
	r := NewReader(bufio.NewReader(br), 1<<20)
	r.Next()
	if n := testing.AllocsPerRun(1000, func() {
		if _, _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%v allocations per frame", n)
	}
}

// A large frame does not stay with the reader once returned: a connection
// that carried one holds no more than keepMax afterwards, and frames of the
// usual size still reuse the buffer it kept.
func TestReaderGivesBackLargeFrames(t *testing.T) {
	small := frameBytes(5, 1, OpQuery, make([]byte, 200))
	medium := frameBytes(5, 2, OpQuery, make([]byte, keepMax-HeaderSize))
	large := frameBytes(5, 3, OpQuery, bytes.Repeat([]byte("large"), 200_000))
	for _, tc := range []struct {
		name                 string
		segments, compressed bool
	}{
		{"plain", false, false},
		{"segments", true, false},
		{"lz4 segments", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frames := [][]byte{small, large, small, medium, large, medium}
			var in []byte
			for _, f := range frames {
				if tc.segments {
					in = NewSegmentWriter(tc.compressed).AppendFrames(in, f)
				} else {
					in = append(in, f...)
				}
			}
			const smalls = 100
			for range smalls {
				if tc.segments {
					in = NewSegmentWriter(tc.compressed).AppendFrames(in, small)
				} else {
					in = append(in, small...)
				}
			}
			r := NewReader(bufio.NewReader(bytes.NewReader(in)), 4<<20)
			if tc.segments {
				r.UseSegments(tc.compressed)
			}
			for i, want := range frames {
				f, _, err := r.Next()
				if err != nil || !bytes.Equal(f, want) {
					t.Fatalf("frame %d: %v (len %d, want %d)", i, err, len(f), len(want))
				}
				if cap(r.buf) > keepMax {
					t.Fatalf("after frame %d of %d bytes the reader keeps %d bytes, want at most %d", i, len(f), cap(r.buf), keepMax)
				}
			}
			if tc.segments {
				// Idle, the segment reader keeps no more than frames
				// up to keepMax grow.
				r.Shrink()
				if cap(r.segs.buf) > keepMax || cap(r.segs.out) > keepMax {
					t.Fatalf("idle after large segments the reader keeps %d and %d bytes, want at most %d each", cap(r.segs.buf), cap(r.segs.out), keepMax)
				}
			}
			if n := testing.AllocsPerRun(smalls-1, func() {
				if _, _, err := r.Next(); err != nil {
					t.Fatal(err)
				}
			}); n != 0 {
				t.Errorf("%v allocations per small frame after large ones", n)
			}
		})
	}
}

func BenchmarkReaderPlain(b *testing.B) {
	one := frameBytes(4, 1, OpExecute, make([]byte, 100))
	in := bytes.Repeat(one, 1000)
	br := bytes.NewReader(in)
	bb := bufio.NewReader(br)
	r := NewReader(bb, 1<<20)
	b.SetBytes(int64(len(one)))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%1000 == 0 {
			br.Reset(in)
			bb.Reset(br)
		}
		if _, _, err := r.Next(); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzReader(f *testing.F) {
	f.Add(frameBytes(4, 1, OpQuery, []byte("abc")), false, false)
	f.Add(frameBytes(3, -1, OpEvent, nil), false, false)
	seg := NewSegmentWriter(false).AppendFrames(nil, frameBytes(5, 1, OpQuery, []byte("x")))
	f.Add(seg, true, false)
	lz := NewSegmentWriter(true).AppendFrames(nil, frameBytes(5, 1, OpQuery, bytes.Repeat([]byte("ab"), 100)))
	f.Add(lz, true, true)
	f.Fuzz(func(t *testing.T, in []byte, segments, compressed bool) {
		r := NewReader(bufio.NewReader(bytes.NewReader(in)), 1<<16)
		if segments {
			r.UseSegments(compressed)
		}
		for range 100 {
			f, h, err := r.Next()
			if err != nil {
				var tl *TooLargeError
				if errors.As(err, &tl) {
					continue
				}
				// The input's end is a frame's end or a truncation.
				var cut *TruncatedError
				if errors.Is(err, io.ErrUnexpectedEOF) && !errors.As(err, &cut) {
					t.Fatalf("cut short without a TruncatedError: %v", err)
				}
				return
			}
			if len(f) != HeaderSize+h.Length {
				t.Fatalf("frame of %d bytes, header says %d", len(f), HeaderSize+h.Length)
			}
		}
	})
}

func FuzzDecompressor(f *testing.F) {
	var z Compressor
	text := bytes.Repeat([]byte("SELECT * FROM ks.t WHERE k = 1;"), 20)
	f.Add(uint8(CompressionLZ4), z.AppendBody(nil, CompressionLZ4, text))
	f.Add(uint8(CompressionSnappy), z.AppendBody(nil, CompressionSnappy, text))
	f.Add(uint8(CompressionLZ4), []byte{0xff, 0xff, 0xff, 0xff, 0})
	f.Fuzz(func(t *testing.T, c uint8, body []byte) {
		var d Decompressor
		out, err := d.Body(Compression(c%3), body, 1<<16)
		if err == nil && c%3 != 0 && len(out) > 1<<16 {
			t.Fatalf("%d bytes decompressed past the maximum", len(out))
		}
	})
}

func TestCompressorRoundTrip(t *testing.T) {
	var z Compressor
	var d Decompressor
	for _, c := range []Compression{CompressionNone, CompressionLZ4, CompressionSnappy} {
		for _, body := range [][]byte{nil, []byte("x"), bytes.Repeat([]byte("abc"), 10000), {0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}} {
			out, err := d.Body(c, z.AppendBody(nil, c, body), 1<<20)
			if err != nil || !bytes.Equal(out, body) {
				t.Errorf("compression %d, %d bytes: %v", c, len(body), err)
			}
		}
	}
	if _, err := d.Body(CompressionLZ4, []byte{0, 0x10, 0, 0, 0}, 1<<10); err == nil {
		t.Error("LZ4 length over the maximum accepted")
	}
	if _, err := ParseCompression("LZ4"); err != nil {
		t.Error("names are case-insensitive")
	}
	if _, err := ParseCompression("zstd"); err == nil {
		t.Error("unknown compression accepted")
	}
}

// budgetLog is a Budget that records what is taken and given back, and
// refuses once refuse is set.
type budgetLog struct {
	held, took int
	refuse     bool
}

func (b *budgetLog) Take(n int) error {
	if b.refuse {
		return errors.New("budget closed")
	}
	b.held += n
	b.took++
	return nil
}

func (b *budgetLog) Give(n int) { b.held -= n }

// A frame over 64 KiB takes its size from the budget before it is read and
// gives it back on the next Next or on Release; smaller frames take nothing;
// a refused Take is Next's error.
func TestReaderBudget(t *testing.T) {
	small := frameBytes(5, 1, OpQuery, make([]byte, 200))
	// Over a v5 segment's payload too, so that it is assembled, not read in
	// place from the segment reader's buffer.
	large := frameBytes(5, 2, OpQuery, make([]byte, 200_000))
	for _, segments := range []bool{false, true} {
		t.Run(fmt.Sprintf("segments=%v", segments), func(t *testing.T) {
			var in []byte
			for _, f := range [][]byte{small, large, small, large, large} {
				if segments {
					in = NewSegmentWriter(false).AppendFrames(in, f)
				} else {
					in = append(in, f...)
				}
			}
			b := &budgetLog{}
			r := NewReader(bufio.NewReader(bytes.NewReader(in)), 1<<20)
			r.SetBudget(b)
			if segments {
				r.UseSegments(false)
			}
			steps := []struct{ held, took int }{{0, 0}, {len(large), 1}, {0, 1}, {len(large), 2}}
			for i, want := range steps {
				if _, _, err := r.Next(); err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				if b.held != want.held || b.took != want.took {
					t.Fatalf("after frame %d: %d bytes held over %d takes, want %d over %d", i, b.held, b.took, want.held, want.took)
				}
			}
			r.Release()
			if b.held != 0 {
				t.Fatalf("after Release: %d bytes held", b.held)
			}
			b.refuse = true
			if _, _, err := r.Next(); err == nil || !strings.Contains(err.Error(), "budget closed") {
				t.Fatalf("refused budget: Next returned %v", err)
			}
		})
	}
}

// Shrink, between bursts, drops the segment buffers that a segment over 64
// KiB grew, and keeps those of small segments.
func TestReaderShrink(t *testing.T) {
	for _, compressed := range []bool{false, true} {
		t.Run(fmt.Sprintf("lz4=%v", compressed), func(t *testing.T) {
			big := frameBytes(5, 1, OpQuery, bytes.Repeat([]byte("segment "), 12_000))
			small := frameBytes(5, 2, OpQuery, make([]byte, 100))
			w := NewSegmentWriter(compressed)
			in := w.AppendFrames(nil, big)
			in = w.AppendFrames(in, small)
			r := NewReader(bufio.NewReader(bytes.NewReader(in)), 1<<20)
			r.UseSegments(compressed)
			if f, _, err := r.Next(); err != nil || !bytes.Equal(f, big) {
				t.Fatalf("big frame: %v", err)
			}
			if held := cap(r.segs.buf) + cap(r.segs.out); held <= keepMax {
				t.Fatalf("the segment reader holds %d bytes after a %d-byte segment: the test proves nothing", held, len(big))
			}
			r.Shrink()
			if cap(r.segs.buf) > keepMax || cap(r.segs.out) > keepMax {
				t.Errorf("after Shrink the segment reader holds buffers of %d and %d bytes", cap(r.segs.buf), cap(r.segs.out))
			}
			if f, _, err := r.Next(); err != nil || !bytes.Equal(f, small) {
				t.Fatalf("small frame: %v", err)
			}
			kept := cap(r.segs.buf) + cap(r.segs.out)
			r.Shrink()
			if got := cap(r.segs.buf) + cap(r.segs.out); got != kept {
				t.Errorf("Shrink dropped the buffers of a small segment (%d bytes, now %d)", kept, got)
			}
		})
	}
}
