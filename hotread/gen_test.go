package hotread

import "testing"

func TestNewGenerationsSlots(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ slots, want int }{
		{-5, 1}, {0, 1}, {1, 1}, {2, 2}, {3, 4}, {1000, 1024}, {1024, 1024}, {1025, 2048},
	} {
		g := NewGenerations(tc.slots)
		if len(g.parts) != tc.want || len(g.tabs) != tc.want || int(g.mask) != tc.want-1 {
			t.Errorf("NewGenerations(%d): %d and %d counters, mask %#x; want %d", tc.slots, len(g.parts), len(g.tabs), g.mask, tc.want)
		}
	}
}

// TestGenerations: each kind of write changes the generation of the reads
// it may change, and of the others only those that share its counter.
func TestGenerations(t *testing.T) {
	t.Parallel()
	type part struct {
		table uint32
		token int64
	}
	parts := []part{{1, 0}, {1, 1}, {1, -1}, {1, 1 << 62}, {2, 0}, {2, 1}, {3, 7}}
	for _, slots := range []int{1, 2, 1 << 16} {
		for _, w := range []struct {
			name  string
			write func(g *Generations)
			hits  func(g *Generations, p part) bool // whether the write changes p's Gen
		}{
			{"Wrote(1,1)", func(g *Generations) { g.Wrote(1, 1) },
				func(g *Generations, p part) bool { return g.partSlot(p.table, p.token) == g.partSlot(1, 1) }},
			{"WroteTable(2)", func(g *Generations) { g.WroteTable(2) },
				func(g *Generations, p part) bool { return g.tableSlot(p.table) == g.tableSlot(2) }},
			{"WroteAll", func(g *Generations) { g.WroteAll() },
				func(*Generations, part) bool { return true }},
		} {
			g := NewGenerations(slots)
			before := make([]Gen, len(parts))
			for i, p := range parts {
				before[i] = g.At(p.table, p.token)
			}
			w.write(g)
			for i, p := range parts {
				changed := g.At(p.table, p.token) != before[i]
				if want := w.hits(g, p); changed != want {
					t.Errorf("%d slots, %s: Gen of %v changed = %v, want %v", slots, w.name, p, changed, want)
				}
			}
		}
	}
}

// TestGenerationsInvalidate: an answer or a flight at the Gen before a
// write is not found by reads after it.
func TestGenerationsInvalidate(t *testing.T) {
	t.Parallel()
	r := baseRead()
	for _, w := range []struct {
		name  string
		write func(g *Generations)
	}{
		{"Wrote", func(g *Generations) { g.Wrote(r.Table, r.Token) }},
		{"WroteTable", func(g *Generations) { g.WroteTable(r.Table) }},
		{"WroteAll", func(g *Generations) { g.WroteAll() }},
	} {
		t.Run(w.name, func(t *testing.T) {
			t.Parallel()
			g := NewGenerations(1024)
			c := NewCache(1<<20, 1024)
			f := NewFlights[string](10, 10)
			old := g.At(r.Table, r.Token)
			c.Put(r, old, []byte("before"), 100)
			oldFlight, _ := f.Join(r, old, "leader")
			if _, joined := f.Join(r, old, "w1"); !joined {
				t.Fatal("Join at the same Gen did not join")
			}

			w.write(g)
			now := g.At(r.Table, r.Token)
			if now == old {
				t.Fatal("the write did not change the read's Gen")
			}
			if got, ok := c.Get(nil, r, now, 0); ok {
				t.Fatalf("Get after the write = %q, want a miss", got)
			}
			if st := c.Stats(); st.Entries != 0 || st.Bytes != 0 {
				t.Fatalf("the stale entry was not removed: %+v", st)
			}
			newFlight, joined := f.Join(r, now, "w2")
			if joined || newFlight == nil || newFlight == oldFlight {
				t.Fatalf("Join after the write = %p, %v; want a new flight", newFlight, joined)
			}
			if _, joined := f.Join(r, now, "w3"); !joined {
				t.Fatal("Join at the new Gen did not join the new flight")
			}
			// The replaced flight lands with its own waiters, and leaves
			// the new one in the table.
			if ws := f.Land(oldFlight); len(ws) != 1 || ws[0] != "w1" {
				t.Fatalf("Land(old) = %q, want [w1]", ws)
			}
			if f.Len() != 1 {
				t.Fatalf("Len after the old flight landed = %d, want 1", f.Len())
			}
			if _, joined := f.Join(r, now, "w4"); !joined {
				t.Fatal("the old flight's landing took the new one out")
			}
			if ws := f.Land(newFlight); len(ws) != 2 || ws[0] != "w3" || ws[1] != "w4" {
				t.Fatalf("Land(new) = %q, want [w3 w4]", ws)
			}
			if f.Len() != 0 {
				t.Fatalf("Len = %d after both landed", f.Len())
			}
			f.Release(oldFlight)
			f.Release(newFlight)
		})
	}
}
