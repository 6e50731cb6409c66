package hotread

import "testing"

// Benchmark sizes: an EXECUTE of a prepared read with one bound key, and a
// one-row answer.
const (
	benchBody   = 60
	benchAnswer = 200
	benchReads  = 1024
)

func benchReadSet() []*Read {
	rs := make([]*Read, benchReads)
	for i := range rs {
		rs[i] = testRead(i, benchBody)
	}
	return rs
}

// BenchmarkCacheGet measures a lookup that finds its answer and one that
// does not, over 1,024 reads.
func BenchmarkCacheGet(b *testing.B) {
	rs := benchReadSet()
	c := NewCache(64<<20, 1024)
	for _, r := range rs {
		c.Put(r, Gen{}, testAnswer(r, benchAnswer), 1)
	}
	others := make([]*Read, benchReads)
	for i := range others {
		others[i] = testRead(benchReads+i, benchBody)
	}
	dst := make([]byte, 0, 1024)
	for _, tc := range []struct {
		name  string
		reads []*Read
		want  bool
	}{{"hit", rs, true}, {"miss", others, false}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				var ok bool
				if dst, ok = c.Get(dst[:0], tc.reads[i%benchReads], Gen{}, 0); ok != tc.want {
					b.Fatalf("Get found %v", ok)
				}
			}
		})
	}
}

// BenchmarkCachePut measures storing answers in a full cache, each Put
// evicting the least recently used entry.
func BenchmarkCachePut(b *testing.B) {
	rs := benchReadSet()
	cost := int64(rs[0].identityLen()+benchAnswer) + entryOverhead
	c := NewCache(cost*benchReads/4, 1024)
	answer := testAnswer(rs[0], benchAnswer)
	for _, r := range rs {
		c.Put(r, Gen{}, answer, 1)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		c.Put(rs[i%benchReads], Gen{}, answer, 1)
	}
	if st := c.Stats(); st.Evictions == 0 {
		b.Fatalf("no evictions: %+v", st)
	}
}

// BenchmarkFlightsJoin measures a read joining a flight in the air; every
// 64 joins the flight lands and another leads.
func BenchmarkFlightsJoin(b *testing.B) {
	r := testRead(1, benchBody)
	f := NewFlights[uint64](1024, 64)
	fl, _ := f.Join(r, Gen{}, 0)
	b.ReportAllocs()
	var w uint64
	for b.Loop() {
		w++
		if _, joined := f.Join(r, Gen{}, w); !joined {
			f.Land(fl)
			f.Release(fl)
			fl, _ = f.Join(r, Gen{}, w)
		}
	}
}

// BenchmarkFlightsLead measures a read leading a flight that lands with no
// waiters: Join, Land and Release.
func BenchmarkFlightsLead(b *testing.B) {
	rs := benchReadSet()
	f := NewFlights[uint64](1024, 64)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		fl, _ := f.Join(rs[i%benchReads], Gen{}, 0)
		f.Land(fl)
		f.Release(fl)
	}
}

// BenchmarkGenerations measures taking a read's Gen and recording a write.
func BenchmarkGenerations(b *testing.B) {
	g := NewGenerations(1 << 16)
	b.Run("At", func(b *testing.B) {
		b.ReportAllocs()
		var t int64
		for b.Loop() {
			t++
			g.At(1, t)
		}
	})
	b.Run("Wrote", func(b *testing.B) {
		b.ReportAllocs()
		var t int64
		for b.Loop() {
			t++
			g.Wrote(1, t)
		}
	})
}
