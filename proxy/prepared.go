package proxy

import (
	"sync"
	"sync/atomic"

	"github.com/datastax/go-cassandra-native-protocol/message"

	"github.com/cqlguard/cqlguard/schema"
)

// preparedStatement is what the proxy knows of a prepared statement.
type preparedStatement struct {
	// table is the topology table the statement reads, whose rows the
	// proxy rewrites, or replyForward.
	table reply
	// columns are a topology query's result columns, for EXECUTEs that
	// skip metadata.
	columns []*message.ColumnMetadata

	// What classification needs: the statement's table and operation, and
	// where each partition key component comes from (nil when the
	// statement does not pin its partitions).
	keyspace, tableName []byte
	op                  Op
	lwt, internal       bool
	sources             [][]pkSource

	// text is the statement's text, kept while its partitions could not be
	// resolved (the schema did not know its table yet), and tried the
	// snapshot last tried: a later snapshot may know the table.
	text  []byte
	tried atomic.Pointer[schema.Snapshot]
}

// resolve returns the statement prepared as id, resolved against snap if
// it was not yet and snap is newer than the last try; the resolved
// statement replaces p in the registry. It allocates only when it tries.
func (r *preparedRegistry) resolve(id []byte, p *preparedStatement, snap *schema.Snapshot, c *classifier) *preparedStatement {
	if p.sources != nil || p.text == nil || p.tried.Load() == snap {
		return p
	}
	p.tried.Store(snap)
	n := c.prepare(p.text, p.keyspace, snap)
	if n.sources == nil {
		return p
	}
	n.table, n.columns, n.lwt = p.table, p.columns, n.lwt || p.lwt
	n.text = nil
	r.put(id, n)
	return n
}

// preparedShards spreads the registry over locks: statement ids are hashes,
// so their first byte spreads evenly, and an EXECUTE on one core does not
// contend with a PREPARE on another.
const preparedShards = 64

// preparedRegistry remembers what the proxy learned of each prepared
// statement, shared by all connections (drivers prepare on one connection
// and execute on others). It holds at most max statements; past that the
// oldest are forgotten, and an EXECUTE of a forgotten id is answered with
// Unprepared so that the driver prepares it again through the proxy.
type preparedRegistry struct {
	shards [preparedShards]preparedShard
}

type preparedShard struct {
	mu    sync.RWMutex
	byID  map[string]*preparedStatement
	order []string // ids in insertion order, a ring once full
	next  int      // where the ring writes next
	max   int
}

func newPreparedRegistry(max int) *preparedRegistry {
	r := &preparedRegistry{}
	per := max/preparedShards + 1
	for i := range r.shards {
		r.shards[i].byID = make(map[string]*preparedStatement)
		r.shards[i].max = per
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
	p := sh.byID[string(id)]
	sh.mu.RUnlock()
	return p
}

// put records p under id, forgetting the shard's oldest statement when full.
func (r *preparedRegistry) put(id []byte, p *preparedStatement) {
	sh := r.shard(id)
	key := string(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.byID[key]; ok {
		sh.byID[key] = p
		return
	}
	if len(sh.order) < sh.max {
		sh.order = append(sh.order, key)
	} else {
		delete(sh.byID, sh.order[sh.next])
		sh.order[sh.next] = key
		sh.next = (sh.next + 1) % sh.max
	}
	sh.byID[key] = p
}

// len returns how many statements the registry holds.
func (r *preparedRegistry) len() int {
	n := 0
	for i := range r.shards {
		r.shards[i].mu.RLock()
		n += len(r.shards[i].byID)
		r.shards[i].mu.RUnlock()
	}
	return n
}
