package frame

// Protocol v5 segments (native_protocol_v5.spec, section 2).
//
// Supported: uncompressed segments (6-byte header) and LZ4 segments (8-byte
// header, a raw LZ4 block, an uncompressed length of 0 meaning the payload
// went uncompressed), self-contained segments holding whole frames and
// frames split over several segments. Both CRCs are checked on read.
//
// Header bytes are little-endian, as Cassandra writes them: the lengths and
// the self-contained bit form one integer whose low 3 (or 5) bytes come
// first, followed by their CRC24, also 3 bytes little-endian. The payload
// is followed by its CRC32, 4 bytes little-endian.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"sync"

	"github.com/pierrec/lz4/v4"
)

// MaxSegmentPayload is the largest payload one segment carries.
const MaxSegmentPayload = 1<<17 - 1

// ErrBadCRC reports a segment whose header or payload fails its checksum.
var ErrBadCRC = errors.New("frame: segment checksum mismatch")

const (
	crc24Init = 0x875060
	crc24Poly = 0x1974F0B
)

// crc32Prefix primes the payload CRC32 so that an all-zero segment does not
// checksum to zero.
var crc32Prefix = []byte{0xFA, 0x2D, 0x55, 0xCA}

var crc32Primed = crc32.Update(0, crc32.IEEETable, crc32Prefix)

// crc24 is Cassandra's CRC24 of the low n bytes of v, low byte first.
func crc24(v uint64, n int) uint32 {
	crc := uint32(crc24Init)
	for ; n > 0; n-- {
		crc ^= uint32(v&0xff) << 16
		v >>= 8
		for range 8 {
			crc <<= 1
			if crc&0x1000000 != 0 {
				crc ^= crc24Poly
			}
		}
	}
	return crc & 0xffffff
}

func payloadCRC(p []byte) uint32 { return crc32.Update(crc32Primed, crc32.IEEETable, p) }

// SegmentReader reads v5 segments from a byte stream. It holds no LZ4
// state, which decompressing a block does not need, and its buffers, for
// a segment as read and decompressed, follow the segments it reads (see
// Reader.Shrink).
type SegmentReader struct {
	br         *bufio.Reader
	compressed bool
	buf        []byte // the wire payload
	out        []byte // the decompressed payload
}

// NewSegmentReader returns a reader of segments from br; compressed says
// whether the connection negotiated LZ4.
func NewSegmentReader(br *bufio.Reader, compressed bool) *SegmentReader {
	return &SegmentReader{br: br, compressed: compressed}
}

// shrink drops buffers over keepMax, which only segments over 64 KiB grow.
func (s *SegmentReader) shrink() {
	if cap(s.buf) > keepMax {
		s.buf = nil
	}
	if cap(s.out) > keepMax {
		s.out = nil
	}
}

// Next reads one segment and returns its (decompressed) payload, valid until
// the next call, and whether it is self-contained.
func (s *SegmentReader) Next() (payload []byte, selfContained bool, err error) {
	hlen := 3
	if s.compressed {
		hlen = 5
	}
	hb, err := s.br.Peek(hlen + 3)
	if err != nil {
		if err == io.EOF && len(hb) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, false, fmt.Errorf("reading segment header: %w", err)
	}
	var head uint64
	for i := hlen - 1; i >= 0; i-- {
		head = head<<8 | uint64(hb[i])
	}
	want := uint32(hb[hlen]) | uint32(hb[hlen+1])<<8 | uint32(hb[hlen+2])<<16
	if crc24(head, hlen) != want {
		return nil, false, fmt.Errorf("%w: header", ErrBadCRC)
	}
	s.br.Discard(hlen + 3)

	n := int(head & MaxSegmentPayload)
	var uncompressed int
	if s.compressed {
		uncompressed = int(head >> 17 & MaxSegmentPayload)
		selfContained = head&(1<<34) != 0
	} else {
		selfContained = head&(1<<17) != 0
	}
	s.buf = grow(s.buf, n+4)
	if _, err := io.ReadFull(s.br, s.buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, false, fmt.Errorf("reading segment payload: %w", err)
	}
	payload = s.buf[:n]
	if payloadCRC(payload) != binary.LittleEndian.Uint32(s.buf[n:]) {
		return nil, false, fmt.Errorf("%w: payload", ErrBadCRC)
	}
	if uncompressed == 0 {
		return payload, selfContained, nil
	}
	s.out = grow(s.out, uncompressed)
	got, err := lz4.UncompressBlock(payload, s.out)
	if err != nil || got != uncompressed {
		return nil, false, fmt.Errorf("%w: LZ4 segment does not decompress to its %d bytes", ErrCorrupt, uncompressed)
	}
	return s.out, selfContained, nil
}

