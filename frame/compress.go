package frame

// Body compression of protocol v3 and v4 frames, negotiated in STARTUP.
//
// Supported: LZ4 (a 4-byte big-endian uncompressed length, then an LZ4
// block) and Snappy (a Snappy block). In v5, compression belongs to the
// segments (segment.go) and frame bodies are never compressed.

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/golang/snappy"
	"github.com/pierrec/lz4/v4"
)

// Compression is a body compression algorithm.
type Compression uint8

// Compression algorithms, by their STARTUP names.
const (
	CompressionNone Compression = iota
	CompressionLZ4
	CompressionSnappy
)

// ParseCompression reads the COMPRESSION value of a STARTUP message.
// Names are compared in any case, as Cassandra does.
func ParseCompression(name string) (Compression, error) {
	switch strings.ToLower(name) {
	case "":
		return CompressionNone, nil
	case "lz4":
		return CompressionLZ4, nil
	case "snappy":
		return CompressionSnappy, nil
	}
	return CompressionNone, fmt.Errorf("frame: unknown compression %q", name)
}

// Decompressor decompresses frame bodies into a buffer it reuses.
type Decompressor struct {
	buf []byte
}

// Release gives back a buffer a large body grew, so that a connection
// idle after one does not keep it.
func (d *Decompressor) Release() {
	if cap(d.buf) > 64<<10 {
		d.buf = nil
	}
}

// Most bytes one byte of a compressed body can decode to. An LZ4 match
// length grows by 255 for each byte that encodes it; a Snappy copy of 64
// bytes takes 3. A body claiming more than its bytes can decode to is
// refused before a buffer is sized by the claim.
const (
	lz4MaxRatio    = 255
	snappyMaxRatio = 22
)

// DecodedLen returns the length body claims to decompress to with c,
// after checking the claim against max and against what body's length
// can decode to at most, so that a short body cannot make its reader set
// aside a large buffer. For CompressionNone it is len(body).
func DecodedLen(c Compression, body []byte, max int) (int, error) {
	switch c {
	case CompressionLZ4:
		if len(body) < 4 {
			return 0, fmt.Errorf("frame: LZ4 body of %d bytes has no length", len(body))
		}
		n := int(binary.BigEndian.Uint32(body))
		if n > max {
			return 0, fmt.Errorf("frame: LZ4 body claims %d bytes, over the maximum of %d", n, max)
		}
		if n > lz4MaxRatio*(len(body)-4) {
			return 0, fmt.Errorf("frame: LZ4 body of %d bytes claims %d, more than it can decode to", len(body), n)
		}
		return n, nil
	case CompressionSnappy:
		n, err := snappy.DecodedLen(body)
		if err != nil {
			return 0, fmt.Errorf("frame: Snappy body: %w", err)
		}
		if n > max {
			return 0, fmt.Errorf("frame: Snappy body claims %d bytes, over the maximum of %d", n, max)
		}
		if n > snappyMaxRatio*len(body) {
			return 0, fmt.Errorf("frame: Snappy body of %d bytes claims %d, more than it can decode to", len(body), n)
		}
		return n, nil
	}
	return len(body), nil
}

// Body returns the decompressed body, valid until the next call. A body
// whose claim DecodedLen refuses is refused before anything is allocated,
// and a buffer grown for a body that then fails to decode is let go.
func (d *Decompressor) Body(c Compression, body []byte, max int) ([]byte, error) {
	if c == CompressionNone {
		return body, nil
	}
	n, err := DecodedLen(c, body, max)
	if err != nil {
		return nil, err
	}
	d.buf = grow(d.buf, n)
	out, err := d.decode(c, body, n)
	if err != nil {
		d.Release()
		return nil, err
	}
	return out, nil
}

func (d *Decompressor) decode(c Compression, body []byte, n int) ([]byte, error) {
	if c == CompressionSnappy {
		out, err := snappy.Decode(d.buf, body)
		if err != nil {
			return nil, fmt.Errorf("frame: Snappy body: %w", err)
		}
		return out, nil
	}
	if n == 0 {
		return d.buf, nil
	}
	got, err := lz4.UncompressBlock(body[4:], d.buf)
	if err != nil || got != n {
		return nil, fmt.Errorf("frame: LZ4 body does not decompress to its %d bytes", n)
	}
	return d.buf, nil
}

// Compressor compresses frame bodies. Like SegmentWriter it holds no LZ4
// state: it borrows a compressor from compressors for each body.
type Compressor struct{}

// AppendBody appends body compressed with c to dst.
func (z *Compressor) AppendBody(dst []byte, c Compression, body []byte) []byte {
	switch c {
	case CompressionLZ4:
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(body)))
		if len(body) == 0 {
			return dst
		}
		// Compressed in place, past the length.
		start := len(dst)
		bound := lz4.CompressBlockBound(len(body))
		dst = slices.Grow(dst, bound)
		lz := compressors.Get().(*lz4.Compressor)
		n, err := lz.CompressBlock(body, dst[start:start+bound])
		compressors.Put(lz)
		if err != nil || n == 0 {
			// Incompressible input: a block of literals still decodes.
			n = literalBlock(dst[start:start], body)
		}
		return dst[:start+n]
	case CompressionSnappy:
		start, bound := len(dst), snappy.MaxEncodedLen(len(body))
		dst = slices.Grow(dst, bound)
		n := len(snappy.Encode(dst[start:start+bound], body))
		return dst[:start+n]
	}
	return append(dst, body...)
}

// literalBlock writes body as one LZ4 sequence of literals into dst's
// backing array (sized by CompressBlockBound) and returns its length.
func literalBlock(dst, body []byte) int {
	n := len(body)
	if n < 15 {
		dst = append(dst, byte(n<<4))
	} else {
		dst = append(dst, 0xf0)
		for rest := n - 15; ; rest -= 255 {
			if rest < 255 {
				dst = append(dst, byte(rest))
				break
			}
			dst = append(dst, 255)
		}
	}
	dst = append(dst, body...)
	return len(dst)
}
