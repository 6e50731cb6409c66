package classify

// The registry of prepared statements: bounded in count and in bytes, the
// oldest forgotten first, shared by every connection.

import (
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/schema"
)

// Prepared is what is known of a prepared statement: what a PREPARE's
// text says, completed with the upstream's answer (Registry.Learn). Once
// recorded it does not change, but for the schema it was last resolved
// against: a statement resolved later replaces it.
type Prepared struct {
	// topology is the table drivers learn the cluster from that the
	// statement reads, and columns its result columns, for EXECUTEs that
	// skip metadata.
	topology Topology
	// unresolved is set while the statement's partitions could not be
	// resolved because the schema did not know its table, and tried is the
	// snapshot last tried: a later snapshot may know the table.
	unresolved bool
	columns    []string

	// What classification needs: the statement's table and operation, and
	// where each partition key component comes from (nil when the
	// statement does not pin its partitions).
	keyspace, tableName []byte
	op                  Op
	lwt, internal       bool
	use                 bool // a USE: its answer sets the connection's keyspace
	// jsonIndex is, for INSERT ... JSON ?, its marker's index plus one:
	// the partition key is read from that value's document.
	jsonIndex int32
	sources   [][]pkSource
	literals  []byte // the serialized literals sources name

	// text is the statement's text, which resolves it against a later
	// schema, and with which another node can be asked to prepare it.
	text  []byte
	tried atomic.Pointer[schema.Snapshot]
	// id is the statement's id, and preparedIn the keyspace of the
	// connection that prepared it, part of its id: what another node is
	// asked to prepare it in.
	id, preparedIn []byte
}

// resolve returns the statement prepared as id, resolved against snap if
// it was not yet and snap is newer than the last try; the resolved
// statement replaces p in the registry. It allocates only when it tries.
func (r *Registry) resolve(id []byte, p *Prepared, snap *schema.Snapshot, c *Classifier) *Prepared {
	if !p.unresolved || p.sources != nil || p.jsonIndex > 0 || p.tried.Load() == snap {
		return p
	}
	p.tried.Store(snap)
	n := c.prepare(p.text, p.keyspace, snap)
	if n.sources == nil && n.jsonIndex == 0 {
		return p
	}
	n.columns, n.lwt = p.columns, n.lwt || p.lwt
	n.id, n.preparedIn = p.id, p.preparedIn
	r.put(id, n)
	return n
}

// size estimates the memory the statement holds, for max_prepared_bytes:
// its own fields and everything they point to, at Go's allocation sizes
// to within a word or so.
func (p *Prepared) size() int {
	const word, header = 8, 24
	n := 232 + len(p.keyspace) + len(p.tableName) + len(p.text) + len(p.literals)
	n += len(p.id) + len(p.preparedIn)
	n += 2 * word * len(p.columns) // string headers
	for _, c := range p.columns {
		n += len(c)
	}
	n += header * len(p.sources)
	for _, terms := range p.sources {
		n += int(unsafe.Sizeof(pkSource{})) * len(terms)
	}
	return n
}

// preparedShards spreads the registry over locks: statement ids are hashes,
// so their first byte spreads evenly, and an EXECUTE on one core does not
// contend with a PREPARE on another.
const preparedShards = 64

// A Registry remembers what was learned of each prepared statement, by id,
// shared by all connections (drivers prepare on one connection and execute
// on others). It holds at most maxCount statements and, but for a single
// statement larger than that, maxBytes of them; past either the oldest are
// forgotten, and an EXECUTE of a forgotten id is classified as Unprepared
// so that the driver can be told to prepare it again.
//
// Lookups take only their shard's lock. Additions, which follow a PREPARE's
// answer and are rare, also take mu, which keeps the order of arrival over
// all shards so that the bounds hold for the whole registry.
type Registry struct {
	shards [preparedShards]preparedShard

	mu       sync.Mutex
	order    []string // ids, oldest first from head
	head     int
	bytes    int // estimated size of the statements held
	maxCount int
	maxBytes int // 0: no bound
}

type preparedShard struct {
	mu   sync.RWMutex
	byID map[string]preparedEntry
}

type preparedEntry struct {
	p    *Prepared
	size int
}

// NewRegistry returns a registry of at most maxCount statements and, when
// maxBytes is not 0, about maxBytes of them, as Prepared's size estimates
// (max_prepared_statements, max_prepared_bytes).
func NewRegistry(maxCount, maxBytes int) *Registry {
	r := &Registry{maxCount: maxCount, maxBytes: maxBytes}
	for i := range r.shards {
		r.shards[i].byID = make(map[string]preparedEntry)
	}
	return r
}

