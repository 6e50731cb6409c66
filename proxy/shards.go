package proxy

// Shard-awareness: a ScyllaDB node splits its tokens among its shards, one
// per core, and says how in the SUPPORTED options of each connection,
// naming the shard that serves it (ring.Sharding). A request served by
// the shard that owns its token is served there; on another shard it
// crosses to the owner's core and back. A session that routes to such a
// node opens its connections there per shard, each through the node's
// shard-aware port from a local port of the shard's (the port modulo the
// number of shards), and sends each request on the connection of its
// token's shard. Its first connection (up) is the connection to its
// node's shard that serves it. A node without a shard-aware port, or
// whose shard-aware port does not give the shard asked for, gets one
// connection per session as before.

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/ring"
	"github.com/cqlguard/cqlguard/transport"
)

// anyShard is the shard of a request that any of its node's connections
// may take.
const anyShard = -1

// shardPortRetry is how long a node's shard-aware port is not used after
// a connection through it could not be opened or was served by another
// shard than its source port's.
const shardPortRetry = int64(time.Minute)

// The local ports a connection to a shard-aware port is opened from: the
// IANA dynamic range, as ScyllaDB's drivers use by default.
const (
	shardPortLow  = 49152
	shardPortHigh = 65535
)

// errWrongShard is a connection to a shard-aware port that another shard
// than its source port's took.
var errWrongShard = errors.New("served by another shard than the source port's")

// nodeSharding is what the proxy knows of a node's shards.
type nodeSharding struct {
	ring.Sharding
	// portAvoided is until when, in the proxy's nanoseconds, the node's
	// shard-aware port is not used.
	portAvoided int64
}

// shardings are the nodes' shardings, by address as the ring names them,
// as their SUPPORTED options gave them. The map is replaced, never
// changed: every routed request asks it, so asking takes no lock.
type shardings struct {
	by atomic.Pointer[map[string]nodeSharding]
	mu sync.Mutex // serializes replacing by
}

// of returns the sharding of node, ok false when it has none.
func (sh *shardings) of(node string) (nodeSharding, bool) {
	m := sh.by.Load()
	if m == nil {
		return nodeSharding{}, false
	}
	ns, ok := (*m)[node]
	return ns, ok
}

// learn notes node's sharding s, as the SUPPORTED options of a new
// connection to it gave it, or that it has none (ok false).
func (sh *shardings) learn(node string, s ring.Sharding, ok bool) {
	s.Shard = 0 // the connection's, not the node's
	if cur, has := sh.of(node); has == ok && (!ok || cur.Sharding == s) {
		return
	}
	sh.replace(func(m map[string]nodeSharding) {
		if ok {
			m[node] = nodeSharding{Sharding: s}
		} else {
			delete(m, node)
		}
	})
}

// avoidPort has routing not use node's shard-aware port until until.
func (sh *shardings) avoidPort(node string, until int64) {
	sh.replace(func(m map[string]nodeSharding) {
		if ns, ok := m[node]; ok {
			ns.portAvoided = until
			m[node] = ns
		}
	})
}

// replace replaces the map with a copy edit changed.
func (sh *shardings) replace(edit func(map[string]nodeSharding)) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	m := map[string]nodeSharding{}
	if old := sh.by.Load(); old != nil {
		maps.Copy(m, *old)
	}
	edit(m)
	sh.by.Store(&m)
}

// shardPort returns the shard-aware port of s for connections with TLS or
// without, 0 if the node advertises none.
func shardPort(s ring.Sharding, tls bool) uint16 {
	if tls {
		return s.PortTLS
	}
	return s.Port
}

// shardFor returns the shard of the node at addr that owns token, whose
// connection a request for token goes on, or anyShard when any of the
// node's connections will do: shard-awareness is off, or the node
// advertises no shards or no shard-aware port, or that port is avoided.
// It must not allocate.
func (s *session) shardFor(addr string, token int64) int {
	if !s.p.cfg.Routing.ShardAware {
		return anyShard
	}
	ns, ok := s.p.shards.of(addr)
	if !ok || ns.Shards < 2 || shardPort(ns.Sharding, s.p.settings.Load().upstreamTLS != nil) == 0 || s.now() < ns.portAvoided {
		return anyShard
	}
	return ns.ShardOf(token)
}

