package proxy

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cqlguard/cqlguard/schema"
)

// preparedStatement is what the proxy knows of a prepared statement.
type preparedStatement struct {
	// table is the topology table the statement reads, whose rows the
	// proxy rewrites, or replyForward.
	table reply
	// columns are a topology query's result columns, for EXECUTEs that
	// skip metadata.
	columns []string

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

	// text is the statement's text, kept while its partitions could not be
	// resolved (the schema did not know its table yet), and tried the
	// snapshot last tried: a later snapshot may know the table.
	text  []byte
	tried atomic.Pointer[schema.Snapshot]

	// id is the statement's id, statement its text and preparedIn the
	// keyspace of the connection that prepared it, part of its id: what
	// prepares it again on another node (legs.go).
	id, statement, preparedIn []byte
}

// resolve returns the statement prepared as id, resolved against snap if
// it was not yet and snap is newer than the last try; the resolved
// statement replaces p in the registry. It allocates only when it tries.
func (r *preparedRegistry) resolve(id []byte, p *preparedStatement, snap *schema.Snapshot, c *classifier) *preparedStatement {
	if p.sources != nil || p.jsonIndex > 0 || p.text == nil || p.tried.Load() == snap {
		return p
	}
	p.tried.Store(snap)
	n := c.prepare(p.text, p.keyspace, snap)
	if n.sources == nil && n.jsonIndex == 0 {
		return p
	}
	n.table, n.columns, n.lwt = p.table, p.columns, n.lwt || p.lwt
	n.id, n.statement, n.preparedIn = p.id, p.statement, p.preparedIn
	n.text = nil
	r.put(id, n)
	return n
}

// size estimates the memory the statement holds, for max_prepared_bytes:
// its own fields and everything they point to, at Go's allocation sizes
// to within a word or so.
func (p *preparedStatement) size() int {
	const word, header = 8, 24
	n := 256 + len(p.keyspace) + len(p.tableName) + len(p.text) + len(p.literals)
	n += len(p.id) + len(p.statement) + len(p.preparedIn)
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

// preparedRegistry remembers what the proxy learned of each prepared
// statement, shared by all connections (drivers prepare on one connection
// and execute on others). It holds at most maxCount statements and, but for
// a single statement larger than that, maxBytes of them; past either the
// oldest are forgotten, and an EXECUTE of a forgotten id is answered with
// Unprepared so that the driver prepares it again through the proxy.
//
// Lookups take only their shard's lock. Additions, which follow a PREPARE's
// answer and are rare, also take mu, which keeps the order of arrival over
// all shards so that the bounds hold for the whole registry.
type preparedRegistry struct {
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
	p    *preparedStatement
	size int
}

func newPreparedRegistry(max int) *preparedRegistry {
	r := &preparedRegistry{maxCount: max}
	for i := range r.shards {
		r.shards[i].byID = make(map[string]preparedEntry)
	}
	return r
}

func (r *preparedRegistry) shard(id []byte) *preparedShard {
	if len(id) == 0 {
		return &r.shards[0]
	}
	return &r.shards[id[0]%preparedShards]
}

// get returns the statement prepared as id, or nil. It allocates nothing.
func (r *preparedRegistry) get(id []byte) *preparedStatement {
	sh := r.shard(id)
	sh.mu.RLock()
	e := sh.byID[string(id)]
	sh.mu.RUnlock()
	return e.p
}

// put records p under id, forgetting the oldest statements while the
// registry is over its bounds.
func (r *preparedRegistry) put(id []byte, p *preparedStatement) {
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

func (r *preparedRegistry) held() int { return len(r.order) - r.head }

func (r *preparedRegistry) forgetOldest() {
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

// len returns how many statements the registry holds.
func (r *preparedRegistry) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held()
}

// size returns the estimated bytes of the statements the registry holds.
func (r *preparedRegistry) size() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bytes
}
