package integration

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/cqlguard/cqlguard/config"
)

// Soak shape: stable sessions live through the whole run, churning ones
// are closed with requests in flight and opened again; each session has
// workers goroutines issuing requests one after another.
const (
	soakStable   = 12
	soakChurning = 4
	soakWorkers  = 4
)

// TestSoakCassandra runs many gocql sessions through an in-process cqlguard
// in front of the real Cassandra: distinct writes, each with its own id and
// value, and reads of them, while some sessions are closed mid-stream. It
// checks that every request issued on a live session was answered, a
// result or an error, none left to the driver's timeout; that no answer
// arrived on a stream nothing waited on; that every acknowledged write is
// in Cassandra, read directly, with its value; and that once all sessions
// are closed the process's goroutines, open files and heap are back at
// their baseline. It runs for 5 s; CQLGUARD_SOAK=10m runs it for longer.
func TestSoakCassandra(t *testing.T) {
	skipUnlessEnabled(t)
	duration := 5 * time.Second
	if d, err := time.ParseDuration(os.Getenv("CQLGUARD_SOAK")); err == nil {
		duration = d
	}
	addr, stopProxy, err := startProxy(config.Config{Listen: "127.0.0.1:0", Upstreams: []string{cassandraAddr}})
	if err != nil {
		t.Fatal(err)
	}
	defer stopProxy()

	setup := sessionThrough(t, addr, func(c *gocql.ClusterConfig) { c.Timeout = 30 * time.Second },
		"CREATE KEYSPACE IF NOT EXISTS cqlguard_soak WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
		"DROP TABLE IF EXISTS cqlguard_soak.rows",
		"CREATE TABLE cqlguard_soak.rows (id bigint PRIMARY KEY, v blob)",
	)
	setup.Close()

	// The nonce sets this run's values apart from an earlier run's.
	run := &soakRun{addr: addr, nonce: rand.Uint64(), deadline: time.Now().Add(duration)}

	// A first session through the proxy starts whatever gocql and the
	// proxy start once per process; the baseline is taken after it.
	warm, err := run.open(addr)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := warm.Query("SELECT v FROM cqlguard_soak.rows WHERE id = ?", int64(i)).Exec(); err != nil {
			t.Fatal(err)
		}
	}
	warm.Close()
	settle(0, 0, 5*time.Second)
	before := measure()

	var wg sync.WaitGroup
	for i := range soakStable + soakChurning {
		churn := i >= soakStable
		wg.Go(func() {
			if err := run.slot(churn); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()

	// Sessions are closed and their workers done; what the connections
	// held, in gocql and in the proxy, goes asynchronously.
	after := settle(before.goroutines, before.fds, 15*time.Second)
	c := &run.counts
	t.Logf("%v, %d sessions (%d closed mid-stream): %d requests (%d writes, %d reads), %d answered: %d ok, %d errors; %d lost; %d abandoned by a session's close",
		duration, c.sessions.Load(), c.closedMidStream.Load(), c.issued.Load(), c.writes.Load(), c.reads.Load(),
		c.ok.Load()+c.errors.Load(), c.ok.Load(), c.errors.Load(), c.lost.Load(), c.abandoned.Load())
	own := run.bookkeeping()
	t.Logf("goroutines %d -> %d, open files %d -> %d, heap in use %.1f -> %.1f MiB (live %.1f -> %.1f MiB, %.2f MiB of it the soak's own records)",
		before.goroutines, after.goroutines, before.fds, after.fds, mib(before.heap), mib(after.heap), mib(before.live), mib(after.live), mib(own))

	if c.issued.Load() != c.ok.Load()+c.errors.Load()+c.lost.Load()+c.abandoned.Load() {
		t.Errorf("%d requests issued, %d accounted for", c.issued.Load(), c.ok.Load()+c.errors.Load()+c.lost.Load()+c.abandoned.Load())
	}
	if c.lost.Load() != 0 {
		t.Errorf("%d requests got no answer within the driver's timeout", c.lost.Load())
	}
	if n := c.errors.Load(); n != 0 {
		t.Errorf("%d requests answered with an error, first: %v", n, run.firstError())
	}
	if n := c.strayAnswers.Load(); n != 0 {
		t.Errorf("gocql got %d answers on streams nothing waited on", n)
	}
	if c.ok.Load() == 0 || c.closedMidStream.Load() == 0 {
		t.Errorf("the soak did nothing: %d requests answered, %d sessions closed mid-stream", c.ok.Load(), c.closedMidStream.Load())
	}
	// Goroutines: the process runs two proxies' schema refreshers and the
	// runtime's own helpers, which may briefly start one; a leak of what a
	// connection holds would leave at least one per closed session, of
	// which there were dozens.
	if after.goroutines > before.goroutines+3 {
		t.Errorf("goroutines: %d after the soak, %d before", after.goroutines, before.goroutines)
	}
	// Open files: every connection is closed, so none may remain.
	if after.fds > before.fds {
		t.Errorf("open files: %d after the soak, %d before", after.fds, before.fds)
	}
	// Live heap: besides the soak's own record of its writes, 1 MiB for
	// what gocql and the proxy cache (prepared statements, the /hot
	// table, which are bounded). Each connection holds tens of KiB of
	// buffers in the proxy and in gocql, and even a short run opens
	// dozens: a leak of them would exceed it.
	if after.live > before.live+own+1<<20 {
		t.Errorf("live heap: %.1f MiB after the soak, %.1f MiB before, %.1f MiB of it the soak's own records",
			mib(after.live), mib(before.live), mib(own))
	}
	// Heap in use counts whole spans, so it keeps the fragmentation a
	// busy run leaves: 1 to 4 MiB over runs of 5 s to a minute on a
	// 2-core machine, while the live heap grew by a few hundred KiB. It
	// only has to stay of that order.
	if after.heap > before.heap+16<<20 {
		t.Errorf("heap in use: %.1f MiB after the soak, %.1f MiB before", mib(after.heap), mib(before.heap))
	}

	verified, unacked := run.verify(t)
	t.Logf("%d acknowledged writes read back from Cassandra directly with their values; %d rows written without an acknowledgement (sessions closed in flight)",
		verified, unacked)
}

// soakRun is the state shared by a soak's sessions.
type soakRun struct {
	addr     string // the proxy's
	nonce    uint64
	deadline time.Time
	counts   soakCounts
	workerID atomic.Int64

	mu     sync.Mutex
	acked  []*soakWorker // finished workers, with what they wrote
	errors []error
}

type soakCounts struct {
	sessions, closedMidStream   atomic.Int64
	issued, writes, reads       atomic.Int64
	ok, errors, lost, abandoned atomic.Int64
	strayAnswers                atomic.Int64
}

// soakWorker is one goroutine of a session. Its writes have ids id<<32|seq.
type soakWorker struct {
	id    int64
	seq   int64
	acked []uint64 // bit seq is set once write seq was acknowledged
	found []uint64 // bit seq is set once verify read row seq back
}

func (w *soakWorker) ack(seq int64) { w.acked[seq/64] |= 1 << (seq % 64) }

func (w *soakWorker) isAcked(seq int64) bool {
	return seq >= 0 && seq/64 < int64(len(w.acked)) && w.acked[seq/64]&(1<<(seq%64)) != 0
}

// value is write id's value: the run's nonce, the id and a filler of a
// length from 0 to 1 KiB that the id determines.
func (r *soakRun) value(id int64) []byte {
	v := binary.BigEndian.AppendUint64(nil, r.nonce)
	v = binary.BigEndian.AppendUint64(v, uint64(id))
	n := int(uint64(id) * 2654435761 % 1024)
	for i := range n {
		v = append(v, byte(id)+byte(i))
	}
	return v
}

// open opens a session through the proxy, one connection, with a logger
// that counts answers on streams nothing waited on.
func (r *soakRun) open(addr string) (*gocql.Session, error) {
	c := gocql.NewCluster(addr)
	c.Authenticator = gocql.PasswordAuthenticator{Username: user, Password: password}
	c.NumConns = 1
	// Generous for a shared 2-core machine: a request not answered in
	// 20 s counts as lost.
	c.Timeout, c.ConnectTimeout = 20*time.Second, 20*time.Second
	c.Logger = strayLogger{&r.counts.strayAnswers}
	s, err := c.CreateSession()
	if err != nil {
		return nil, fmt.Errorf("opening a session through %s: %w", addr, err)
	}
	r.counts.sessions.Add(1)
	return s, nil
}

// slot runs sessions until the deadline: one for the whole run, or, with
// churn, one after another, each closed after up to a second with its
// workers' requests in flight.
func (r *soakRun) slot(churn bool) error {
	for time.Now().Before(r.deadline) {
		s, err := r.open(r.addr)
		if err != nil {
			return err
		}
		var closing atomic.Bool
		var wg sync.WaitGroup
		for range soakWorkers {
			wg.Go(func() { r.work(s, &closing) })
		}
		if churn {
			time.Sleep(time.Duration(200+rand.IntN(800)) * time.Millisecond)
			if time.Now().Before(r.deadline) {
				closing.Store(true)
				r.counts.closedMidStream.Add(1)
			}
		}
		if !closing.Load() {
			wg.Wait() // the workers stop at the deadline
		}
		s.Close()
		wg.Wait()
	}
	return nil
}

// work issues writes of new rows and reads of rows it wrote, three to one,
// until the deadline or until its session is closing.
func (r *soakRun) work(s *gocql.Session, closing *atomic.Bool) {
	w := &soakWorker{id: r.workerID.Add(1)}
	defer func() {
		r.mu.Lock()
		r.acked = append(r.acked, w)
		r.mu.Unlock()
	}()
	rng := rand.New(rand.NewPCG(uint64(w.id), r.nonce))
	var got []byte
	for n := 0; time.Now().Before(r.deadline); n++ {
		c := &r.counts
		c.issued.Add(1)
		var err error
		var read int64 = -1
		if n%4 == 3 && w.seq > 0 {
			// A read of an acknowledged write of this worker's.
			for tries := 0; tries < 8 && read < 0; tries++ {
				if seq := rng.Int64N(w.seq); w.isAcked(seq) {
					read = seq
				}
			}
		}
		if read >= 0 {
			c.reads.Add(1)
			id := w.id<<32 | read
			err = s.Query("SELECT v FROM cqlguard_soak.rows WHERE id = ?", id).Scan(&got)
			if err == nil && !bytes.Equal(got, r.value(id)) {
				err = fmt.Errorf("row %d read back as %x, want %x", id, got, r.value(id))
			}
		} else {
			c.writes.Add(1)
			seq := w.seq
			w.seq++
			if seq%64 == 0 {
				w.acked = append(w.acked, 0)
			}
			id := w.id<<32 | seq
			err = s.Query("INSERT INTO cqlguard_soak.rows (id, v) VALUES (?, ?)", id, r.value(id)).Exec()
			if err == nil {
				w.ack(seq)
			}
		}
		switch {
		case err == nil:
			c.ok.Add(1)
		case closing.Load():
			// The session was closed under this request, or before it.
			c.abandoned.Add(1)
			return
		case errors.Is(err, gocql.ErrTimeoutNoResponse):
			c.lost.Add(1)
		default:
			c.errors.Add(1)
			r.mu.Lock()
			r.errors = append(r.errors, err)
			r.mu.Unlock()
		}
	}
}

// bookkeeping estimates the heap the soak's own records of its workers
// and their writes take.
func (r *soakRun) bookkeeping() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := uint64(cap(r.acked)) * 8
	for _, w := range r.acked {
		n += 64 + uint64(cap(w.acked))*8
	}
	return n
}

func (r *soakRun) firstError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errors) == 0 {
		return nil
	}
	return r.errors[0]
}

