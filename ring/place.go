package ring

// Replica placement, as Cassandra 5.0 computes a token's natural replicas
// (SimpleStrategy and NetworkTopologyStrategy's calculateNaturalReplicas):
// walk the ring clockwise from the token's range, visiting each ring
// token's owner in turn.
//
// SimpleStrategy takes each node not yet taken until it has the factor's
// count or has run out of nodes.
//
// NetworkTopologyStrategy fills every datacenter at once in the same walk.
// A datacenter of factor F with N nodes in R racks takes min(F, N) nodes.
// A node is taken if its datacenter still needs replicas and it is not
// taken yet, and either no node of its rack is taken yet, or the
// datacenter still has one of its F - R rack repeats to spend: so replicas
// go to distinct racks while there are racks enough, and where there are
// fewer racks than F, the first nodes met in racks already used make up
// the count. The replicas are listed in the order taken, all datacenters
// interleaved.
//
// With transient replication a datacenter's last T replicas taken are
// transient (T reduced by as many as the datacenter lacks nodes for the
// factor); SimpleStrategy's are its last T. A placement keeps the full
// replicas only, which are the first taken, so that a request is routed to
// a node that holds the data: the walk stops in a datacenter once its full
// replicas are taken, which picks the same nodes as the walk for all of
// them would, since the repeats allowed are those of the whole factor.
//
// ScyllaDB's NetworkTopologyStrategy makes the same walk for keyspaces
// without tablets (its locator/network_topology_strategy.cc).

import "fmt"

// maxReplicaEntries bounds the replicas a placement holds (token ranges
// times replicas per range), so that a keyspace with a huge factor on a
// large ring cannot make a rebuild take gigabytes: 64 Mi entries are
// 256 MiB.
const maxReplicaEntries = 1 << 26

// walker computes the placements of one ring, sharing what it learns of
// the ring's datacenters and racks and its scratch space between them.
type walker struct {
	r *Ring
	// dcOf and rackOf give each node's datacenter, an index into dcs, and
	// its rack, an index among all (datacenter, rack) pairs.
	dcOf, rackOf []int32
	dcs          []string
	// dcNodes and dcRacks count the nodes and racks of each datacenter.
	dcNodes, dcRacks []int
	// nodeMark[n] and rackMark[k] equal the current range's mark when node
	// n is taken or a node of rack k is taken, so that they need no
	// clearing between ranges.
	nodeMark, rackMark []int
	mark               int
	// need and repeats hold each datacenter's count of replicas still to
	// take and rack repeats still allowed during a walk.
	need, repeats []int
}

func newWalker(r *Ring) *walker {
	w := &walker{r: r, dcOf: make([]int32, len(r.nodes)), rackOf: make([]int32, len(r.nodes))}
	type location struct{ dc, rack string }
	dcIndex := make(map[string]int32)
	rackIndex := make(map[location]int32)
	for i, n := range r.nodes {
		d, ok := dcIndex[n.Datacenter]
		if !ok {
			d = int32(len(w.dcs))
			dcIndex[n.Datacenter] = d
			w.dcs = append(w.dcs, n.Datacenter)
			w.dcNodes = append(w.dcNodes, 0)
			w.dcRacks = append(w.dcRacks, 0)
		}
		w.dcOf[i] = d
		w.dcNodes[d]++
		loc := location{n.Datacenter, n.Rack}
		k, ok := rackIndex[loc]
		if !ok {
			k = int32(len(rackIndex))
			rackIndex[loc] = k
			w.dcRacks[d]++
		}
		w.rackOf[i] = k
	}
	w.nodeMark = make([]int, len(r.nodes))
	w.rackMark = make([]int, len(rackIndex))
	w.need = make([]int, len(w.dcs))
	w.repeats = make([]int, len(w.dcs))
	return w
}

