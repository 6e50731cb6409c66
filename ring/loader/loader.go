// Package loader reads the ring of the upstream cluster from its system
// tables over a gocql session: the nodes, their datacenters, racks and
// tokens from system.local and system.peers_v2 (system.peers on nodes
// without it), the keyspaces' replication from system_schema.keyspaces,
// and on ScyllaDB which keyspaces use tablets, from
// system_schema.scylla_keyspaces. It is the only part of cqlguard's ring
// handling that talks to the cluster; package ring holds the ring and
// knows nothing of sessions.
//
// Every table is read from one node, so that the node's own row and its
// peers' rows make up the cluster once: read from two nodes, system.local
// and system.peers could name one node twice and another not at all.
package loader

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/cqlguard/cqlguard/ring"
)

// rows is what Loader needs of a query's result; *gocql.Iter has it.
type rows interface {
	Scan(dest ...any) bool
	MapScan(m map[string]any) bool
	Close() error
}

// host is a node the session can send a query to.
type host struct {
	// id names the host to the session (Query.SetHostID).
	id string
	// addr is where the session reaches the host.
	addr netip.AddrPort
}

// querier lists the hosts of a session and runs on one of them a query
// that takes no bind values. It lets tests feed Loader without a cluster.
type querier interface {
	hosts() []host
	query(ctx context.Context, h host, stmt string) rows
}

// sessionQuerier runs queries on a gocql session.
type sessionQuerier struct{ s *gocql.Session }

// hosts returns the session's hosts, those it sees up first, each group in
// address order so that the ring is read from the same node each time.
func (q sessionQuerier) hosts() []host {
	type known struct {
		host
		up bool
	}
	var hs []known
	for _, h := range q.s.GetHosts() {
		ip, ok := netip.AddrFromSlice(h.ConnectAddress())
		if !ok || h.Port() <= 0 || h.Port() > 65535 {
			continue
		}
		hs = append(hs, known{host{h.HostID(), netip.AddrPortFrom(ip.Unmap(), uint16(h.Port()))}, h.IsUp()})
	}
	slices.SortFunc(hs, func(a, b known) int {
		if a.up != b.up {
			if a.up {
				return -1
			}
			return 1
		}
		return a.addr.Compare(b.addr)
	})
	out := make([]host, len(hs))
	for i, h := range hs {
		out[i] = h.host
	}
	return out
}

func (q sessionQuerier) query(ctx context.Context, h host, stmt string) rows {
	return q.s.Query(stmt).SetHostID(h.id).Consistency(gocql.One).Idempotent(true).IterContext(ctx)
}

// Loader reads the ring from a cluster.
type Loader struct {
	q querier
}

// New returns a Loader that reads through session. The session
// schema/loader's Dial makes suits it: the ring is read from the nodes the
// session is connected to, and names every node of the cluster.
func New(session *gocql.Session) *Loader {
	return &Loader{q: sessionQuerier{session}}
}

// The queries Load makes. system.local and the peers tables are read
// whole: their columns differ between Cassandra's versions and ScyllaDB,
// and selecting a column a server lacks fails the query.
const (
	selectLocal       = "SELECT * FROM system.local WHERE key = 'local'"
	selectPeersV2     = "SELECT * FROM system.peers_v2"
	selectPeers       = "SELECT * FROM system.peers"
	selectKeyspaces   = "SELECT keyspace_name, replication FROM system_schema.keyspaces"
	selectScyllaSpace = "SELECT keyspace_name, initial_tablets FROM system_schema.scylla_keyspaces"
)