// verify reads the table directly from Cassandra, not through the proxy,
// and checks that every acknowledged write is there with its value. It
// returns how many were, and how many rows were written without an
// acknowledgement.
func (r *soakRun) verify(t *testing.T) (verified, unacked int) {
	t.Helper()
	s := sessionThrough(t, cassandraAddr, func(c *gocql.ClusterConfig) { c.Timeout = 30 * time.Second })
	defer s.Close()
	workers := map[int64]*soakWorker{}
	acked := 0
	for _, w := range r.acked {
		workers[w.id] = w
		for seq := range w.seq {
			if w.isAcked(seq) {
				acked++
			}
		}
	}
	iter := s.Query("SELECT id, v FROM cqlguard_soak.rows").PageSize(5000).Iter()
	var id int64
	var v []byte
	for iter.Scan(&id, &v) {
		w, seq := workers[id>>32], id&(1<<32-1)
		if w == nil || !w.isAcked(seq) {
			unacked++
			continue
		}
		if !bytes.Equal(v, r.value(id)) {
			t.Errorf("row %d: value %x, want %x", id, v, r.value(id))
			continue
		}
		if w.found == nil {
			w.found = make([]uint64, len(w.acked))
		}
		w.found[seq/64] |= 1 << (seq % 64)
		verified++
	}
	if err := iter.Close(); err != nil {
		t.Fatalf("reading the rows back: %v", err)
	}
	if verified != acked {
		missing := 0
		for _, w := range r.acked {
			for seq := range w.seq {
				found := w.found != nil && w.found[seq/64]&(1<<(seq%64)) != 0
				if id := w.id<<32 | seq; w.isAcked(seq) && !found {
					if missing < 5 {
						t.Errorf("acknowledged write %d is not in Cassandra", id)
					}
					missing++
				}
			}
		}
		t.Errorf("%d of %d acknowledged writes are not in Cassandra", missing, acked)
	}
	return verified, unacked
}