// SegmentWriter encodes v5 segments. It holds no buffer and no LZ4 state:
// segments are built in the caller's dst, and a compressed one borrows a
// compressor from compressors for as long as it takes to compress, so an
// idle connection's writer, or one that negotiated no compression, costs
// no more than the struct.
type SegmentWriter struct {
	compressed bool
}

// compressors are LZ4 compressors, 136 KiB of hash table each, shared by
// every writer in the process: a compressor's state lives for one block,
// so the pool holds about as many as blocks are compressed at once. One
// per writer would cost every v5 connection two, idle or not; one taken
// when a writer has frames and dropped when it has none would be allocated
// again for every answer to a request-response driver, after which the
// writer is idle.
var compressors = sync.Pool{New: func() any { return new(lz4.Compressor) }}

// NewSegmentWriter returns a writer of segments; compressed says whether
// the connection negotiated LZ4.
func NewSegmentWriter(compressed bool) *SegmentWriter {
	return &SegmentWriter{compressed: compressed}
}

// AppendSegment appends one segment carrying payload, which must be at most
// MaxSegmentPayload bytes. A compressed segment whose payload LZ4 does not
// shrink goes uncompressed, as the spec allows.
func (w *SegmentWriter) AppendSegment(dst, payload []byte, selfContained bool) []byte {
	if !w.compressed {
		return appendSegment(dst, payload, selfContained, nil)
	}
	lz := compressors.Get().(*lz4.Compressor)
	dst = appendSegment(dst, payload, selfContained, lz)
	compressors.Put(lz)
	return dst
}

// appendSegment appends one segment carrying payload: uncompressed if lz
// is nil, else in the LZ4 format, compressed with lz if that shrinks it.
// The payload is compressed in place, into dst past the header.
func appendSegment(dst, payload []byte, selfContained bool, lz *lz4.Compressor) []byte {
	n := uint64(len(payload))
	if lz == nil {
		head := n
		if selfContained {
			head |= 1 << 17
		}
		dst = appendLE(dst, head, 3)
		dst = appendLE(dst, uint64(crc24(head, 3)), 3)
		dst = append(dst, payload...)
		return binary.LittleEndian.AppendUint32(dst, payloadCRC(payload))
	}
	const hlen = 8
	start := len(dst)
	bound := lz4.CompressBlockBound(len(payload))
	dst = slices.Grow(dst, hlen+bound+4)
	body := dst[start+hlen : start+hlen+bound]
	var head uint64
	if c, err := lz.CompressBlock(payload, body); err == nil && c > 0 && c < len(payload) {
		body = body[:c]
		head = uint64(c) | n<<17
	} else {
		body = append(body[:0], payload...)
		head = n
	}
	if selfContained {
		head |= 1 << 34
	}
	dst = appendLE(dst[:start], head, 5)
	dst = appendLE(dst, uint64(crc24(head, 5)), 3)
	dst = dst[:start+hlen+len(body)]
	return binary.LittleEndian.AppendUint32(dst, payloadCRC(body))
}

// AppendFrames appends segments carrying frames, one or more whole encoded
// frames: consecutive frames share self-contained segments up to
// MaxSegmentPayload bytes, and a larger frame is split over as many
// non-self-contained segments as it needs. dst must not share memory
// with frames.
func (w *SegmentWriter) AppendFrames(dst, frames []byte) []byte {
	var lz *lz4.Compressor
	if w.compressed {
		lz = compressors.Get().(*lz4.Compressor)
		defer compressors.Put(lz)
	}
	start := 0 // first frame not yet in a segment
	i := 0
	for i < len(frames) {
		n := HeaderSize
		if h, err := ParseHeader(frames[i:]); err == nil || h.Length > 0 {
			n += h.Length
		}
		n = min(n, len(frames)-i)
		switch {
		case n > MaxSegmentPayload:
			if i > start {
				dst = appendSegment(dst, frames[start:i], true, lz)
			}
			for part := frames[i : i+n]; len(part) > 0; {
				k := min(len(part), MaxSegmentPayload)
				dst = appendSegment(dst, part[:k], false, lz)
				part = part[k:]
			}
			i += n
			start = i
		case i+n-start > MaxSegmentPayload:
			dst = appendSegment(dst, frames[start:i], true, lz)
			start = i
		default:
			i += n
		}
	}
	if i > start {
		dst = appendSegment(dst, frames[start:i], true, lz)
	}
	return dst
}

func appendLE(dst []byte, v uint64, n int) []byte {
	for range n {
		dst = append(dst, byte(v))
		v >>= 8
	}
	return dst
}
