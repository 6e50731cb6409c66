package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/ring"
	"github.com/cqlguard/cqlguard/transport"
)

// upstream is a connection to an upstream node. In a session its
// response path reads it (from) and its request path writes it (to).
type upstream struct {
	// addr is the address the proxy dialled, and at the node's address
	// as IP:port, which a ring names it by.
	addr, at       string
	conn           net.Conn
	in             *transport.LazyReader // holds from's buffer while bytes come
	from           *frame.Reader
	to             *transport.Writer
	rateLimitError bool // the node advertises SCYLLA_RATE_LIMIT_ERROR
	lwtMark        bool // the node advertises SCYLLA_LWT_ADD_METADATA_MARK
	// sharding is the node's sharding, as its SUPPORTED gave it, if
	// sharded; shard is the shard serving the connection, 0 if not
	// sharded (shards.go).
	sharding ring.Sharding
	sharded  bool
	shard    int
	// node is the node's shedding signals, nil when shedding is off; load
	// its load, as routing sees it (replicas.go).
	node *nodeSignals
	load *nodeLoad
	// keyspace is the keyspace the connection is in, as the session's
	// last USE named it. Request path only.
	keyspace []byte
	// prepared are the ids of the statements the session prepared on the
	// connection (legs.go), at most max_prepared_statements; request path
	// only. forget is set by the response path when the node said it no
	// longer knows one: the request path then forgets them all.
	prepared map[string]struct{}
	forget   atomic.Bool
	// dead is set, under the session's mu, once the connection's response
	// path has ended.
	dead atomic.Bool

	// inflight counts the requests sent on the connection and not yet
	// answered, and counted those of them its node's load counts (at most
	// inflight): not those sent while the client was not reading, nor any
	// once the session ends. Both change under the session's mu; inflight
	// is also read without it, by the session's other response paths
	// (handoff.go).
	inflight atomic.Int32
	counted  int32
	// waiting is set while the response path waits for the node's next
	// bytes (handoff.go).
	waiting atomic.Bool
	// waitingForRoom is set while the response path waits for room in
	// max_frame_bytes_total rather than for the node. (While it waits for
	// the client, the client's writer holds bytes: see quiet.)
	waitingForRoom atomic.Bool

	// activity counts the node's frames, and requests that found none in
	// flight: the watchdog takes a count unchanged over a tick, with
	// requests in flight, for a tick of silence. Guarded by the session's
	// mu.
	activity uint32
	// lastActivity and quietTicks are the watchdog's own: the count it saw
	// last and for how many ticks it has not changed.
	lastActivity uint32
	quietTicks   int
	// stalled is set when the watchdog closed the connection.
	stalled atomic.Bool
	// leftovers are the copies of hedged reads sent on the connection whose
	// other copy was answered first (hedge.go): their streams are busy
	// here until the node answers them. Guarded by the session's mu.
	leftovers     []leftover
	leftoverCount atomic.Int32 // len(leftovers), for the request path to read without mu
}

// dialUpstream connects to addr and asks for its SUPPORTED options, so that
// the proxy knows, before the driver's STARTUP, whether the node takes the
// rate-limit opt-in. The OPTIONS exchange uses v4 framing, which every node
// that speaks v4 or v5 accepts before STARTUP. It gives up once ctx is
// done.
func dialUpstream(ctx context.Context, addr string, timeout time.Duration, tlsConf *tls.Config, bufs *transport.ReadBuffers) (*upstream, error) {
	c, err := dialNode(ctx, &net.Dialer{Timeout: timeout}, addr, tlsConf)
	if err != nil {
		return nil, fmt.Errorf("dialing upstream %s: %w", addr, err)
	}
	return askOptions(ctx, c, addr, timeout, bufs)
}

// askOptions asks for the SUPPORTED options of the node at addr on c, a
// new connection to it, and returns the connection, or closes c and
// returns an error.
func askOptions(ctx context.Context, c net.Conn, addr string, timeout time.Duration, bufs *transport.ReadBuffers) (*upstream, error) {
	defer context.AfterFunc(ctx, func() { c.Close() })()
	in := transport.NewSockReader(c)
	u := &upstream{addr: addr, at: c.RemoteAddr().String(), conn: c, in: transport.NewLazyReader(in, in, bufs)}
	u.in.Take()
	c.SetDeadline(time.Now().Add(timeout))
	options := frame.AppendHeader(nil, frame.Header{Version: 4, Stream: 0, Opcode: frame.OpOptions})
	if _, err := c.Write(options); err != nil {
		c.Close()
		u.in.Park()
		return nil, fmt.Errorf("upstream %s: sending OPTIONS: %w", addr, err)
	}
	r := frame.NewReader(u.in.Reader(), 1<<20)
	f, h, err := r.Next()
	if err != nil {
		c.Close()
		u.in.Park()
		return nil, fmt.Errorf("upstream %s: reading SUPPORTED: %w", addr, err)
	}
	if h.Opcode == frame.OpSupported {
		u.rateLimitError, _ = frame.SupportedHas(f[frame.HeaderSize:], h, rateLimitKey)
		u.lwtMark, _ = frame.SupportedHas(f[frame.HeaderSize:], h, lwtMarkKey)
		// A sharding the proxy cannot read leaves the node unsharded to
		// routing: a connection per node, whatever shard serves it.
		u.sharding, u.sharded, _ = shardingOf(f[frame.HeaderSize:], h)
		u.shard = u.sharding.Shard
	}
	c.SetDeadline(time.Time{})
	return u, nil
}

// refuseTimeout is how long a refused connection is given to send its
// first frame and read the answer: a driver sends one as soon as it is
// connected.
const refuseTimeout = 5 * time.Second

// refuseConn answers a client's first frame with a server error and closes the
// connection, for when no upstream node can serve it or there are too
// many connections. A TLS connection whose handshake is not done yet does
// it within the same deadline.
func (p *Proxy) refuseConn(c net.Conn, msg string) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(p.refuseTimeout))
	_, h, err := frame.NewReader(bufio.NewReader(c), int(p.cfg.MaxFrameBytes)).Next()
	var tooLarge *frame.TooLargeError
	if err != nil && !errors.As(err, &tooLarge) {
		return
	}
	b := frame.AppendError(nil, h.Version, h.Stream, frame.ErrCodeServer, msg)
	p.metrics.frame(dirResponse, frame.OpError, len(b))
	c.Write(b)
}
