package proxy

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/apache/cassandra-gocql-driver/v2/lz4"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

// A replica that forgets the statements cqlguard prepared on it (a restart
// its connections survived, an eviction) answers the next EXECUTE or BATCH
// routed there Unprepared: cqlguard prepares them there again and runs the
// request again, and the driver sees only its answer. It prepares nothing
// more through the proxy, which it would on seeing Unprepared.
func TestRoutedUnpreparedHidden(t *testing.T) {
	t.Parallel()
	nodes := startNodes(t, 3, fakenode.Options{})
	p, addr := routedProxy(t, nodes[0].Addr(), splitRing{low: nodes[1].Addr(), high: nodes[2].Addr()})
	k := keyOn(true) // held by nodes[1]
	for _, tc := range []struct {
		proto int
		comp  gocql.Compressor
	}{
		{4, nil}, {4, lz4.LZ4Compressor{}}, {5, nil}, {5, lz4.LZ4Compressor{}},
	} {
		t.Run(fmt.Sprintf("v%d-lz4=%t", tc.proto, tc.comp != nil), func(t *testing.T) {
			cluster := gocql.NewCluster(addr)
			cluster.ProtoVersion, cluster.Compressor, cluster.NumConns = tc.proto, tc.comp, 1
			s, err := cluster.CreateSession()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			// Bounded: a driver sent Unprepared for a statement the proxy
			// keeps running unprepared prepares it again for ever.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			read := func() error { return s.Query("SELECT v FROM bench.kv WHERE k = ?", k).ExecContext(ctx) }
			batch := func() error {
				b := s.Batch(gocql.UnloggedBatch)
				b.Query("UPDATE bench.kv SET v = 0x00 WHERE k = ?", k)
				b.Query("UPDATE bench.kv SET v = 0x01 WHERE k = ?", k)
				return b.ExecContext(ctx)
			}
			// Prepared through the proxy, and on the replica.
			if err := read(); err != nil {
				t.Fatalf("read: %v", err)
			}
			if err := batch(); err != nil {
				t.Fatalf("batch: %v", err)
			}
			prepares := testutil.ToFloat64(p.metrics.frames[dirRequest][frame.OpPrepare])
			reprepares := testutil.ToFloat64(p.metrics.reprepares)
			batches := nodes[1].Batches()
			for _, run := range []struct {
				name string
				run  func() error
			}{{"BATCH", batch}, {"EXECUTE", read}} {
				nodes[1].ForgetPrepared()
				if err := run.run(); err != nil {
					t.Fatalf("%s after the replica forgot its statements: %v", run.name, err)
				}
			}
			if got := testutil.ToFloat64(p.metrics.frames[dirRequest][frame.OpPrepare]) - prepares; got != 0 {
				t.Errorf("the driver prepared %v statements again: it saw Unprepared", got)
			}
			if got := testutil.ToFloat64(p.metrics.reprepares) - reprepares; got != 2 {
				t.Errorf("%v requests prepared again on the replica, want 2", got)
			}
			if got := nodes[1].Batches() - batches; got != 1 {
				t.Errorf("the replica ran %d batches, want 1", got)
			}
		})
	}
}

// batchFrame is a v4 BATCH (unlogged) on stream of the prepared statement
// id, n times, without values, consistency ONE.
func batchFrame(stream int16, id []byte, n int) []byte {
	body := []byte{1}
	body = binary.BigEndian.AppendUint16(body, uint16(n))
	for range n {
		body = append(body, 1)
		body = binary.BigEndian.AppendUint16(body, uint16(len(id)))
		body = append(body, id...)
		body = append(body, 0, 0)
	}
	body = append(body, 0, 1, 0)
	f := frame.AppendHeader(nil, frame.Header{Version: 4, Stream: stream, Opcode: frame.OpBatch, Length: len(body)})
	return append(f, body...)
}

