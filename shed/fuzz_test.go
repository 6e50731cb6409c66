package shed

import (
	"encoding/binary"
	"math"
	"testing"
	"time"
)

// FuzzSignals feeds arbitrary clock readings, latencies, waits and ratios
// to the signals and the controller: nothing panics, ratios are finite and
// positive, and fractions stay in [0, 1] in tier order.
func FuzzSignals(f *testing.F) {
	f.Add([]byte{})
	f.Add(binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, 1e12), 2e6))
	f.Add(binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, math.MaxUint64), 1<<63))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, _ := NewLatency(LatencyConfig{Short: 10e6, Long: 200e6, MinSamples: 1})
		q, _ := NewQueue(QueueConfig{Target: 1e6, Interval: 10e6})
		c, _ := NewController(ControllerConfig{Rise: 1e6, Fall: 1e6, MaxStep: 1e9})
		all := true // every tier in use, until SetTiers says otherwise
		for len(b) >= 24 {
			now := int64(binary.LittleEndian.Uint64(b))
			v := int64(binary.LittleEndian.Uint64(b[8:]))
			x := math.Float64frombits(binary.LittleEndian.Uint64(b[16:]))
			b = b[24:]
			l.Observe(now, v)
			q.Observe(now, v)
			r := l.Read(now)
			if !(r.Ratio > 0) || math.IsInf(r.Ratio, 0) {
				t.Fatalf("ratio %v", r.Ratio)
			}
			_, over := q.Standing(now)
			if v&1 == 1 {
				// Some tiers in use, from the wait's bits.
				var tiers []int
				for t := range MaxTier + 1 {
					if v>>(t+1)&1 == 1 {
						tiers = append(tiers, t)
					}
				}
				c.SetTiers(tiers)
				all = false
			}
			c.Update(now, r, over)
			c.Update(now, Reading{Ratio: x, Short: time.Duration(v), OK: true}, over)
			for tier := -1; tier <= MaxTier+1; tier++ {
				fr := c.Fraction(tier)
				if !(fr >= 0 && fr <= 1) || (tier <= 0 && fr != 0) {
					t.Fatalf("tier %d fraction %v", tier, fr)
				}
				if tier > 0 && tier < MaxTier && fr > c.Fraction(tier+1) {
					t.Fatalf("tier %d shed %v, more than tier %d", tier, fr, tier+1)
				}
				if all && tier > 0 && tier < MaxTier && fr > 0 && c.Fraction(tier+1) != 1 {
					t.Fatalf("tier %d shed %v before tier %d entirely", tier, fr, tier+1)
				}
			}
			if p := c.Pressure(); !(p >= 0 && p <= MaxTier+Reserve) {
				t.Fatalf("pressure %v", p)
			}
		}
	})
}
