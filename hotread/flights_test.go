package hotread

import (
	"slices"
	"testing"
)

func TestFlights(t *testing.T) {
	t.Parallel()
	f := NewFlights[int](10, 10)
	r := baseRead()
	fl, joined := f.Join(r, Gen{}, 0)
	if fl == nil || joined {
		t.Fatalf("first Join = %v, %v; want to lead", fl, joined)
	}
	// The flight keeps its own copy of the identity.
	r.Body[0] ^= 0xff
	r.Keyspace[0] ^= 0xff
	if !identical(fl.Read(), baseRead()) {
		t.Fatalf("Read() = %+v, want a copy of the read that led", fl.Read())
	}
	for w := 1; w <= 3; w++ {
		if got, joined := f.Join(baseRead(), Gen{}, w); got != fl || !joined {
			t.Fatalf("Join %d = %v, %v; want to join the flight", w, got, joined)
		}
	}
	if ws := f.Land(fl); !slices.Equal(ws, []int{1, 2, 3}) {
		t.Fatalf("Land = %v, want the waiters in the order they joined", ws)
	}
	if ws := f.Land(fl); !slices.Equal(ws, []int{1, 2, 3}) {
		t.Fatalf("Land again = %v, want the same waiters", ws)
	}
	if f.Len() != 0 {
		t.Fatalf("Len = %d after Land", f.Len())
	}
	// Landed, the flight is joined no more: the next read leads.
	next, joined := f.Join(baseRead(), Gen{}, 4)
	if next == nil || joined {
		t.Fatalf("Join after Land = %v, %v; want to lead", next, joined)
	}
	if want := (FlightStats{Flights: 1, Led: 2, Joined: 3}); f.Stats() != want {
		t.Fatalf("Stats = %+v, want %+v", f.Stats(), want)
	}
	f.Release(fl)
	// A flight released without landing leaves the table.
	f.Release(next)
	if f.Len() != 0 {
		t.Fatalf("Len = %d after Release", f.Len())
	}
	// A released flight comes back clean.
	again, _ := f.Join(testRead(1, 8), Gen{part: 1}, 5)
	if ws := f.Land(again); len(ws) != 0 || !identical(again.Read(), testRead(1, 8)) || again.gen != (Gen{part: 1}) {
		t.Fatalf("reused flight: waiters %v, read %+v, gen %+v", ws, again.Read(), again.gen)
	}
	f.Release(again)
}

// TestFlightsBounds: past maxFlights flights or maxWaiters waiters, Join
// neither joins nor leads, and counts it.
func TestFlightsBounds(t *testing.T) {
	t.Parallel()
	f := NewFlights[int](2, 2)
	a, _ := f.Join(testRead(1, 8), Gen{}, 0)
	b, _ := f.Join(testRead(2, 8), Gen{}, 0)
	if a == nil || b == nil {
		t.Fatal("the first two flights did not lead")
	}
	if fl, joined := f.Join(testRead(3, 8), Gen{}, 0); fl != nil || joined {
		t.Fatalf("a third flight: %v, %v; want neither", fl, joined)
	}
	for w := 1; w <= 2; w++ {
		if _, joined := f.Join(testRead(1, 8), Gen{}, w); !joined {
			t.Fatalf("waiter %d did not join", w)
		}
	}
	if fl, joined := f.Join(testRead(1, 8), Gen{}, 3); fl != nil || joined {
		t.Fatalf("a third waiter: %v, %v; want neither", fl, joined)
	}
	// A full table still lets a newer flight replace an older one.
	newer, joined := f.Join(testRead(2, 8), Gen{all: 1}, 0)
	if newer == nil || joined || f.Len() != 2 {
		t.Fatalf("a newer flight in a full table: %v, %v, Len %d", newer, joined, f.Len())
	}
	if want := (FlightStats{Flights: 2, Led: 3, Joined: 2, Full: 2}); f.Stats() != want {
		t.Fatalf("Stats = %+v, want %+v", f.Stats(), want)
	}
	if ws := f.Land(a); !slices.Equal(ws, []int{1, 2}) {
		t.Fatalf("Land = %v", ws)
	}
	if fl, _ := f.Join(testRead(3, 8), Gen{}, 0); fl == nil {
		t.Fatal("a landed flight did not make room")
	}
	f.Land(b) // replaced: takes nothing out
	if f.Len() != 2 {
		t.Fatalf("Len = %d, want 2", f.Len())
	}

	none := NewFlights[int](0, 0)
	if fl, joined := none.Join(baseRead(), Gen{}, 0); fl != nil || joined {
		t.Fatalf("a table of no flights: %v, %v", fl, joined)
	}
	solo := NewFlights[int](1, 0)
	solo.Join(baseRead(), Gen{}, 0)
	if fl, joined := solo.Join(baseRead(), Gen{}, 1); fl != nil || joined {
		t.Fatalf("a flight of no waiters: %v, %v", fl, joined)
	}
}
