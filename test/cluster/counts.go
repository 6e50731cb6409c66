package cluster

import (
	"context"
	"fmt"
	"math"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// Table names a table of a keyspace.
type Table struct{ Keyspace, Name string }

func (t Table) String() string { return t.Keyspace + "." + t.Name }

// Counts are one node's requests of one table.
type Counts struct {
	// CoordinatorReads and CoordinatorWrites count the reads and writes
	// the node coordinated: those clients sent it.
	CoordinatorReads, CoordinatorWrites int64
	// LocalReads and LocalWrites count those the node served from its own
	// data, whichever node coordinated them.
	LocalReads, LocalWrites int64
}

// Coordinated is the number of requests the node coordinated.
func (c Counts) Coordinated() int64 { return c.CoordinatorReads + c.CoordinatorWrites }

// Local is the number of requests the node served from its own data.
func (c Counts) Local() int64 { return c.LocalReads + c.LocalWrites }

func (c Counts) add(d Counts, sign int64) Counts {
	return Counts{
		CoordinatorReads:  c.CoordinatorReads + sign*d.CoordinatorReads,
		CoordinatorWrites: c.CoordinatorWrites + sign*d.CoordinatorWrites,
		LocalReads:        c.LocalReads + sign*d.LocalReads,
		LocalWrites:       c.LocalWrites + sign*d.LocalWrites,
	}
}

// Node is one node's counts.
type Node struct {
	Tables map[Table]Counts
	// PeerResponses counts the answers the node had from other nodes to
	// requests it sent them (its RequestResponseStage's completed tasks).
	// At replication factor 1 a read or write costs one exactly when the
	// node that coordinated it does not own its partition. Other traffic
	// between the nodes counts too: the superuser's login, and each
	// reload of the nodes' authentication caches while clients work (every
	// 2 s), read system_auth on the node that owns it.
	PeerResponses int64
}

// Snapshot is every node's counts, by address.
type Snapshot map[string]Node

// Since returns the counts s added to before: what happened between two
// snapshots.
func (s Snapshot) Since(before Snapshot) Snapshot {
	d := make(Snapshot, len(s))
	for host, n := range s {
		b := before[host]
		dn := Node{Tables: make(map[Table]Counts, len(n.Tables)), PeerResponses: n.PeerResponses - b.PeerResponses}
		for t, c := range n.Tables {
			dn.Tables[t] = c.add(b.Tables[t], -1)
		}
		d[host] = dn
	}
	return d
}

// Total is table's counts summed over the nodes.
func (s Snapshot) Total(t Table) Counts {
	var c Counts
	for _, n := range s {
		c = c.add(n.Tables[t], 1)
	}
	return c
}

// ReplicaShare is the share of the requests the nodes coordinated, of
// every table the snapshot holds, that a node owning their partition
// coordinated: 1 − peer responses / requests coordinated. It holds for
// tables of replication factor 1 when the requests of those tables were
// all the traffic between the nodes (Node.PeerResponses). It is NaN when
// the snapshot counts no request.
func (s Snapshot) ReplicaShare() float64 {
	var coordinated, hops int64
	for _, n := range s {
		hops += n.PeerResponses
		for _, c := range n.Tables {
			coordinated += c.Coordinated()
		}
	}
	if coordinated == 0 {
		return math.NaN()
	}
	return 1 - float64(hops)/float64(coordinated)
}

// Reader reads the counts of each node through a session to that node
// alone: Cassandra keeps them per node, in its system_views keyspace.
type Reader struct {
	hosts    []string
	sessions []*gocql.Session
}

// NewReader opens a session, one connection, to each of hosts (on Port)
// with auth. Open it before the requests it is to count: a login makes
// requests between the nodes (Node.PeerResponses).
func NewReader(auth gocql.Authenticator, hosts ...string) (*Reader, error) {
	r := &Reader{hosts: hosts}
	for _, h := range hosts {
		c := gocql.NewCluster(h)
		c.Port = Port
		c.Authenticator = auth
		c.NumConns = 1
		c.DisableInitialHostLookup = true
		c.HostFilter = gocql.WhiteListHostFilter(h)
		s, err := c.CreateSession()
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("connecting to %s: %w", h, err)
		}
		r.sessions = append(r.sessions, s)
	}
	return r, nil
}

// Close closes the sessions.
func (r *Reader) Close() {
	for _, s := range r.sessions {
		s.Close()
	}
}

// counters are the virtual tables of per-table counts, each with the
// field of Counts it fills.
var counters = []struct {
	table string
	field func(*Counts) *int64
}{
	{"coordinator_read_latency", func(c *Counts) *int64 { return &c.CoordinatorReads }},
	{"coordinator_write_latency", func(c *Counts) *int64 { return &c.CoordinatorWrites }},
	{"local_read_latency", func(c *Counts) *int64 { return &c.LocalReads }},
	{"local_write_latency", func(c *Counts) *int64 { return &c.LocalWrites }},
}

// Snapshot reads every node's counts of keyspace's tables.
func (r *Reader) Snapshot(ctx context.Context, keyspace string) (Snapshot, error) {
	snap := make(Snapshot, len(r.hosts))
	for i, s := range r.sessions {
		n, err := readNode(ctx, s, keyspace)
		if err != nil {
			return nil, fmt.Errorf("reading the counts of %s: %w", r.hosts[i], err)
		}
		snap[r.hosts[i]] = n
	}
	return snap, nil
}

func readNode(ctx context.Context, s *gocql.Session, keyspace string) (Node, error) {
	n := Node{Tables: map[Table]Counts{}}
	for _, ct := range counters {
		iter := s.Query("SELECT table_name, count FROM system_views."+ct.table+" WHERE keyspace_name = ?", keyspace).IterContext(ctx)
		var name string
		var count int64
		for iter.Scan(&name, &count) {
			t := Table{keyspace, name}
			c := n.Tables[t]
			*ct.field(&c) = count
			n.Tables[t] = c
		}
		if err := iter.Close(); err != nil {
			return Node{}, fmt.Errorf("system_views.%s: %w", ct.table, err)
		}
	}
	err := s.Query("SELECT completed_tasks FROM system_views.thread_pools WHERE name = 'RequestResponseStage'").ScanContext(ctx, &n.PeerResponses)
	if err != nil {
		return Node{}, fmt.Errorf("system_views.thread_pools: %w", err)
	}
	return n, nil
}
