package frame

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// TooLargeError reports a frame whose body is over the reader's maximum. The
// reader has already skipped the body, so the stream stays in step and the
// caller can answer on Header.Stream and go on.
type TooLargeError struct {
	Header Header
	Max    int
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("frame body of %d bytes exceeds the maximum of %d", e.Header.Length, e.Max)
}

// ErrCorrupt wraps errors after which a stream cannot be trusted: a frame
// that does not fit its segment, a bad segment sequence.
var ErrCorrupt = errors.New("frame: corrupt stream")

// TruncatedError reports a stream that ended or failed part way through a
// frame: some of its bytes arrived and the rest never will. Err is the
// stream's error (io.ErrUnexpectedEOF, a reset), with what was being read.
type TruncatedError struct {
	Err error
}

func (e *TruncatedError) Error() string { return e.Err.Error() }
func (e *TruncatedError) Unwrap() error { return e.Err }

// truncated is err, the stream's failure part way through a frame, as a
// TruncatedError; a bad segment is no truncation and stays as it is.
func truncated(err error) error {
	if errors.Is(err, ErrBadCRC) || errors.Is(err, ErrCorrupt) {
		return err
	}
	return &TruncatedError{Err: err}
}

// Reader reads whole frames from a byte stream, first as plain frames and,
// after UseSegments, from v5 segments. A returned frame is valid until the
// next call to Next.
type Reader struct {
	br   *bufio.Reader
	max  int
	buf  []byte         // frames up to keepMax read whole or assembled from segments
	segs *SegmentReader // nil before the v5 handshake completes
	rest []byte         // frames still unread in the current self-contained segment
	// started is set from a frame's first byte until Next returns it.
	started bool
	budget  Budget // nil: large frames take nothing
	held    int    // what the last frame took from budget
}

// A Budget bounds the memory that frames over 64 KiB take, over many
// Readers. Take returns when n bytes are available, or with an error after
// which the Reader's stream is abandoned; Give gives back what Take took.
type Budget interface {
	Take(n int) error
	Give(n int)
}

// SetBudget makes the Reader take a frame over 64 KiB from b before reading
// it, and give it back on the next call to Next or on Release. Frames up to
// 64 KiB read into the Reader's own buffer and take nothing.
func (r *Reader) SetBudget(b Budget) { r.budget = b }

// Release gives back to the budget what the last frame took, once the
// caller is done with it and will not call Next again.
func (r *Reader) Release() {
	if r.held > 0 {
		r.budget.Give(r.held)
		r.held = 0
	}
}

// Shrink gives back the segment buffers that a burst of segments over 64
// KiB grew. Call it when Buffered is 0, before waiting for the peer: an
// idle v5 connection then keeps no more than one whose segments were small.
func (r *Reader) Shrink() {
	if r.segs != nil && len(r.rest) == 0 {
		r.segs.shrink()
	}
}

// take takes n bytes from the budget for a frame over keepMax.
func (r *Reader) take(n int) error {
	if r.budget == nil {
		return nil
	}
	if err := r.budget.Take(n); err != nil {
		return err
	}
	r.held = n
	return nil
}

// NewReader returns a Reader of frames whose bodies are at most maxBody bytes.
func NewReader(br *bufio.Reader, maxBody int) *Reader {
	if maxBody <= 0 || maxBody > MaxBodySize {
		maxBody = MaxBodySize
	}
	return &Reader{br: br, max: maxBody}
}

// UseSegments switches the reader to v5 framing; compressed says whether the
// connection negotiated LZ4.
func (r *Reader) UseSegments(compressed bool) {
	r.segs = NewSegmentReader(r.br, compressed)
}

// Buffered reports how many bytes are read but not yet returned as frames:
// when it is zero, the peer has nothing more in flight for now, which is
// when a writer that batches answers should flush.
func (r *Reader) Buffered() int { return r.br.Buffered() + len(r.rest) }

// Started reports whether a frame has begun to arrive and is not whole yet:
// while it is set, the reader of the underlying stream waits for the rest
// of a frame, not for the peer's next request, and may bound that wait.
func (r *Reader) Started() bool { return r.started }

// Segmented reports whether the reader reads v5 segments.
func (r *Reader) Segmented() bool { return r.segs != nil }