// Load reads the ring from the first of the session's hosts that answers.
//
// A node it cannot place (a peer row without host id, datacenter, rack or
// tokens, as while a node joins, or a host id seen twice) and a keyspace
// it cannot place (an unknown strategy, a malformed replication map) are
// left out of the ring, which Load returns together with an error naming
// each. A keyspace that uses tablets is left out without an error: its
// replicas are not the ring's. If no host answers, or the nodes do not
// make a ring (no node, a token owned twice, a partitioner other than
// Murmur3Partitioner), Load returns a nil ring and the error.
func (l *Loader) Load(ctx context.Context) (*ring.Ring, error) {
	hosts := l.q.hosts()
	if len(hosts) == 0 {
		return nil, errors.New("ring: the session has no hosts")
	}
	var errs []error
	for _, h := range hosts {
		r, err := l.loadFrom(ctx, h)
		if r != nil {
			return r, err
		}
		errs = append(errs, fmt.Errorf("ring: reading from %s: %w", h.addr, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// loadFrom reads the ring from host h, as Load describes.
func (l *Loader) loadFrom(ctx context.Context, h host) (*ring.Ring, error) {
	local, err := l.readLocal(ctx, h)
	if err != nil {
		return nil, err
	}
	peers, err := l.readPeers(ctx, h)
	if err != nil {
		return nil, err
	}
	replication, err := l.readKeyspaces(ctx, h)
	if err != nil {
		return nil, err
	}
	tablets, err := l.readTablets(ctx, h)
	if err != nil {
		return nil, err
	}

	var errs []error
	nodes := make([]ring.Node, 0, 1+len(peers))
	ids := make(map[string]string)
	for _, row := range slices.Concat([]nodeRow{local}, peers) {
		n, err := row.node()
		if err == nil && ids[n.HostID] != "" {
			err = fmt.Errorf("host id %s already seen at %s", n.HostID, ids[n.HostID])
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("ring: %s left out: %w", row.what, err))
			continue
		}
		ids[n.HostID] = row.what
		nodes = append(nodes, n)
	}
	// Address order, so that a node keeps its index while the cluster
	// does not change, whichever host the ring was read from.
	slices.SortFunc(nodes, func(a, b ring.Node) int {
		return cmp.Or(a.Addr.Compare(b.Addr), strings.Compare(a.HostID, b.HostID))
	})

	keyspaces := make(map[string]ring.Replication, len(replication))
	for ks, m := range replication {
		if tablets[ks] {
			continue
		}
		repl, err := ring.ParseReplication(m)
		if err != nil {
			errs = append(errs, fmt.Errorf("ring: keyspace %s left out: %w", ks, err))
			continue
		}
		keyspaces[ks] = repl
	}
	r, err := ring.New(nodes, keyspaces)
	if r == nil {
		return nil, err
	}
	if err != nil {
		errs = append(errs, err)
	}
	// Map order is random; sorted errors make the log stable.
	slices.SortFunc(errs, func(a, b error) int { return cmp.Compare(a.Error(), b.Error()) })
	return r, errors.Join(errs...)
}

// nodeRow is what a row of system.local or a peers table says of a node.
type nodeRow struct {
	// what names the row in errors.
	what     string
	hostID   string
	addr     netip.AddrPort
	dc, rack string
	tokens   []string
}

// node returns the ring node that r describes, or why it describes none.
func (r nodeRow) node() (ring.Node, error) {
	var missing []string
	for _, f := range []struct{ name, v string }{{"host_id", r.hostID}, {"data_center", r.dc}, {"rack", r.rack}} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(r.tokens) == 0 {
		missing = append(missing, "tokens")
	}
	if !r.addr.IsValid() {
		missing = append(missing, "address")
	}
	if len(missing) > 0 {
		return ring.Node{}, fmt.Errorf("no %s", strings.Join(missing, ", "))
	}
	n := ring.Node{HostID: r.hostID, Addr: r.addr, Datacenter: r.dc, Rack: r.rack, Tokens: make([]int64, len(r.tokens))}
	for i, s := range r.tokens {
		t, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return ring.Node{}, fmt.Errorf("token %q is not a Murmur3Partitioner token", s)
		}
		n.Tokens[i] = t
	}
	return n, nil
}

// readLocal reads h's own row of system.local. The node serves CQL on
// rpc_address and rpc_port (named so for history's sake); where either is
// missing or unspecified, on the address the session reaches h at.
func (l *Loader) readLocal(ctx context.Context, h host) (nodeRow, error) {
	var rows []map[string]any
	it := l.q.query(ctx, h, selectLocal)
	for {
		m := make(map[string]any)
		if !it.MapScan(m) {
			break
		}
		rows = append(rows, m)
	}
	if err := it.Close(); err != nil {
		return nodeRow{}, fmt.Errorf("reading system.local: %w", err)
	}
	if len(rows) != 1 {
		return nodeRow{}, fmt.Errorf("system.local has %d rows, want 1", len(rows))
	}
	m := rows[0]
	if p := str(m["partitioner"]); p != "" && !strings.HasSuffix(p, ".Murmur3Partitioner") {
		return nodeRow{}, fmt.Errorf("partitioner %s: only Murmur3Partitioner's tokens are placed", p)
	}
	return nodeRow{
		what:   "system.local of " + h.addr.String(),
		hostID: uuid(m["host_id"]),
		addr:   netip.AddrPortFrom(addrOr(m["rpc_address"], h.addr.Addr()), portOr(m["rpc_port"], h.addr.Port())),
		dc:     str(m["data_center"]),
		rack:   str(m["rack"]),
		tokens: strs(m["tokens"]),
	}, nil
}

// readPeers reads h's rows of system.peers_v2, or of system.peers if h has
// no peers_v2 (Cassandra before 4.0, ScyllaDB). A peer serves CQL on
// native_address and native_port in peers_v2 and on rpc_address in peers,
// which has no port: there, as where an address is unspecified, the
// peer's broadcast address and the port the session reaches h on stand
// in, as drivers assume.
func (l *Loader) readPeers(ctx context.Context, h host) ([]nodeRow, error) {
	v2, err := mapRows(l.q.query(ctx, h, selectPeersV2))
	if err == nil {
		out := make([]nodeRow, len(v2))
		for i, m := range v2 {
			out[i] = peerRow(m, h, m["native_address"], m["native_port"])
		}
		return out, nil
	}
	if !isInvalid(err) {
		return nil, fmt.Errorf("reading system.peers_v2: %w", err)
	}
	v1, err := mapRows(l.q.query(ctx, h, selectPeers))
	if err != nil {
		return nil, fmt.Errorf("reading system.peers: %w", err)
	}
	out := make([]nodeRow, len(v1))
	for i, m := range v1 {
		out[i] = peerRow(m, h, m["rpc_address"], nil)
	}
	return out, nil
}

// peerRow reads a peers row m read from h, the peer serving CQL on address
// and port.
func peerRow(m map[string]any, h host, address, port any) nodeRow {
	peer := addrOr(m["peer"], netip.Addr{})
	return nodeRow{
		what:   "peer " + peer.String() + " in the peers of " + h.addr.String(),
		hostID: uuid(m["host_id"]),
		addr:   netip.AddrPortFrom(addrOr(address, peer), portOr(port, h.addr.Port())),
		dc:     str(m["data_center"]),
		rack:   str(m["rack"]),
		tokens: strs(m["tokens"]),
	}
}

// readKeyspaces reads every keyspace's replication map.
func (l *Loader) readKeyspaces(ctx context.Context, h host) (map[string]map[string]string, error) {
	out := make(map[string]map[string]string)
	var (
		ks string
		m  map[string]string
	)
	it := l.q.query(ctx, h, selectKeyspaces)
	for it.Scan(&ks, &m) {
		out[ks] = m
		// Start each row afresh so that stored maps never share memory
		// with the next, whatever the driver does with a non-nil one.
		m = nil
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("reading system_schema.keyspaces: %w", err)
	}
	return out, nil
}

// readTablets returns the keyspaces that use tablets: ScyllaDB keeps a row
// in system_schema.scylla_keyspaces with initial_tablets set for each.
// Cassandra has no such table, nor older ScyllaDB versions the column:
// then no keyspace uses tablets.
func (l *Loader) readTablets(ctx context.Context, h host) (map[string]bool, error) {
	out := make(map[string]bool)
	var (
		ks      string
		initial *int
	)
	it := l.q.query(ctx, h, selectScyllaSpace)
	for it.Scan(&ks, &initial) {
		if initial != nil {
			out[ks] = true
		}
		initial = nil
	}
	if err := it.Close(); err != nil {
		if isInvalid(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading system_schema.scylla_keyspaces: %w", err)
	}
	return out, nil
}

// mapRows reads every row of it as a map of column name to value.
func mapRows(it rows) ([]map[string]any, error) {
	var out []map[string]any
	for {
		m := make(map[string]any)
		if !it.MapScan(m) {
			break
		}
		out = append(out, m)
	}
	return out, it.Close()
}

// isInvalid reports whether err is the server's Invalid error, which it
// answers a query of a table or column it does not have with.
func isInvalid(err error) bool {
	var re gocql.RequestError
	return errors.As(err, &re) && re.Code() == gocql.ErrCodeInvalid
}

// The column readers below take a value as gocql's MapScan gives it, the
// zero value for a null, and return the zero value for a value of any
// other type.

func str(v any) string {
	s, _ := v.(string)
	return s
}

func strs(v any) []string {
	s, _ := v.([]string)
	return s
}

func uuid(v any) string {
	u, ok := v.(gocql.UUID)
	if !ok || u == (gocql.UUID{}) {
		return ""
	}
	return u.String()
}

// addrOr returns the inet value v, or or when v is null or unspecified
// (0.0.0.0, ::).
func addrOr(v any, or netip.Addr) netip.Addr {
	ip, _ := v.(net.IP)
	a, ok := netip.AddrFromSlice(ip)
	if !ok || a.Unmap().IsUnspecified() {
		return or
	}
	return a.Unmap()
}

// portOr returns the int value v, or or when v is null or not a port.
func portOr(v any, or uint16) uint16 {
	p, ok := v.(int)
	if !ok || p <= 0 || p > 65535 {
		return or
	}
	return uint16(p)
}
