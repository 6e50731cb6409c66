package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
)

// rateLimitKey is the SUPPORTED and STARTUP key of ScyllaDB's rate-limit
// error.
const rateLimitKey = "SCYLLA_RATE_LIMIT_ERROR"

// dialer dials the driver's connections and remembers every address it
// dialed. With hideRateLimitError, the first response on each connection,
// the SUPPORTED that answers the driver's OPTIONS, reaches the driver
// without rateLimitKey: the driver opts in to the error only when the
// server advertises it, and this is the one way to keep it from doing so.
type dialer struct {
	hideRateLimitError bool

	d     net.Dialer
	mu    sync.Mutex
	addrs []string
}

func (d *dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.addrs = append(d.addrs, addr)
	d.mu.Unlock()
	c, err := d.d.DialContext(ctx, network, addr)
	if err != nil || !d.hideRateLimitError {
		return c, err
	}
	return &hidingConn{Conn: c}, nil
}

// dialed returns the distinct addresses dialed, sorted.
func (d *dialer) dialed() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := slices.Clone(d.addrs)
	slices.Sort(out)
	return slices.Compact(out)
}

// hidingConn rewrites the first frame it reads, if it is a SUPPORTED,
// without rateLimitKey; the rest passes untouched.
type hidingConn struct {
	net.Conn
	first   bool   // the first frame has been read
	pending []byte // what is left of the first frame for the driver
}

const (
	headerSize      = 9 // protocol v3 and later
	opcodeSupported = 0x06
)

func (c *hidingConn) Read(p []byte) (int, error) {
	if !c.first {
		c.first = true
		f, err := readFrame(c.Conn)
		if err != nil {
			return 0, err
		}
		if f[4] == opcodeSupported {
			if f, err = withoutKey(f, rateLimitKey); err != nil {
				return 0, err
			}
		}
		c.pending = f
	}
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// readFrame reads one whole frame of protocol v3 or later from r.
func readFrame(r io.Reader) ([]byte, error) {
	f := make([]byte, headerSize)
	if _, err := io.ReadFull(r, f); err != nil {
		return nil, err
	}
	if v := f[0] & 0x7f; v < 3 {
		return nil, fmt.Errorf("frame of protocol v%d: want v3 or later", v)
	}
	n := binary.BigEndian.Uint32(f[5:])
	if n > 1<<20 {
		return nil, fmt.Errorf("first frame of %d bytes: too long for a SUPPORTED", n)
	}
	f = append(f, make([]byte, n)...)
	if _, err := io.ReadFull(r, f[headerSize:]); err != nil {
		return nil, err
	}
	return f, nil
}

var errShort = errors.New("SUPPORTED body too short")

// withoutKey returns SUPPORTED frame f without key in its [string
// multimap] body.
func withoutKey(f []byte, key string) ([]byte, error) {
	body := f[headerSize:]
	if len(body) < 2 {
		return nil, errShort
	}
	n := int(binary.BigEndian.Uint16(body))
	out := slices.Clone(f[:headerSize+2])
	kept := 0
	i := 2
	for range n {
		start := i
		k, next, err := readString(body, i)
		if err != nil {
			return nil, err
		}
		i = next
		if len(body)-i < 2 {
			return nil, errShort
		}
		values := int(binary.BigEndian.Uint16(body[i:]))
		i += 2
		for range values {
			if _, i, err = readString(body, i); err != nil {
				return nil, err
			}
		}
		if k != key {
			out = append(out, body[start:i]...)
			kept++
		}
	}
	binary.BigEndian.PutUint16(out[headerSize:], uint16(kept))
	binary.BigEndian.PutUint32(out[5:], uint32(len(out)-headerSize))
	return out, nil
}

// readString reads the [string] at body[i:], and returns it and the index
// after it.
func readString(body []byte, i int) (string, int, error) {
	if len(body)-i < 2 {
		return "", 0, errShort
	}
	n := int(binary.BigEndian.Uint16(body[i:]))
	i += 2
	if len(body)-i < n {
		return "", 0, errShort
	}
	return string(body[i : i+n]), i + n, nil
}
