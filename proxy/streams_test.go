package proxy

import (
	"math/rand/v2"
	"testing"
	"unsafe"
)

func TestStreams(t *testing.T) {
	var s streams
	for _, id := range []int16{0, 1, 255, 256, 32767} {
		if !s.begin(id, request{reply: replyLocal}) {
			t.Fatalf("begin(%d) refused", id)
		}
	}
	if s.begin(1, request{}) {
		t.Error("second begin on stream 1 not refused")
	}
	if s.begin(-1, request{}) {
		t.Error("begin on negative stream -1 not refused")
	}
	if s.inflight != 5 {
		t.Errorf("inflight %d, want 5", s.inflight)
	}
	if r, ok := s.end(32767); !ok || r.reply != replyLocal {
		t.Errorf("end(32767) = %v, %v", r, ok)
	}
	if _, ok := s.end(32767); ok {
		t.Error("end twice")
	}
	if _, ok := s.end(-1); ok {
		t.Error("events have no request")
	}
	if !s.busy(1) || s.busy(2) {
		t.Errorf("busy(1) = %v, busy(2) = %v; want true, false", s.busy(1), s.busy(2))
	}
	n := 0
	s.each(func(int16, request) { n++ })
	if n != 4 || s.inflight != 4 {
		t.Errorf("each saw %d, inflight %d; want 4", n, s.inflight)
	}
}

// The table agrees with a map through random begins and ends, including
// deletions inside probe runs that wrap around the table's end.
func TestStreamsAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, span := range []int{8, 40, 300, 1 << 15} {
		var s streams
		want := map[int16]int64{}
		for i := range 200000 {
			id := int16(rng.IntN(span))
			if rng.IntN(2) == 0 {
				_, dup := want[id]
				if got := s.begin(id, request{start: int64(i)}); got == dup {
					t.Fatalf("span %d: begin(%d) = %v with %d in flight", span, id, got, len(want))
				}
				if !dup {
					want[id] = int64(i)
				}
				continue
			}
			r, ok := s.end(id)
			w, wok := want[id]
			if ok != wok || r.start != w {
				t.Fatalf("span %d: end(%d) = %v %v, want %v %v", span, id, r.start, ok, w, wok)
			}
			delete(want, id)
		}
		if s.inflight != len(want) {
			t.Fatalf("span %d: inflight %d, want %d", span, s.inflight, len(want))
		}
		s.each(func(id int16, r request) {
			if want[id] != r.start {
				t.Fatalf("span %d: each gave %d for %d, want %d", span, r.start, id, want[id])
			}
			delete(want, id)
		})
		if len(want) != 0 {
			t.Fatalf("span %d: each missed %d", span, len(want))
		}
	}
}

func TestStreamsNoAllocation(t *testing.T) {
	var s streams
	s.begin(7, request{})
	if n := testing.AllocsPerRun(1000, func() {
		s.begin(8, request{start: 1})
		s.end(8)
	}); n != 0 {
		t.Errorf("%v allocations per request", n)
	}
}

// A client that has used every stream id, a few at a time, leaves an idle
// connection a table of a few slots; one that had thousands in flight at
// once leaves none.
func TestStreamsMemoryFollowsInFlight(t *testing.T) {
	slot := int(unsafe.Sizeof(streamSlot{}))
	cases := []struct {
		name     string
		inFlight int
	}{
		{"one at a time", 1},
		{"eight at a time", 8},
		{"a burst of 2048", 2048},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s streams
			peak := 0
			for start := 0; start < 1<<15; start += tc.inFlight {
				for id := start; id < min(start+tc.inFlight, 1<<15); id++ {
					s.begin(int16(id), request{})
				}
				peak = max(peak, len(s.slots))
				for id := start; id < min(start+tc.inFlight, 1<<15); id++ {
					s.end(int16(id))
				}
			}
			// Bursts that keep needing the table keep it until the
			// watchdog finds the connection idle.
			s.shrinkIdle()
			idle := len(s.slots) * slot
			// A tick with no request since the last one drops it.
			s.shrinkIdle()
			t.Logf("%d in flight: %d slots of %d B at most, %d B kept between bursts, %d B after an idle tick", tc.inFlight, peak, slot, idle, len(s.slots)*slot)
			if idle > streamsKeptIdle*slot {
				t.Errorf("idle after %d in flight: %d B, want at most %d", tc.inFlight, idle, streamsKeptIdle*slot)
			}
			if s.slots != nil {
				t.Errorf("after %d in flight and a tick with no request: %d slots kept", tc.inFlight, len(s.slots))
			}
			if peak > 4*max(tc.inFlight, streamsMinSlots) {
				t.Errorf("%d in flight took %d slots", tc.inFlight, peak)
			}
		})
	}
}

// The watchdog's tick drops the table of a connection that began no
// request since the tick before, and only with nothing in flight: a busy
// connection keeps what its bursts need.
func TestStreamsIdleTick(t *testing.T) {
	var s streams
	s.begin(1, request{})
	s.shrinkIdle() // in flight
	if s.slots == nil || s.lookup(1) == nil {
		t.Fatal("a tick dropped the table with a request in flight")
	}
	s.end(1)
	s.shrinkIdle() // a request began since the last tick
	if s.slots == nil {
		t.Fatal("a tick dropped the table of a connection busy since the last one")
	}
	s.begin(2, request{})
	s.end(2)
	s.shrinkIdle()
	if s.slots == nil {
		t.Fatal("a tick dropped the table of a connection busy since the last one")
	}
	s.shrinkIdle()
	if s.slots != nil {
		t.Fatalf("a tick after one with no request kept %d slots", len(s.slots))
	}
	if !s.begin(3, request{}) || s.lookup(3) == nil {
		t.Fatal("no request begins after the table was dropped")
	}
}

// Steady bursts keep their table, so that a pipelining client does not
// make the proxy allocate for every burst; a burst far larger than what
// follows is given back when a later, small one ends.
func TestStreamsBurstsDoNotAllocate(t *testing.T) {
	var s streams
	burst := func(n int) {
		for id := range n {
			s.begin(int16(id), request{})
		}
		for id := range n {
			s.end(int16(id))
		}
	}
	burst(64)
	if n := testing.AllocsPerRun(100, func() { burst(64) }); n != 0 {
		t.Errorf("bursts of 64: %v allocations each", n)
	}
	burst(2048)
	burst(1)
	if len(s.slots) > streamsKeptIdle {
		t.Errorf("after a burst of 2048 and one of 1: %d slots kept", len(s.slots))
	}
}