// A replica's Unprepared is handled once per request, whatever happens
// meanwhile: a second Unprepared, or a PREPARE the replica refuses, gives
// the client the replica's Unprepared; the replica lost, the session
// draining, closed by its client or reloaded while the statement is
// prepared again leave no request unanswered, no stream or slot of
// max_in_flight taken, and give the client no answer of the proxy's own
// PREPARE.
func TestRoutedUnpreparedOnce(t *testing.T) {
	t.Parallel()
	const (
		read  = "SELECT v FROM bench.kv WHERE k = 1"
		write = "UPDATE bench.kv SET v = 0x00 WHERE k = 1"
	)
	type env struct {
		t        *testing.T
		p        *Proxy
		c        *stubClient
		leg      *legNode
		read     []byte // the read's id
		write    []byte // the write's id
		shutdown func(context.Context) error
	}
	// wantUnprepared reads the next answer and wants Unprepared on stream.
	wantUnprepared := func(e env, stream int16) {
		e.t.Helper()
		got, op, msg, err := e.c.nextOp()
		if err != nil || got != stream || op != frame.OpError || !strings.HasPrefix(msg, "0x2500 ") {
			e.t.Fatalf("want Unprepared on stream %d, got %s %q on stream %d, %v", stream, op, msg, got, err)
		}
	}
	// holdPrepare has the leg forget and hold the PREPARE that follows an
	// EXECUTE on stream 3, and waits for it.
	holdPrepare := func(e env) {
		e.leg.set(func(n *legNode) { n.unprepared, n.hold = 1, "WHERE" })
		e.c.write(executeFrame(3, e.read))
		e.leg.waitHeld(e.t, 1)
	}
	tests := []struct {
		name string
		run  func(e env)
		// prepares are the PREPAREs the leg is sent after the first two,
		// and reprepares the requests prepared again.
		prepares, reprepares int
	}{
		{"EXECUTE forgotten", func(e env) {
			e.leg.set(func(n *legNode) { n.unprepared = 1 })
			e.c.answered(executeFrame(3, e.read), 3)
		}, 1, 1},
		{"BATCH forgotten, its statement prepared once", func(e env) {
			e.leg.set(func(n *legNode) { n.unprepared = 1 })
			e.c.answered(batchFrame(3, e.write, 3), 3)
		}, 1, 1},
		{"forgotten again", func(e env) {
			e.leg.set(func(n *legNode) { n.unprepared = 2 })
			e.c.write(executeFrame(3, e.read))
			wantUnprepared(e, 3)
			// The client prepares again, and its next EXECUTE runs.
			e.c.answered(executeFrame(4, e.c.prepared(5, read)), 4)
		}, 2, 1},
		{"PREPARE refused", func(e env) {
			e.leg.set(func(n *legNode) { n.unprepared, n.refusePrepare = 1, true })
			e.c.write(executeFrame(3, e.read))
			wantUnprepared(e, 3)
		}, 1, 1},
		{"replica lost", func(e env) {
			holdPrepare(e)
			e.leg.drop()
			stream, op, msg, err := e.c.nextOp()
			if err != nil || stream != 3 || op != frame.OpError || !strings.Contains(msg, "may or may not have been applied") {
				e.t.Fatalf("want a server error on stream 3, got %s %q on stream %d, %v", op, msg, stream, err)
			}
			e.leg.release()
			// Run where the driver sent it, while the replica is avoided.
			e.c.answered(executeFrame(4, e.read), 4)
		}, 1, 1},
		{"draining", func(e env) {
			holdPrepare(e)
			done := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				done <- e.shutdown(ctx)
			}()
			waitUntil(e.t, "draining", func() bool {
				e.p.mu.Lock()
				defer e.p.mu.Unlock()
				return e.p.draining
			})
			e.leg.release()
			e.c.wantResult(3)
			if stream, op, msg, err := e.c.nextOp(); err == nil {
				e.t.Errorf("after the last answer, %s %q on stream %d; want the connection closed", op, msg, stream)
			}
			if err := <-done; err != nil {
				e.t.Errorf("Shutdown: %v", err)
			}
		}, 1, 1},
		{"client leaves", func(e env) {
			holdPrepare(e)
			e.c.c.Close()
			waitUntil(e.t, "the session to end", func() bool {
				e.p.mu.Lock()
				defer e.p.mu.Unlock()
				return len(e.p.sessions) == 0
			})
			e.leg.release()
		}, 1, 1},
		{"reload", func(e env) {
			holdPrepare(e)
			cfg := config.Default()
			cfg.Admin.Listen = ""
			cfg.Listen, cfg.Upstreams = "127.0.0.1:0", []string{"127.0.0.1:1"}
			cfg.MaxInFlightPerConnection = 7
			if err := e.p.Reload(cfg); err != nil {
				e.t.Fatalf("Reload: %v", err)
			}
			e.leg.release()
			e.c.wantResult(3)
		}, 1, 1},
		{"many in flight, read late", func(e env) {
			const n = 50
			e.leg.set(func(l *legNode) { l.unprepared = n })
			var reqs []byte
			for i := range n {
				reqs = append(reqs, executeFrame(int16(10+i), e.read)...)
			}
			e.c.write(reqs)
			waitUntil(e.t, "every request prepared again", func() bool {
				return testutil.ToFloat64(e.p.metrics.reprepares) == n
			})
			seen := map[int16]bool{}
			for range n {
				stream, op, msg, err := e.c.nextOp()
				if err != nil || op != frame.OpResult || seen[stream] {
					e.t.Fatalf("answers %v; then %s %q on stream %d, %v", seen, op, msg, stream, err)
				}
				seen[stream] = true
			}
		}, 50, 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up, leg := startLegNode(t), startLegNode(t)
			p, addr, shutdown := startLegsProxy(t, up.addr(), fixedRing{leg.addr()}, nil)
			c := dialStub(t, addr)
			c.c.SetDeadline(time.Now().Add(10 * time.Second))
			e := env{t: t, p: p, c: c, leg: leg, shutdown: shutdown}
			e.read = c.prepared(1, read)
			e.write = c.prepared(1, write)
			c.answered(executeFrame(2, e.read), 2)
			c.answered(executeFrame(2, e.write), 2)
			tt.run(e)
			leg.set(func(n *legNode) {
				if n.prepares-2 != tt.prepares {
					t.Errorf("the replica was sent %d PREPAREs after the first two, want %d", n.prepares-2, tt.prepares)
				}
			})
			if got := testutil.ToFloat64(p.metrics.reprepares); got != float64(tt.reprepares) {
				t.Errorf("cqlguard_routed_reprepares_total %v, want %d", got, tt.reprepares)
			}
			waitUntil(t, "max_in_flight given back", func() bool { return p.inflight.Taken() == 0 })
		})
	}
}