// Next returns the next frame, header and body, and its decoded header.
// Errors: *UnsupportedVersionError (the header's stream is unknown),
// *TooLargeError (skipped; the stream is usable), the stream's error before
// a frame's first byte (io.EOF where it ended), *TruncatedError after it,
// and errors wrapping ErrCorrupt or segment errors after which the stream
// is unusable.
func (r *Reader) Next() ([]byte, Header, error) {
	// The caller is done with the last frame.
	r.Release()
	// Waiting for a frame's first byte is waiting for the peer; after it,
	// for the rest of the frame (Started). Frames left in the current
	// segment need no wait.
	var first byte
	if len(r.rest) == 0 {
		b, err := r.br.Peek(1)
		if err != nil {
			return nil, Header{}, err
		}
		first = b[0]
	}
	r.started = true
	defer func() { r.started = false }()
	if r.segs != nil {
		return r.nextFromSegments()
	}
	// The version byte comes first and decides the header's size: a v1 or
	// v2 client sends 8 bytes and waits, so look at it before asking for 9.
	if v := first &^ responseBit; v < 3 || v > 5 {
		return nil, Header{}, &UnsupportedVersionError{Version: v}
	}
	hb, err := r.br.Peek(HeaderSize)
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, Header{}, truncated(err)
	}
	h, err := ParseHeader(hb)
	if err != nil {
		return nil, h, err
	}
	if h.Length > r.max {
		// Skip rather than allocate: the limit protects memory, and reading
		// through keeps the connection usable for the next frame.
		if _, err := r.br.Discard(HeaderSize + h.Length); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, h, truncated(fmt.Errorf("skipping oversized frame: %w", err))
		}
		return nil, h, &TooLargeError{Header: h, Max: r.max}
	}
	n := HeaderSize + h.Length
	if n > keepMax {
		if err := r.take(n); err != nil {
			return nil, h, err
		}
	}
	f := r.frameBuf(n)
	if _, err := io.ReadFull(r.br, f); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, h, truncated(fmt.Errorf("reading %s frame body: %w", h.Opcode, err))
	}
	return f, h, nil
}

// keepMax is the largest frame buffer a Reader keeps from one frame to the
// next. A larger frame gets a buffer of its own, which the reader forgets
// once it has returned it: a connection that carried one large frame would
// otherwise hold that much, up to the maximum, for as long as it stays
// open, idle or not.
const keepMax = 64 << 10

// frameBuf returns n bytes for one frame: the reader's buffer, grown if
// need be but never past keepMax, or for a larger frame a buffer of its own.
// Either way the caller may keep the frame until the next call to Next.
func (r *Reader) frameBuf(n int) []byte {
	if n > keepMax {
		return make([]byte, n)
	}
	if cap(r.buf) < n {
		r.buf = make([]byte, n, min(max(n, 2*cap(r.buf)), keepMax))
	}
	return r.buf[:n]
}

func (r *Reader) nextFromSegments() ([]byte, Header, error) {
	if len(r.rest) == 0 {
		payload, selfContained, err := r.segs.Next()
		if err != nil {
			// Next has seen the segment's first byte.
			return nil, Header{}, truncated(err)
		}
		if !selfContained {
			return r.assemble(payload)
		}
		r.rest = payload
	}
	h, err := ParseHeader(r.rest)
	if err != nil {
		r.rest = nil
		return nil, h, fmt.Errorf("%w: frame in segment: %v", ErrCorrupt, err)
	}
	n := HeaderSize + h.Length
	if n > len(r.rest) {
		r.rest = nil
		return nil, h, fmt.Errorf("%w: frame of %d bytes overruns its self-contained segment", ErrCorrupt, n)
	}
	f := r.rest[:n]
	r.rest = r.rest[n:]
	if h.Length > r.max {
		return nil, h, &TooLargeError{Header: h, Max: r.max}
	}
	return f, h, nil
}

// assemble reads one frame spread over consecutive non-self-contained
// segments, first being the first segment's payload.
func (r *Reader) assemble(first []byte) ([]byte, Header, error) {
	h, err := ParseHeader(first)
	if err != nil {
		return nil, h, fmt.Errorf("%w: first segment of a large frame: %v", ErrCorrupt, err)
	}
	n := HeaderSize + h.Length
	tooLarge := h.Length > r.max
	// A large frame gets a buffer of its own, which the reader does not
	// keep (frameBuf), once the budget has room for it.
	var f []byte
	if !tooLarge {
		if n <= keepMax {
			f = r.frameBuf(n)[:0]
		} else if err := r.take(n); err != nil {
			return nil, h, err
		} else {
			f = make([]byte, 0, n)
		}
		f = append(f, first...)
	}
	got := len(first)
	for got < n {
		payload, selfContained, err := r.segs.Next()
		if err != nil {
			return nil, h, truncated(err)
		}
		if selfContained {
			return nil, h, fmt.Errorf("%w: self-contained segment inside a large frame", ErrCorrupt)
		}
		got += len(payload)
		if !tooLarge {
			f = append(f, payload...)
		}
	}
	if got != n {
		return nil, h, fmt.Errorf("%w: large frame of %d bytes ends after %d", ErrCorrupt, n, got)
	}
	if tooLarge {
		return nil, h, &TooLargeError{Header: h, Max: r.max}
	}
	return f, h, nil
}

// grow returns b resized to n bytes, reallocating only when it must.
func grow(b []byte, n int) []byte {
	if cap(b) >= n {
		return b[:n]
	}
	return make([]byte, n, max(n, 2*cap(b)))
}