// connTo returns the session's connection to the node at addr served by
// shard, or any of its connections to it for anyShard; nil if it has none.
func (s *session) connTo(addr string, shard int) *upstream {
	if s.up.at == addr && (shard == anyShard || s.up.shard == shard) {
		return s.up
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, u := range s.legs {
		if (shard == anyShard || u.shard == shard) && u.at == addr {
			return u
		}
	}
	return nil
}

// dialShard opens a connection to shard of the node at addr, whose
// sharding is sh, through its shard-aware port, and asks for its
// SUPPORTED options: from a local port p of the shard's (p mod shards),
// one at random, the next of the shard's while one is in use. A
// connection another shard takes is closed, with errWrongShard: an
// address translation between the proxy and the node changes the port.
func dialShard(ctx context.Context, addr string, sh ring.Sharding, shard int, timeout time.Duration, tlsConf *tls.Config, bufs *transport.ReadBuffers) (*upstream, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %w", addr, err)
	}
	to := net.JoinHostPort(host, strconv.Itoa(int(shardPort(sh, tlsConf != nil))))
	n := sh.Shards
	lowest := shardPortLow + (shard-shardPortLow%n+n)%n
	ports := (shardPortHigh-lowest)/n + 1
	start := rand.IntN(ports)
	deadline := time.Now().Add(timeout)
	var c net.Conn
	for i := range ports {
		local := &net.TCPAddr{Port: lowest + (start+i)%ports*n}
		c, err = dialNode(ctx, &net.Dialer{Deadline: deadline, LocalAddr: local}, to, tlsConf)
		if err == nil || !(errors.Is(err, syscall.EADDRINUSE) || errors.Is(err, syscall.EADDRNOTAVAIL)) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("dialing shard %d of upstream %s at %s: %w", shard, addr, to, err)
	}
	u, err := askOptions(ctx, c, addr, timeout, bufs)
	if err != nil {
		return nil, err
	}
	u.at = addr // as the ring names the node, not its shard-aware port
	if !u.sharded || u.shard != shard {
		u.conn.Close()
		u.in.Park()
		return nil, fmt.Errorf("upstream %s: connection for shard %d from port %d to %s: %w", addr, shard, c.LocalAddr().(*net.TCPAddr).Port, to, errWrongShard)
	}
	return u, nil
}

// shardingOf returns the sharding a node's SUPPORTED body, of a frame of
// header h, advertises; ok is false when it advertises none.
func shardingOf(body []byte, h frame.Header) (s ring.Sharding, ok bool, err error) {
	if has, err := frame.SupportedHas(body, h, "SCYLLA_NR_SHARDS"); !has || err != nil {
		return ring.Sharding{}, false, err
	}
	opts, err := supportedOptions(body, h)
	if err != nil {
		return ring.Sharding{}, false, err
	}
	return ring.ParseSharding(opts)
}

// supportedOptions returns the options of a SUPPORTED body of a frame of
// header h, a [string multimap], each key with its values.
func supportedOptions(body []byte, h frame.Header) (map[string][]string, error) {
	msg, ok := frame.ResponseMessage(body, h)
	if !ok {
		return nil, fmt.Errorf("SUPPORTED prefix: %w", frame.ErrShortBody)
	}
	next := func(n int) ([]byte, error) {
		if len(msg) < n {
			return nil, fmt.Errorf("SUPPORTED options: %w", frame.ErrShortBody)
		}
		b := msg[:n]
		msg = msg[n:]
		return b, nil
	}
	str := func() (string, error) {
		n, err := next(2)
		if err != nil {
			return "", err
		}
		b, err := next(int(binary.BigEndian.Uint16(n)))
		return string(b), err
	}
	n, err := next(2)
	if err != nil {
		return nil, err
	}
	opts := map[string][]string{}
	for range binary.BigEndian.Uint16(n) {
		k, err := str()
		if err != nil {
			return nil, err
		}
		m, err := next(2)
		if err != nil {
			return nil, err
		}
		values := []string{}
		for range binary.BigEndian.Uint16(m) {
			v, err := str()
			if err != nil {
				return nil, err
			}
			values = append(values, v)
		}
		opts[k] = values
	}
	return opts, nil
}
