package frame

// Body compression of protocol v3 and v4 frames, negotiated in STARTUP.
//
// Supported: LZ4 (a 4-byte big-endian uncompressed length, then an LZ4
// block) and Snappy (a Snappy block). In v5, compression belongs to the
// segments (segment.go) and frame bodies are never compressed.

import (
	"encoding/binary"
	"fmt"
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

// Body returns the decompressed body, valid until the next call. A body
// that claims more than max bytes is refused before anything is allocated.
func (d *Decompressor) Body(c Compression, body []byte, max int) ([]byte, error) {
	switch c {
	case CompressionLZ4:
		if len(body) < 4 {
			return nil, fmt.Errorf("frame: LZ4 body of %d bytes has no length", len(body))
		}
		n := int(binary.BigEndian.Uint32(body))
		if n > max {
			return nil, fmt.Errorf("frame: LZ4 body claims %d bytes, over the maximum of %d", n, max)
		}
		d.buf = grow(d.buf, n)
		if n == 0 {
			return d.buf, nil
		}
		got, err := lz4.UncompressBlock(body[4:], d.buf)
		if err != nil || got != n {
			return nil, fmt.Errorf("frame: LZ4 body does not decompress to its %d bytes", n)
		}
		return d.buf, nil
	case CompressionSnappy:
		n, err := snappy.DecodedLen(body)
		if err != nil {
			return nil, fmt.Errorf("frame: Snappy body: %w", err)
		}
		if n > max {
			return nil, fmt.Errorf("frame: Snappy body claims %d bytes, over the maximum of %d", n, max)
		}
		d.buf = grow(d.buf, n)
		out, err := snappy.Decode(d.buf, body)
		if err != nil {
			return nil, fmt.Errorf("frame: Snappy body: %w", err)
		}
		return out, nil
	}
	return body, nil
}

// Compressor compresses frame bodies, reusing its state.
type Compressor struct {
	lz      lz4.Compressor
	scratch []byte
}

// AppendBody appends body compressed with c to dst.
func (z *Compressor) AppendBody(dst []byte, c Compression, body []byte) []byte {
	switch c {
	case CompressionLZ4:
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(body)))
		if len(body) == 0 {
			return dst
		}
		z.scratch = grow(z.scratch, lz4.CompressBlockBound(len(body)))
		n, err := z.lz.CompressBlock(body, z.scratch)
		if err != nil || n == 0 {
			// Incompressible input: a block of literals still decodes.
			n = literalBlock(z.scratch[:0], body)
		}
		return append(dst, z.scratch[:n]...)
	case CompressionSnappy:
		z.scratch = grow(z.scratch, snappy.MaxEncodedLen(len(body)))
		return append(dst, snappy.Encode(z.scratch, body)...)
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
