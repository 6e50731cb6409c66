package ring

// The token ring: every node's tokens in one sorted slice, and for each
// keyspace the replicas of every token range, computed once when the ring
// is built so that a lookup is a binary search and a slice.
//
// A node owning token T owns the range (P, T], P being the token before T
// on the ring; the first token's range wraps round from the last token and
// holds the minimum token. So the range of token t is that of the first
// ring token >= t, or of the first ring token if t is past the last.

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
)

// Node is a member of the ring: a node that owns tokens.
type Node struct {
	// HostID is the node's host_id, in its usual text form.
	HostID string
	// Addr is where the node serves CQL.
	Addr netip.AddrPort
	// Datacenter and Rack are where the node's snitch places it.
	Datacenter, Rack string
	// Tokens are the node's tokens, in any order.
	Tokens []int64
}

// Ring is an immutable view of a cluster's token ring and of where the
// replicas of its keyspaces' tokens are. It is safe for concurrent use.
type Ring struct {
	nodes []Node
	// tokens are all the nodes' tokens, ascending; owners[i] is the index
	// in nodes of the node owning tokens[i].
	tokens []int64
	owners []int32
	// keyspaces holds the placement of each keyspace whose replicas the
	// ring knows.
	keyspaces map[string]*Placement
}

// Placement is where the replicas of a keyspace's tokens are.
type Placement struct {
	ring        *Ring
	replication Replication
	// replicas holds n replicas for each token range, as indexes into the
	// ring's nodes, primary first: range i's start at i*stride. stride is
	// 0 when every range has the same replicas.
	replicas  []int32
	n, stride int
}

// New builds the ring of nodes and the placement of each keyspace in
// keyspaces whose strategy places tokens (not LocalStrategy). Nodes keep
// the order given: a node's index in Nodes is the index Replicas returns.
//
// Every node must have a distinct host id and at least one token, and no
// token may have two owners; otherwise New returns a nil ring and the
// error. A keyspace it cannot place (an unknown strategy, or more replicas
// than it will precompute) is left out of the ring, which New returns
// together with an error naming each such keyspace.
func New(nodes []Node, keyspaces map[string]Replication) (*Ring, error) {
	if len(nodes) == 0 {
		return nil, errors.New("ring: no nodes")
	}
	if len(nodes) > maxNodes {
		return nil, fmt.Errorf("ring: %d nodes, over %d", len(nodes), maxNodes)
	}
	r := &Ring{nodes: slices.Clone(nodes), keyspaces: make(map[string]*Placement, len(keyspaces))}
	type owned struct {
		token int64
		owner int32
	}
	var all []owned
	ids := make(map[string]int, len(nodes))
	for i := range r.nodes {
		n := &r.nodes[i]
		if j, dup := ids[n.HostID]; dup {
			return nil, fmt.Errorf("ring: nodes %s and %s have the same host id %q", r.nodes[j].Addr, n.Addr, n.HostID)
		}
		ids[n.HostID] = i
		if len(n.Tokens) == 0 {
			return nil, fmt.Errorf("ring: node %s (%s) has no tokens", n.HostID, n.Addr)
		}
		n.Tokens = slices.Clone(n.Tokens)
		for _, t := range n.Tokens {
			all = append(all, owned{t, int32(i)})
		}
	}
	slices.SortFunc(all, func(a, b owned) int { return cmp.Compare(a.token, b.token) })
	r.tokens = make([]int64, len(all))
	r.owners = make([]int32, len(all))
	for i, o := range all {
		if i > 0 && all[i-1].token == o.token {
			a, b := &r.nodes[all[i-1].owner], &r.nodes[o.owner]
			if a == b {
				return nil, fmt.Errorf("ring: node %s has token %d twice", a.HostID, o.token)
			}
			return nil, fmt.Errorf("ring: nodes %s and %s both own token %d", a.HostID, b.HostID, o.token)
		}
		r.tokens[i], r.owners[i] = o.token, o.owner
	}

	// Keyspaces with the same replication share one placement: most of a
	// cluster's keyspaces have one of a few.
	type placed struct {
		p   *Placement
		err error
	}
	var (
		w      = newWalker(r)
		shared = make(map[string]placed)
		errs   []error
	)
	for _, ks := range slices.Sorted(maps.Keys(keyspaces)) {
		repl := keyspaces[ks]
		key := repl.String()
		pl, ok := shared[key]
		if !ok {
			pl.p, pl.err = w.place(repl)
			shared[key] = pl
		}
		if pl.err != nil {
			errs = append(errs, fmt.Errorf("ring: keyspace %s left out: %w", ks, pl.err))
			continue
		}
		if pl.p != nil {
			r.keyspaces[ks] = pl.p
		}
	}
	return r, errors.Join(errs...)
}

// maxNodes bounds the nodes of a ring so that node indexes fit an int32
// and a ring's arrays stay far from overflow.
const maxNodes = 1 << 20

// Nodes returns the ring's nodes, in the order given to New. The slice is
// shared and must not be modified.
func (r *Ring) Nodes() []Node { return r.nodes }

// Tokens returns the number of tokens on the ring, which is the number of
// its token ranges.
func (r *Ring) Tokens() int { return len(r.tokens) }

// rangeOf returns the index of the token range holding t: that of the
// first ring token >= t, wrapping round to the first.
func (r *Ring) rangeOf(t int64) int {
	i, _ := slices.BinarySearch(r.tokens, t)
	if i == len(r.tokens) {
		return 0
	}
	return i
}

// Owner returns the index of the node owning token t: the node of the
// first ring token >= t, or of the first token if t is past the last.
func (r *Ring) Owner(t int64) int {
	return int(r.owners[r.rangeOf(t)])
}

// Placement returns the placement of keyspace, or nil when the ring does
// not place its tokens: a keyspace it was not given, or one of
// LocalStrategy. A []byte name b is looked up as Placement(string(b))
// without allocating.
func (r *Ring) Placement(keyspace string) *Placement {
	return r.keyspaces[keyspace]
}

// Replicas returns the replicas of token t of keyspace, as Placement's
// Replicas does; nil when the ring has no placement for keyspace.
func (r *Ring) Replicas(keyspace string, t int64) []int32 {
	return r.keyspaces[keyspace].Replicas(t)
}

// Replicas returns the indexes in the ring's nodes of the full replicas of
// token t, primary first, in the order Cassandra lists the natural
// replicas; transient replicas are left out. It returns nil for a nil
// Placement and for a placement without replicas (a factor of 0). The
// slice is shared and must not be modified; it does not allocate.
func (p *Placement) Replicas(t int64) []int32 {
	if p == nil || p.n == 0 {
		return nil
	}
	off := p.ring.rangeOf(t) * p.stride
	return p.replicas[off : off+p.n : off+p.n]
}

// Replication returns the replication p was computed from.
func (p *Placement) Replication() Replication { return p.replication }
