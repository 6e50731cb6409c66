package frame

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/golang/snappy"
)

// A body's claimed length must be backed by bytes that can decode to it:
// a six-byte LZ4 body claiming 16 MiB is refused without a 16 MiB buffer,
// while real bodies of high ratio still decode.
func TestDecodedLenClaims(t *testing.T) {
	var z Compressor
	zeros := make([]byte, 1<<20)
	lz4Zeros := z.AppendBody(nil, CompressionLZ4, zeros)
	snappyZeros := snappy.Encode(nil, zeros)
	lz4Claim := func(n uint32, block ...byte) []byte { return append(binary.BigEndian.AppendUint32(nil, n), block...) }
	snappyClaim := func(n uint64, rest ...byte) []byte { return append(binary.AppendUvarint(nil, n), rest...) }
	cases := []struct {
		name    string
		c       Compression
		body    []byte
		want    int
		wantErr string
	}{
		{"lz4 real, 1 MiB of zeros", CompressionLZ4, lz4Zeros, 1 << 20, ""},
		{"lz4 empty", CompressionLZ4, lz4Claim(0), 0, ""},
		{"lz4 no length", CompressionLZ4, []byte{0, 1}, 0, "has no length"},
		{"lz4 six bytes claiming 16 MiB", CompressionLZ4, lz4Claim(16<<20-1, 0, 0), 0, "more than it can decode to"},
		{"lz4 over max", CompressionLZ4, lz4Claim(32<<20, make([]byte, 1<<20)...), 0, "over the maximum"},
		{"snappy real", CompressionSnappy, snappyZeros, 1 << 20, ""},
		{"snappy six bytes claiming 16 MiB", CompressionSnappy, snappyClaim(16<<20-1, 0, 0), 0, "more than it can decode to"},
		{"none", CompressionNone, []byte("abc"), 3, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, err := DecodedLen(tc.c, tc.body, 16<<20)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("DecodedLen = %d, %v; want an error with %q", n, err, tc.wantErr)
				}
				return
			}
			if err != nil || n != tc.want {
				t.Fatalf("DecodedLen = %d, %v; want %d", n, err, tc.want)
			}
		})
	}
	var d Decompressor
	if out, err := d.Body(CompressionLZ4, lz4Zeros, 16<<20); err != nil || !bytes.Equal(out, zeros) {
		t.Fatalf("Body of 1 MiB of zeros: %d bytes, %v", len(out), err)
	}
}

// A body that claims a length it could decode to but does not decode
// leaves the Decompressor no buffer of that size.
func TestDecompressorDropsFailedBuffer(t *testing.T) {
	var d Decompressor
	garbage := append(binary.BigEndian.AppendUint32(nil, 8<<20), bytes.Repeat([]byte{0xff}, 64<<10)...)
	if _, err := d.Body(CompressionLZ4, garbage, 16<<20); err == nil {
		t.Fatal("garbage decoded")
	}
	if cap(d.buf) > 64<<10 {
		t.Errorf("Decompressor keeps %d bytes after a body that failed to decode", cap(d.buf))
	}
}
