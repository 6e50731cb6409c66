package shed

import (
	"sync"
	"testing"
	"time"
)

func TestQueueStanding(t *testing.T) {
	t.Parallel()
	ms := int64(time.Millisecond)
	base := int64(1e12) // a multiple of the interval
	for _, tc := range []struct {
		name    string
		waits   []int64 // one a millisecond from base
		at      int64   // Standing's clock reading, from base
		wantMin time.Duration
		over    bool
	}{
		{"nothing passed", nil, 150 * ms, 0, false},
		{"all waited over target", repeat(7*ms, 100), 150 * ms, 7 * time.Millisecond, true},
		{"one did not wait", append(repeat(30*ms, 60), append([]int64{0}, repeat(30*ms, 39)...)...), 150 * ms, 0, false},
		{"at target", repeat(5*ms, 100), 150 * ms, 5 * time.Millisecond, false},
		{"the current interval does not count", append(repeat(0, 100), repeat(9*ms, 40)...), 150 * ms, 0, false},
		{"an interval before the last does not count", repeat(9*ms, 100), 250 * ms, 0, false},
		{"negative waits count as 0", append(repeat(9*ms, 50), -ms), 150 * ms, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q, err := NewQueue(QueueConfig{})
			if err != nil {
				t.Fatal(err)
			}
			for i, w := range tc.waits {
				q.Observe(base+int64(i)*ms, w)
			}
			min, over := q.Standing(base + tc.at)
			if min != tc.wantMin || over != tc.over {
				t.Errorf("Standing = %v, %v; want %v, %v", min, over, tc.wantMin, tc.over)
			}
		})
	}
}

func repeat(v int64, n int) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// TestQueueConcurrent records from several goroutines at once: the
// shortest wait wins, and a reading of the clock from an interval the slot
// has moved past is dropped.
func TestQueueConcurrent(t *testing.T) {
	t.Parallel()
	q, _ := NewQueue(QueueConfig{})
	base := int64(1e12)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				q.Observe(base+int64(i)*int64(time.Microsecond)*90, int64(6+g+i%5)*int64(time.Millisecond))
			}
		}()
	}
	wg.Wait()
	q.Observe(base-2*int64(DefaultInterval), 0) // dropped: older than the slot's interval
	if min, over := q.Standing(base + int64(DefaultInterval)); min != 6*time.Millisecond || !over {
		t.Errorf("Standing = %v, %v; want 6ms, true", min, over)
	}
}
