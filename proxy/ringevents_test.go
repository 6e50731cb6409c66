package proxy

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"

	"github.com/cqlguard/cqlguard/test/fakenode"
)

// The cluster's events reach routing: a topology change or a keyspace's
// schema change has the ring read again, a table's does not, and a node's
// status says whether it is avoided. An upstream that cannot be reached is
// passed over for the next, the follower logs in as the schema reader
// does, and the node's answers to its heartbeat are no events.
func TestRingEventsFollowed(t *testing.T) {
	t.Parallel()
	node, err := fakenode.Start("127.0.0.1:0", fakenode.Options{Username: "schema", Password: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Close)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := closed.Addr().String()
	closed.Close()

	var stale atomic.Int32
	ups, downs := make(chan string, 4), make(chan string, 4)
	e := &ringEvents{
		addrs: []string{gone, node.Addr()}, username: "schema", password: "secret", timeout: time.Second,
		stale:     func() { stale.Add(1) },
		up:        func(n string) { ups <- n },
		down:      func(n string) { downs <- n },
		heartbeat: 5 * time.Millisecond,
		log:       testLogger(),
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.run(ctx)
	}()
	// Registered: the ring is read once for what was missed.
	waitUntil(t, "the events followed", func() bool { return stale.Load() == 1 })

	addr := &primitive.Inet{Addr: net.ParseIP("10.0.0.9").To4(), Port: 9042}
	for _, tc := range []struct {
		ev    message.Message
		stale int32
		up    string
		down  string
	}{
		{&message.TopologyChangeEvent{ChangeType: primitive.TopologyChangeTypeNewNode, Address: addr}, 2, "", ""},
		{&message.StatusChangeEvent{ChangeType: primitive.StatusChangeTypeDown, Address: addr}, 2, "", "10.0.0.9:9042"},
		{&message.StatusChangeEvent{ChangeType: primitive.StatusChangeTypeUp, Address: addr}, 2, "10.0.0.9:9042", ""},
		{&message.SchemaChangeEvent{ChangeType: primitive.SchemaChangeTypeUpdated, Target: primitive.SchemaChangeTargetTable, Keyspace: "bench", Object: "kv"}, 2, "", ""},
		{&message.SchemaChangeEvent{ChangeType: primitive.SchemaChangeTypeUpdated, Target: primitive.SchemaChangeTargetKeyspace, Keyspace: "bench"}, 3, "", ""},
		{&message.TopologyChangeEvent{ChangeType: primitive.TopologyChangeTypeRemovedNode, Address: addr}, 4, "", ""},
	} {
		node.PushEvent(tc.ev)
		switch {
		case tc.up != "":
			if got := <-ups; got != tc.up {
				t.Errorf("%v: up %s, want %s", tc.ev, got, tc.up)
			}
		case tc.down != "":
			if got := <-downs; got != tc.down {
				t.Errorf("%v: down %s, want %s", tc.ev, got, tc.down)
			}
		default:
			waitUntil(t, "the ring asked for", func() bool { return stale.Load() >= tc.stale })
		}
		if got := stale.Load(); got != tc.stale {
			t.Errorf("after %v: the ring asked for %d times, want %d", tc.ev, got, tc.stale)
		}
	}
	cancel()
	<-done
}
