package fleet

// Bounded replies. A Redis reply declares the length of a string and the
// number of elements of an aggregate before it sends them, and go-redis
// (v9, which has no bound of its own) allocates what a reply declares as
// soon as it reads the declaration: whatever answers in Redis's place can
// make the proxy allocate a gigabyte with a dozen bytes, at every report.
// Every connection to Redis (NewDialer) therefore reads through a
// replyScanner, which follows the replies as they stream in and fails the
// read, closing the connection, at the first declaration past what the
// fleet reads: the report fails as it does when Redis is down, before
// go-redis has seen the declaration.
//
// The scanner supports RESP2 and RESP3 as Redis sends them:
//   - lines: simple strings (+), errors (-), integers (:), null (_),
//     doubles (,), booleans (#) and big numbers ((), each at most
//     maxReplyLine bytes up to its line feed;
//   - strings with a length: bulk strings ($), blob errors (!) and
//     verbatim strings (=), of at most maxReplyString bytes, or -1 (null);
//   - aggregates: arrays (*), sets (~) and pushes (>) of n elements, maps
//     (%) of n pairs, or -1 (null); attributes (|) of n pairs followed by
//     the value they annotate; open aggregates nested at most
//     maxReplyDepth deep, and at most maxReplyElements elements declared
//     in one reply, counted from its first byte to its last.
//
// It fails, as go-redis would: an unknown type byte, inline replies,
// streamed strings and aggregates ($? and *?, which Redis does not send
// and go-redis does not read), and a length that is not -1 or digits
// ending in CRLF (no '+', no spaces, no other negative). It checks framing
// only as far as it must to find the next declaration: a string's payload
// and the two bytes after it are skipped unread, as go-redis reads them,
// and a line ends at its line feed without its carriage return being
// checked (go-redis checks it).

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
)

// What the fleet reads from Redis, and so the most a reply may declare.
// The reports' commands answer integers (ZADD, ZREMRANGEBYSCORE, ZCOUNT,
// PEXPIRE, INCRBY), arrays of at most 100 counts of at most 20 digits
// each (MGET of a second's buckets, at the shortest interval) and a
// proxy's name with its score (ZRANGE WITHSCORES). go-redis reads
// more when it connects: HELLO's map, of short strings but for each
// module's path (at most PATH_MAX, 4,096 bytes); CLIENT SETINFO's OK; in a
// Redis Cluster, CLUSTER SLOTS (node ids of 40 bytes, hostnames of at most
// 255) and MOVED and ASK errors. Redis's error messages are a line of well
// under a kilobyte.
const (
	// maxReplyLine and maxReplyString are four times the longest string a
	// Redis sends the fleet's client, a module's path: 16 KiB, which also
	// keeps a line within go-redis's read buffer (32 KiB), so that it
	// reads every line in place.
	maxReplyLine   = 16 << 10
	maxReplyString = 16 << 10
	// maxReplyElements bounds the elements one reply declares, nested
	// ones included: CLUSTER SLOTS of a cluster whose 16,384 slots are
	// each a range of their own, served by a master and two replicas
	// with hostnames, declares under 400,000. go-redis holds an element
	// in 16 bytes or more, so that one reply declares at most 16 MiB
	// before its elements arrive.
	maxReplyElements = 1 << 20
	// maxReplyDepth bounds the aggregates open at once: CLUSTER SLOTS and
	// HELLO nest four deep, an attribute adds one. go-redis reads nested
	// replies recursively, so depth is stack.
	maxReplyDepth = 8
)

// errReplyBound is the error of a read that met a reply past the bounds,
// or outside the grammar the scanner follows.
var errReplyBound = errors.New("redis reply refused")

// replyScanner follows a stream of Redis replies, a chunk at a time, and
// fails at the first byte that makes it declare more than the bounds
// allow. It keeps its state between chunks and allocates nothing.
type replyScanner struct {
	state scanState
	kind  byte  // the type byte of the declaration being read
	neg   bool  // the declaration is negative (only -1, null, is)
	ndig  int   // digits of the declaration read so far
	n     int64 // the declaration read so far
	line  int   // bytes of the current line so far
	skip  int64 // bytes of a string's payload and CRLF still to skip
	depth int   // aggregates open
	// left is the values each open aggregate still expects.
	left [maxReplyDepth]int64
	// elements is what the reply being read has declared so far.
	elements int64
}

type scanState uint8

const (
	scanType     scanState = iota // at the type byte of a value
	scanLine                      // in a line, up to its line feed
	scanLength                    // in a declaration's digits
	scanLengthLF                  // at a declaration's line feed
	scanPayload                   // skipping a string's payload and CRLF
)

