package hotread

import (
	"sync"
	"testing"
)

// TestConcurrent runs reads against one cache, one table of flights and
// one set of generations from many goroutines, as the proxy's sessions do,
// with writes invalidating as they go; under -race it checks the locking,
// and throughout that a read is only ever served its own answer and that
// every waiter of every flight is handed back once.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	const (
		workers  = 8
		ops      = 3000
		reads    = 64
		maxBytes = 64 << 10
	)
	g := NewGenerations(256)
	c := NewCache(maxBytes, 600)
	f := NewFlights[int](32, 4)
	var mu sync.Mutex
	waited, landed := 0, 0
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var dst []byte
			var mine []*Flight[int]
			for i := range ops {
				k := (i*7 + w*13) % reads
				r := testRead(k, 8+k*5)
				want := testAnswer(r, k*9)
				gen := g.At(r.Table, r.Token)
				switch i % 5 {
				case 0:
					g.Wrote(r.Table, r.Token)
				case 1:
					var ok bool
					if dst, ok = c.Get(dst[:0], r, gen, int64(i)); ok && string(dst) != string(want) {
						t.Errorf("read %d was served another answer", k)
						return
					}
				case 2:
					c.Put(r, gen, want, int64(i+100))
				default:
					fl, joined := f.Join(r, gen, w)
					switch {
					case joined:
						mu.Lock()
						waited++
						mu.Unlock()
					case fl != nil:
						if !identical(fl.Read(), r) {
							t.Errorf("flight of read %d holds another read", k)
						}
						mine = append(mine, fl)
					}
				}
				if len(mine) > 2 || (i == ops-1 && len(mine) > 0) {
					for _, fl := range mine {
						n := len(f.Land(fl))
						mu.Lock()
						landed += n
						mu.Unlock()
						f.Release(fl)
					}
					mine = mine[:0]
				}
				if i%500 == 0 && w == 0 {
					g.WroteAll()
					c.Drop()
				}
			}
		})
	}
	wg.Wait()
	checkCache(t, c, maxBytes)
	if f.Len() != 0 || waited != landed {
		t.Fatalf("%d flights left, %d waiters joined, %d handed back", f.Len(), waited, landed)
	}
	if st := f.Stats(); st.Joined != uint64(waited) {
		t.Fatalf("Stats = %+v, %d joined", st, waited)
	}
	t.Logf("cache %+v, flights %+v", c.Stats(), f.Stats())
}
