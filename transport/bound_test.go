package transport

import (
	"sync/atomic"
	"testing"
)

// TakeNowFair leaves room to the takers already waiting for it.
func TestBoundTakeNowFair(t *testing.T) {
	t.Parallel()
	b := NewBound(1, func() {})
	if !b.TakeNowFair(1) {
		t.Fatal("no room in an empty bound")
	}
	var stopped atomic.Bool
	took := make(chan bool)
	go func() { took <- b.Take(1, &stopped) }()
	waitUntil(t, "a taker to wait", func() bool { return b.waiters.Load() == 1 })
	b.n.Add(-1) // room, given back without waking the waiter yet
	if b.TakeNowFair(1) {
		t.Fatal("took the room a waiting taker waits for")
	}
	b.Give(0)
	b.Wake()
	if !<-took {
		t.Fatal("the waiting taker did not take the room")
	}
}