// scan follows p, the next bytes of the stream. It returns how many of
// them it accepted: all of them, or those before the first one past the
// bounds, with an error wrapping errReplyBound. After an error the
// scanner's state is undefined.
func (s *replyScanner) scan(p []byte) (int, error) {
	for i := 0; i < len(p); {
		switch s.state {
		case scanType:
			c := p[i]
			switch c {
			case '+', '-', ':', '_', ',', '#', '(':
				s.state, s.line = scanLine, 1
			case '$', '!', '=', '*', '~', '>', '%', '|':
				s.state, s.kind, s.neg, s.ndig, s.n = scanLength, c, false, 0, 0
			default:
				return i, fmt.Errorf("%w: type byte %q", errReplyBound, c)
			}
			i++
		case scanLine:
			j := bytes.IndexByte(p[i:], '\n')
			if j < 0 {
				j = len(p) - i - 1 // the whole rest, no line feed
			}
			if s.line+j+1 > maxReplyLine {
				return i + maxReplyLine - s.line, fmt.Errorf("%w: a line longer than %d bytes", errReplyBound, maxReplyLine)
			}
			s.line += j + 1
			if p[i+j] == '\n' {
				s.state = scanType
				s.value()
			}
			i += j + 1
		case scanLength:
			if err := s.digit(p[i]); err != nil {
				return i, err
			}
			i++
		case scanLengthLF:
			if p[i] != '\n' {
				return i, fmt.Errorf("%w: %q after a length", errReplyBound, p[i])
			}
			if err := s.declared(); err != nil {
				return i, err
			}
			i++
		case scanPayload:
			k := min(int64(len(p)-i), s.skip)
			s.skip -= k
			i += int(k)
			if s.skip == 0 {
				s.state = scanType
				s.value()
			}
		}
	}
	return len(p), nil
}

// digit takes the next byte of a declaration.
func (s *replyScanner) digit(c byte) error {
	switch {
	case c == '-' && s.ndig == 0 && !s.neg:
		s.neg = true
		return nil
	case c == '\r' && s.ndig > 0:
		s.state = scanLengthLF
		return nil
	case c < '0' || c > '9':
		return fmt.Errorf("%w: %q in the length of a %q", errReplyBound, c, s.kind)
	case s.neg && (c != '1' || s.ndig > 0):
		return fmt.Errorf("%w: a length under -1", errReplyBound)
	}
	s.ndig++
	if s.neg {
		s.n = 1
		return nil
	}
	// Checked at every digit, so that n never exceeds the bound by more
	// than a digit, nor overflows.
	s.n = s.n*10 + int64(c-'0')
	switch s.kind {
	case '$', '!', '=':
		if s.n > maxReplyString {
			return fmt.Errorf("%w: a string of more than %d bytes", errReplyBound, maxReplyString)
		}
	case '%', '|':
		if 2*s.n > maxReplyElements-s.elements {
			return fmt.Errorf("%w: a reply of more than %d elements", errReplyBound, maxReplyElements)
		}
	default:
		if s.n > maxReplyElements-s.elements {
			return fmt.Errorf("%w: a reply of more than %d elements", errReplyBound, maxReplyElements)
		}
	}
	return nil
}

// declared acts on a declaration whose line feed was just read.
func (s *replyScanner) declared() error {
	s.state = scanType
	if s.neg { // null
		s.value()
		return nil
	}
	switch s.kind {
	case '$', '!', '=':
		s.state, s.skip = scanPayload, s.n+2
		return nil
	case '%':
		s.n *= 2
	case '|':
		// The pairs, then the value they annotate, which stands for the
		// attribute in the aggregate that holds it.
		s.n = 2*s.n + 1
	}
	if s.n == 0 {
		s.value()
		return nil
	}
	if s.depth == maxReplyDepth {
		return fmt.Errorf("%w: aggregates nested more than %d deep", errReplyBound, maxReplyDepth)
	}
	if s.n > maxReplyElements-s.elements { // an attribute's value
		return fmt.Errorf("%w: a reply of more than %d elements", errReplyBound, maxReplyElements)
	}
	s.elements += s.n
	s.left[s.depth] = s.n
	s.depth++
	return nil
}

// value ends a value: one fewer for the aggregate that holds it, which may
// end it too; the end of the outermost ends a reply.
func (s *replyScanner) value() {
	for s.depth > 0 {
		s.left[s.depth-1]--
		if s.left[s.depth-1] > 0 {
			return
		}
		s.depth--
	}
	s.elements = 0
}

// boundedConn reads Redis's replies through a replyScanner; past the
// bounds it closes the connection and fails every read from then on.
type boundedConn struct {
	net.Conn
	scan replyScanner
	err  error
}

func (c *boundedConn) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.Conn.Read(p)
	if _, serr := c.scan.scan(p[:n]); serr != nil {
		c.err = fmt.Errorf("from %s: %w", c.RemoteAddr(), serr)
		c.Conn.Close()
		return 0, c.err
	}
	return n, err
}

// boundedSysConn is a boundedConn over a connection that gives its file
// descriptor, which go-redis peeks at (MSG_PEEK, which reads nothing) to
// find a pooled connection that Redis closed.
type boundedSysConn struct {
	boundedConn
}

func (c *boundedSysConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}

// boundReplies returns c reading through a replyScanner.
func boundReplies(c net.Conn) net.Conn {
	if _, ok := c.(syscall.Conn); ok {
		return &boundedSysConn{boundedConn{Conn: c}}
	}
	return &boundedConn{Conn: c}
}

// NewDialer returns the dialer for redis.Options.Dialer and
// redis.ClusterOptions.Dialer: TCP within timeout, then TLS with conf
// unless it is nil (verifying each address's host unless conf names the
// server), and replies bounded to what the fleet reads. go-redis dials TLS
// only with its own dialer, so conf must be given here; TLSConfig in the
// options is then not used to dial.
func NewDialer(timeout time.Duration, conf *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		var err error
		if conf != nil {
			c, err = (&tls.Dialer{NetDialer: d, Config: conf}).DialContext(ctx, network, addr)
		} else {
			c, err = d.DialContext(ctx, network, addr)
		}
		if err != nil {
			return nil, err
		}
		return boundReplies(c), nil
	}
}