// place computes the placement of replication repl; nil for
// LocalStrategy, whose tokens have no replicas elsewhere.
func (w *walker) place(repl Replication) (*Placement, error) {
	p := &Placement{ring: w.r, replication: repl}
	switch repl.Strategy {
	case LocalStrategy:
		return nil, nil
	case EverywhereStrategy:
		// Every node for every range: one list, stride 0.
		p.n = len(w.r.nodes)
		p.replicas = make([]int32, p.n)
		for i := range p.replicas {
			p.replicas[i] = int32(i)
		}
		return p, nil
	case SimpleStrategy:
		p.n = min(max(repl.Factor.Full(), 0), len(w.r.nodes))
		if err := w.fill(p, w.simple); err != nil {
			return nil, err
		}
		return p, nil
	case NetworkTopologyStrategy:
		need, repeats := w.datacenterQuotas(repl)
		for _, n := range need {
			p.n += n
		}
		if err := w.fill(p, func(from int, out []int32) int { return w.topology(from, out, need, repeats) }); err != nil {
			return nil, err
		}
		return p, nil
	}
	return nil, fmt.Errorf("%w %v", ErrUnknownStrategy, repl.Strategy)
}

// fill sizes p's replicas for p.n per range and has walk fill each
// range's, walk returning how many it found.
func (w *walker) fill(p *Placement, walk func(from int, out []int32) int) error {
	if p.n == 0 {
		return nil
	}
	ranges := len(w.r.tokens)
	if ranges > maxReplicaEntries/p.n {
		return fmt.Errorf("%d replicas for each of %d token ranges are over %d", p.n, ranges, maxReplicaEntries)
	}
	p.stride = p.n
	p.replicas = make([]int32, ranges*p.n)
	for i := range ranges {
		out := p.replicas[i*p.n : (i+1)*p.n]
		if got := walk(i, out); got != p.n {
			// The counts are set so that a walk round the whole ring
			// always finds them; this is a bug, not bad input.
			return fmt.Errorf("token range %d: found %d replicas of %d", i, got, p.n)
		}
	}
	return nil
}

// nextMark returns a fresh mark for a walk: no node or rack bears it.
func (w *walker) nextMark() int {
	w.mark++
	return w.mark
}

// simple walks the ring from range from, taking distinct nodes into out
// until it is full, as SimpleStrategy does. It returns how many it took.
func (w *walker) simple(from int, out []int32) int {
	mark := w.nextMark()
	taken := 0
	for j := range len(w.r.tokens) {
		if taken == len(out) {
			break
		}
		n := w.r.owners[(from+j)%len(w.r.tokens)]
		if w.nodeMark[n] == mark {
			continue
		}
		w.nodeMark[n] = mark
		out[taken] = n
		taken++
	}
	return taken
}

// datacenterQuotas returns, for each datacenter of the ring, how many full
// replicas NetworkTopologyStrategy's repl puts there and how many rack
// repeats it allows.
func (w *walker) datacenterQuotas(repl Replication) (need, repeats []int) {
	need = make([]int, len(w.dcs))
	repeats = make([]int, len(w.dcs))
	for d, dc := range w.dcs {
		f, ok := repl.Datacenters[dc]
		if !ok {
			// The replication_factor shorthand covers the datacenters the
			// map does not name; without it, Factor is zero.
			f = repl.Factor
		}
		if f.All <= 0 {
			continue
		}
		left := min(f.All, w.dcNodes[d])
		// A datacenter short of nodes for the factor loses transient
		// replicas first.
		transient := max(f.Transient-(f.All-left), 0)
		need[d] = max(left-transient, 0)
		repeats[d] = f.All - w.dcRacks[d]
	}
	return need, repeats
}

// topology walks the ring from range from, taking replicas into out as
// NetworkTopologyStrategy does, with need and repeats as
// datacenterQuotas gives them. It returns how many it took.
func (w *walker) topology(from int, out []int32, need, repeats []int) int {
	mark := w.nextMark()
	copy(w.need, need)
	copy(w.repeats, repeats)
	open := 0
	for _, n := range need {
		if n > 0 {
			open++
		}
	}
	taken := 0
	for j := range len(w.r.tokens) {
		if open == 0 {
			break
		}
		n := w.r.owners[(from+j)%len(w.r.tokens)]
		d := w.dcOf[n]
		if w.need[d] == 0 || w.nodeMark[n] == mark {
			continue
		}
		if k := w.rackOf[n]; w.rackMark[k] != mark {
			w.rackMark[k] = mark
		} else if w.repeats[d] > 0 {
			w.repeats[d]--
		} else {
			continue
		}
		w.nodeMark[n] = mark
		out[taken] = n
		taken++
		if w.need[d]--; w.need[d] == 0 {
			open--
		}
	}
	return taken
}