// strayLogger counts gocql's warnings of an answer on a stream that no
// request waits on: a second answer to a request, or one to a request the
// driver gave up on.
type strayLogger struct{ n *atomic.Int64 }

func (l strayLogger) Error(msg string, fields ...gocql.LogField) {}
func (l strayLogger) Info(msg string, fields ...gocql.LogField)  {}
func (l strayLogger) Debug(msg string, fields ...gocql.LogField) {}
func (l strayLogger) Warning(msg string, fields ...gocql.LogField) {
	if strings.Contains(msg, "no handler") {
		l.n.Add(1)
	}
}

// resources is what the process holds: goroutines, open files, and after
// a collection the heap's live bytes and the spans that hold them.
type resources struct {
	goroutines, fds int
	live, heap      uint64
}

func measure() resources {
	runtime.GC()
	runtime.GC() // the second frees what sync.Pools kept through the first
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	fds, _ := os.ReadDir("/proc/self/fd")
	return resources{goroutines: runtime.NumGoroutine(), fds: len(fds), live: m.HeapAlloc, heap: m.HeapInuse}
}

// settle waits up to timeout for the goroutines and open files to be at
// most goroutines and fds (zero: until they stop falling), and returns
// what the process holds then.
func settle(goroutines, fds int, timeout time.Duration) resources {
	last := measure()
	for end := time.Now().Add(timeout); time.Now().Before(end); {
		time.Sleep(100 * time.Millisecond)
		now := measure()
		if goroutines > 0 && now.goroutines <= goroutines && now.fds <= fds {
			return now
		}
		if goroutines == 0 && now.goroutines == last.goroutines && now.fds == last.fds {
			return now
		}
		last = now
	}
	return last
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }
