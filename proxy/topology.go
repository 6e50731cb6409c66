package proxy

// Drivers learn the cluster from system.local, system.peers and
// system.peers_v2 and from topology and status events, then dial the nodes
// they learned of. To keep all traffic on the proxy, the proxy rewrites what
// those queries and events say: in cluster mode it is the only node, in node
// mode each peer is the proxy in front of it. It also edits SUPPORTED and
// STARTUP so that drivers neither see upstream-only options nor ask the
// upstream for options it lacks. This file holds the policy (which
// addresses, which peers, cluster or node mode); package frame reads and
// writes the bytes.

import (
	"crypto/md5"
	"fmt"
	"net"
	"slices"
	"strconv"

	"github.com/cqlguard/cqlguard/classify"
	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
)

// rateLimitKey is the SUPPORTED and STARTUP key of ScyllaDB's rate-limit error.
const rateLimitKey = "SCYLLA_RATE_LIMIT_ERROR"

// lwtMarkKey is the SUPPORTED and STARTUP key of ScyllaDB's LWT mark: a
// driver that asks for it learns from the flags of each RESULT Prepared
// whether the statement is conditional. The proxy advertises it as
// ScyllaDB does, and sets the mark itself in front of a node that does
// not: ScyllaDB's gocql fork takes every prepared statement for
// conditional when the server advertises the rate-limit error but not the
// mark, and retries each refusal three times on the same host.
const lwtMarkKey = "SCYLLA_LWT_ADD_METADATA_MARK"

// lwtMarkOption is the mark's SUPPORTED value: the bit of the flags that
// marks a conditional statement, as ScyllaDB advertises it.
var lwtMarkOption = frame.Option{Key: lwtMarkKey, Values: []string{"LWT_OPTIMIZATION_META_BIT_MASK=" + strconv.FormatUint(uint64(frame.MetadataScyllaLWT), 10)}}

// strippedSupported are SUPPORTED keys that reveal upstream topology or
// change frame layouts the proxy does not parse (FACTS.md section 3).
var strippedSupported = []string{
	"SCYLLA_SHARD", "SCYLLA_NR_SHARDS", "SCYLLA_PARTITIONER", "SCYLLA_SHARDING_ALGORITHM",
	"SCYLLA_SHARDING_IGNORE_MSB", "SCYLLA_SHARD_AWARE_PORT", "SCYLLA_SHARD_AWARE_PORT_SSL",
	"SCYLLA_HOST_ID", "SCYLLA_USE_METADATA_ID", "TABLETS_ROUTING_V1", "TABLETS_ROUTING_V2_EXPERIMENTAL",
}

// wholeRing is the one token of the proxy in cluster mode: a node with a
// single token owns the whole ring.
const wholeRing = "-9223372036854775808"

// topology rewrites what drivers learn of the cluster.
type topology struct {
	mode      string
	advertise net.IP // 4 or 16 bytes, as inet values carry it
	port      int32
	hostID    [16]byte                // the proxy's host id in cluster mode
	peers     map[string]*net.TCPAddr // node mode: upstream peer ip -> proxy address
	// onSchemaChange is called for each schema change event passing by.
	onSchemaChange func()
}

func newTopology(cfg config.Config) (*topology, error) {
	host, port, err := net.SplitHostPort(cfg.AdvertiseAddr())
	if err != nil {
		return nil, fmt.Errorf("advertise: %w", err)
	}
	ip := net.ParseIP(host)
	if v4 := ip.To4(); v4 != nil {
		ip = v4
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, fmt.Errorf("advertise port: %w", err)
	}
	t := &topology{mode: cfg.Mode, advertise: ip, port: int32(p), peers: map[string]*net.TCPAddr{}}
	// A stable host id, derived from the advertised address, so that a driver
	// reconnecting through another upstream node sees the same host.
	sum := md5.Sum([]byte("cqlguard " + cfg.AdvertiseAddr()))
	sum[6] = sum[6]&0x0f | 0x30
	sum[8] = sum[8]&0x3f | 0x80
	t.hostID = sum
	for peer, addr := range cfg.Peers {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("peers: %q: %w", addr, err)
		}
		if v4 := a.IP.To4(); v4 != nil {
			a.IP = v4
		}
		t.peers[net.ParseIP(peer).String()] = a
	}
	return t, nil
}