func (r *Registry) shard(id []byte) *preparedShard {
	if len(id) == 0 {
		return &r.shards[0]
	}
	return &r.shards[id[0]%preparedShards]
}

// get returns the statement prepared as id, or nil. It allocates nothing.
func (r *Registry) get(id []byte) *Prepared {
	sh := r.shard(id)
	sh.mu.RLock()
	e := sh.byID[string(id)]
	sh.mu.RUnlock()
	return e.p
}

// put records p under id, forgetting the oldest statements while the
// registry is over its bounds.
func (r *Registry) put(id []byte, p *Prepared) {
	sh := r.shard(id)
	key := string(id)
	size := len(key) + 64 + p.size() // the id twice, the map's entry
	r.mu.Lock()
	defer r.mu.Unlock()
	sh.mu.Lock()
	old, ok := sh.byID[key]
	sh.byID[key] = preparedEntry{p, size}
	sh.mu.Unlock()
	r.bytes += size - old.size
	if !ok {
		r.order = append(r.order, key)
	}
	for r.held() > 1 && (r.held() > r.maxCount || r.maxBytes > 0 && r.bytes > r.maxBytes) {
		r.forgetOldest()
	}
	// Drop what the queue's front has left behind, at most once per its
	// length in additions.
	if r.head > 0 && r.head >= len(r.order)/2 {
		r.order = append(r.order[:0:0], r.order[r.head:]...)
		r.head = 0
	}
}

func (r *Registry) held() int { return len(r.order) - r.head }

func (r *Registry) forgetOldest() {
	key := r.order[r.head]
	r.order[r.head] = ""
	r.head++
	sh := &r.shards[0]
	if key != "" {
		sh = &r.shards[key[0]%preparedShards]
	}
	sh.mu.Lock()
	r.bytes -= sh.byID[key].size
	delete(sh.byID, key)
	sh.mu.Unlock()
}

// Len returns how many statements r holds.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held()
}

// Size returns the estimated bytes of the statements r holds.
func (r *Registry) Size() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bytes
}

// Learn records the statement the upstream prepared, as its answer prep
// names it: p, what Classify learned of the PREPARE's text (nil when it
// learned nothing), completed with what prep says. Its partition key comes
// from the schema, or else from prep's partition key indexes (protocol v4
// and later): each a bound variable. It returns the statement recorded. It
// allocates: preparing is rare.
func (r *Registry) Learn(p *Prepared, prep *frame.Prepared) *Prepared {
	if p == nil {
		p = &Prepared{}
	}
	if p.sources == nil && prep.PKIndexes.Len() > 0 && p.op != OpNone {
		for i := range prep.PKIndexes.Len() {
			p.sources = append(p.sources, []pkSource{{index: int32(prep.PKIndexes.At(i))}})
		}
		if len(p.keyspace) == 0 {
			p.keyspace = append([]byte(nil), prep.Keyspace...)
		}
	}
	p.lwt = p.lwt || prep.LWT
	p.id = slices.Clone(prep.ID)
	if p.topology != TopologyNone {
		// The result columns, which EXECUTEs that skip metadata will not
		// repeat; copied, since prep points into the answer.
		p.columns = make([]string, 0, prep.Result.Len())
		for col, ok := prep.Result.Next(); ok; col, ok = prep.Result.Next() {
			p.columns = append(p.columns, string(col.Name))
		}
	}
	r.put(prep.ID, p)
	return p
}

// ID is the statement's id, as the node that prepared it answered.
func (p *Prepared) ID() []byte { return p.id }

// Text is the statement's text, and PreparedIn the keyspace of the
// connection that prepared it (nil for none): a node prepares it under the
// same id in that keyspace.
func (p *Prepared) Text() []byte { return p.text }

// PreparedIn: see Text.
func (p *Prepared) PreparedIn() []byte { return p.preparedIn }

// LWT reports whether the statement is conditional (an IF clause), as its
// text or the upstream's answer says.
func (p *Prepared) LWT() bool { return p.lwt }

// Columns are the result columns of a statement that reads a table drivers
// learn the cluster from (Topology), for EXECUTEs that skip metadata; nil
// for other statements.
func (p *Prepared) Columns() []string { return p.columns }
