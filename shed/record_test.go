package shed

import (
	"bufio"
	"compress/gzip"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var record = flag.Bool("record", false, "record testdata/loopback.txt.gz anew (30 s)")

// recordedPath holds real latencies: round trips of 64 bytes over loopback
// TCP from four clients pacing themselves to about 1,000 a second together,
// with the CPUs kept busy by spinning goroutines from 15 s to 22 s, so that
// the stream has a step. Each line is the time since the previous round
// trip began and the round trip's latency, in nanoseconds.
const recordedPath = "testdata/loopback.txt.gz"

// stream is a sequence of latencies, each with the clock reading at which
// it was answered.
type stream struct {
	at, lat []int64
}

func (s *stream) add(at, lat int64) {
	s.at = append(s.at, at)
	s.lat = append(s.lat, lat)
}

// TestRecordLoopback records recordedPath when run with -record.
func TestRecordLoopback(t *testing.T) {
	if !*record {
		t.Skip("run with -record to record " + recordedPath)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go io.Copy(c, c)
		}
	}()
	const (
		clients  = 4
		duration = 30 * time.Second
	)
	start := time.Now()
	var (
		mu    sync.Mutex
		begun []int64 // offsets from start
		lats  []int64
	)
	var wg sync.WaitGroup
	for range clients {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 64)
			for time.Since(start) < duration {
				t0 := time.Now()
				if _, err := c.Write(buf); err != nil {
					t.Error(err)
					return
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					t.Error(err)
					return
				}
				t1 := time.Now()
				mu.Lock()
				begun = append(begun, int64(t0.Sub(start)))
				lats = append(lats, int64(t1.Sub(t0)))
				mu.Unlock()
				time.Sleep(4 * time.Millisecond)
			}
		}()
	}
	var spin atomic.Bool
	time.AfterFunc(15*time.Second, func() {
		spin.Store(true)
		for range 2 * runtime.NumCPU() {
			go func() {
				for spin.Load() {
				}
			}()
		}
	})
	time.AfterFunc(22*time.Second, func() { spin.Store(false) })
	wg.Wait()

	f, err := os.Create(recordedPath)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	w := bufio.NewWriter(zw)
	var prev int64
	for i := range begun {
		// Appended under a lock in the order they ended, not begun:
		// close enough, the gaps are only clamped at 0.
		fmt.Fprintf(w, "%d %d\n", max(begun[i]-prev, 0), lats[i])
		prev = max(prev, begun[i])
	}
	for _, c := range []io.Closer{nopFlush{w}, zw, f} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("recorded %d round trips", len(begun))
}

type nopFlush struct{ w *bufio.Writer }

func (n nopFlush) Close() error { return n.w.Flush() }

// loadRecorded returns recordedPath's stream, each latency answered at
// its round trip's beginning plus its latency, starting the clock at base.
func loadRecorded(t testing.TB, base int64) stream {
	f, err := os.Open(recordedPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var s stream
	sc := bufio.NewScanner(zr)
	begun := base
	for sc.Scan() {
		var gap, lat int64
		if _, err := fmt.Sscan(sc.Text(), &gap, &lat); err != nil {
			t.Fatalf("%s: %q: %v", recordedPath, sc.Text(), err)
		}
		begun += gap
		s.add(begun+lat, lat)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	// Answered in the order begun, not always in the order answered:
	// sort by answer.
	sortStream(&s)
	return s
}

type byAnswer struct{ s *stream }

func (b byAnswer) Len() int           { return len(b.s.at) }
func (b byAnswer) Less(i, j int) bool { return b.s.at[i] < b.s.at[j] }
func (b byAnswer) Swap(i, j int) {
	b.s.at[i], b.s.at[j] = b.s.at[j], b.s.at[i]
	b.s.lat[i], b.s.lat[j] = b.s.lat[j], b.s.lat[i]
}

func sortStream(s *stream) { sort.Stable(byAnswer{s}) }