// replyOf is what the answer to a read of topology table t needs.
func replyOf(t classify.Topology) reply {
	switch t {
	case classify.TopologyLocal:
		return replyLocal
	case classify.TopologyPeers:
		return replyPeers
	case classify.TopologyPeersV2:
		return replyPeersV2
	}
	return replyForward
}

// supported rewrites the uncompressed body of a SUPPORTED response with
// header h: strips upstream-only keys and advertises the rate-limit error
// and, unless the upstream does, the LWT mark.
func (t *topology) supported(h frame.Header, body []byte) ([]byte, error) {
	add := []frame.Option{{Key: rateLimitKey, Values: []string{"ERROR_CODE=" + strconv.Itoa(int(frame.ErrCodeRateLimit))}}}
	if has, err := frame.SupportedHas(body, h, lwtMarkKey); err != nil {
		return nil, fmt.Errorf("rewriting SUPPORTED: %w", err)
	} else if !has {
		add = append(add, lwtMarkOption)
	}
	out, err := frame.AppendSupported(nil, h, body, func(key []byte) bool {
		return string(key) == rateLimitKey || slices.Contains(strippedSupported, string(key))
	}, add...)
	if err != nil {
		return nil, fmt.Errorf("rewriting SUPPORTED: %w", err)
	}
	return out, nil
}

// rows rewrites the rows of a topology query's RESULT, f, whose
// uncompressed body is body: it returns f itself for a RESULT of another
// kind. columns stands in for metadata the response skipped (an EXECUTE
// with skip_metadata).
func (t *topology) rows(f []byte, h frame.Header, body []byte, table reply, columns []string) ([]byte, error) {
	edit := t.rewritePeer
	if table == replyLocal {
		edit = t.rewriteLocal
	}
	out, ok, err := frame.AppendRows(nil, h, body, columns, edit)
	if err != nil {
		return nil, fmt.Errorf("rewriting topology rows: %w", err)
	}
	if !ok {
		return f, nil // an error, or a prepared result: nothing to rewrite
	}
	return out, nil
}

func (t *topology) rewriteLocal(row *frame.Row) bool {
	addr := []byte(t.advertise)
	for _, name := range []string{"rpc_address", "broadcast_address", "listen_address", "native_address"} {
		row.Set(name, addr)
	}
	port := frame.IntValue(t.port)
	row.Set("rpc_port", port)
	row.Set("native_port", port)
	if t.mode == config.ModeCluster {
		row.Set("host_id", t.hostID[:])
		row.Set("tokens", frame.TextSetValue(wholeRing))
	}
	return true
}

// rewritePeer rewrites a peers or peers_v2 row to the proxy in front of that
// peer, reporting false when the driver must not learn of the peer at all.
func (t *topology) rewritePeer(row *frame.Row) bool {
	if t.mode == config.ModeCluster {
		return false
	}
	peer, ok := row.Cell("peer")
	if !ok {
		return false
	}
	to, ok := t.peers[net.IP(peer).String()]
	if !ok {
		return false
	}
	for _, name := range []string{"peer", "rpc_address", "native_address", "preferred_ip"} {
		if v, ok := row.Cell(name); ok && v != nil {
			row.Set(name, []byte(to.IP))
		}
	}
	row.Set("native_port", frame.IntValue(int32(to.Port)))
	return true
}

// event filters an EVENT, f, whose uncompressed body is body: topology and
// status changes about nodes the driver must not dial are dropped (keep
// false), or rewritten to the proxy in front of that node in node mode.
func (t *topology) event(f []byte, h frame.Header, body []byte) (out []byte, keep bool, err error) {
	e, err := frame.ParseEvent(body, h)
	if err != nil {
		return nil, false, fmt.Errorf("reading EVENT: %w", err)
	}
	if string(e.Type) == frame.EventSchemaChange {
		if t.onSchemaChange != nil {
			t.onSchemaChange()
		}
		return f, true, nil
	}
	if t.mode == config.ModeCluster {
		return nil, false, nil
	}
	to, ok := t.peers[net.IP(e.Addr).String()]
	if !ok {
		return nil, false, nil
	}
	return e.AppendMoved(nil, to.IP, int32(to.Port)), true, nil
}
