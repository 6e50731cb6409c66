package transport

import (
	"bytes"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cqlguard/cqlguard/frame"
)

// A peer that stops reading blocks producers once the pending bytes reach
// the bound, instead of letting them grow.
func TestWriterBackPressure(t *testing.T) {
	client, peer := net.Pipe()
	defer client.Close()
	defer peer.Close()
	const max = 64 << 10
	w := NewWriter(client, max, nil)
	defer w.Close()

	f := frame.AppendHeader(nil, frame.Header{Version: 4, Response: true, Opcode: frame.OpResult, Length: 1000})
	f = append(f, make([]byte, 1000)...)
	written := make(chan int)
	go func() {
		n := 0
		for range 1000 {
			if w.Write(f) != nil {
				break
			}
			n++
			select {
			case written <- n:
			default:
			}
		}
		w.Push()
	}()
	// The producer waits once the next frame would pass the bound.
	var pending int
	waitUntil(t, "the pending bytes at the bound", func() bool {
		w.mu.Lock()
		pending = len(w.pending)
		w.mu.Unlock()
		return pending+len(f) > max
	})
	if pending > max+len(f) {
		t.Fatalf("%d bytes pending with a bound of %d", pending, max)
	}
	// Once the peer reads, everything arrives, in order and whole.
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(peer, int64(1000*len(f))))
		got <- b
	}()
	select {
	case b := <-got:
		if !bytes.Equal(b, bytes.Repeat(f, 1000)) {
			t.Fatal("frames arrived changed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("writer did not resume")
	}
}

// Frames queued after UseSegments travel in v5 segments; the ones before
// stay plain.
func TestWriterSwitchesToSegments(t *testing.T) {
	client, peer := net.Pipe()
	defer client.Close()
	w := NewWriter(client, 1<<20, nil)
	ready := frame.AppendHeader(nil, frame.Header{Version: 5, Response: true, Opcode: frame.OpReady})
	result := frame.AppendHeader(nil, frame.Header{Version: 5, Response: true, Stream: 1, Opcode: frame.OpResult, Length: 4})
	result = append(result, 0, 0, 0, 1)
	w.Write(ready)
	w.UseSegments(false)
	w.Write(result)
	go w.Push()
	want := append(append([]byte{}, ready...), frame.NewSegmentWriter(false).AppendFrames(nil, result)...)
	b := make([]byte, len(want))
	if _, err := io.ReadFull(peer, b); err != nil || !bytes.Equal(b, want) {
		t.Fatalf("got % x, want % x (%v)", b, want, err)
	}
	peer.Close()
	w.Close()
}

// The flush loop runs only while frames wait to be written: an idle
// writer runs none, keeps no large buffers, and the next Push runs it
// again.
func TestWriterLoopOnlyWhileWriting(t *testing.T) {
	c, peer := tcpPair(t, "127.0.0.1:0")
	w := NewWriter(c, 1<<20, nil)
	defer w.Close()
	running := func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.running
	}
	if running() {
		t.Fatal("flush loop running before the first Push")
	}
	small := frame.AppendHeader(nil, frame.Header{Version: 4, Response: true, Opcode: frame.OpResult, Length: 4})
	small = append(small, 0, 0, 0, 1)
	large := frame.AppendHeader(nil, frame.Header{Version: 4, Response: true, Opcode: frame.OpResult, Length: 100_000})
	large = append(large, make([]byte, 100_000)...)
	peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	// Large frames one at a time: batches a busy writer would keep.
	for round, f := range [][]byte{small, large, small, large} {
		n := 20
		if len(f) > keepIdle {
			n = 1
		}
		for range n {
			if err := w.Write(f); err != nil {
				t.Fatal(err)
			}
		}
		go w.Push()
		b := make([]byte, n*len(f))
		if _, err := io.ReadFull(peer, b); err != nil || !bytes.Equal(b, bytes.Repeat(f, n)) {
			t.Fatalf("round %d: frames arrived changed (%v)", round, err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for running() {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: flush loop still running with nothing to write", round)
			}
			time.Sleep(time.Millisecond)
		}
		// Idle, the writer keeps no large buffers.
		w.mu.Lock()
		held := cap(w.pending) + cap(w.spare) + cap(w.wire)
		w.mu.Unlock()
		if held > keepIdle {
			t.Fatalf("round %d: an idle writer holds %d bytes of buffers", round, held)
		}
	}
}

// Close waits for the flush loop to write what is queued.
func TestWriterCloseWaitsForLoop(t *testing.T) {
	client, peer := net.Pipe()
	defer peer.Close()
	w := NewWriter(client, 1<<20, nil)
	f := frame.AppendHeader(nil, frame.Header{Version: 4, Response: true, Opcode: frame.OpResult, Length: 4})
	f = append(f, 0, 0, 0, 1)
	if err := w.Write(f); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() {
		w.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned before the queued frame was written")
	case <-time.After(50 * time.Millisecond):
	}
	b := make([]byte, len(f))
	if _, err := io.ReadFull(peer, b); err != nil || !bytes.Equal(b, f) {
		t.Fatalf("got % x, want % x (%v)", b, f, err)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return once the frame was written")
	}
	if err := w.Write(f); err == nil {
		t.Fatal("Write after Close succeeded")
	}
}

// tcpPair returns the two ends of a loopback TCP connection on addr.
func tcpPair(tb testing.TB, addr string) (net.Conn, net.Conn) {
	tb.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	peer := <-accepted
	if peer == nil {
		tb.Fatal("accept failed")
	}
	tb.Cleanup(func() { c.Close(); peer.Close() })
	return c, peer
}

// Writers sharing a budget (the proxy's max_buffered_bytes_total): one that
// holds bytes waits for room; one that holds none may queue a frame even
// over the bound; bytes written give room back, and every byte arrives in
// order.
func TestBufferedBytesTotal(t *testing.T) {
	var waits atomic.Int32
	budget := NewBound(1000, func() { waits.Add(1) })
	c1, peer1 := net.Pipe()
	c2, peer2 := net.Pipe()
	w1, w2 := NewWriter(c1, 1<<20, budget), NewWriter(c2, 1<<20, budget)
	defer w1.Close()
	defer w2.Close()
	frameOf := func(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

	// The peers read nothing yet: w1's first frame is held being written.
	if err := w1.Write(frameOf('a', 600)); err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() { second <- w1.Write(frameOf('b', 600)) }()
	// w2 holds nothing: its frame goes over the bound without waiting.
	if err := w2.Write(frameOf('c', 600)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-second:
		t.Fatalf("w1's second frame queued past the bound: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if n := budget.Taken(); n != 1200 {
		t.Errorf("budget holds %d bytes, want 1200", n)
	}
	read := func(peer net.Conn, n int) []byte {
		t.Helper()
		b := make([]byte, n)
		peer.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(peer, b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	// w1's peer reads: its first frame is written, and room frees.
	if got := read(peer1, 600); !bytes.Equal(got, frameOf('a', 600)) {
		t.Fatal("w1: first frame garbled")
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	go w1.Push()
	go w2.Push()
	if got := read(peer1, 600); !bytes.Equal(got, frameOf('b', 600)) {
		t.Fatal("w1: second frame garbled")
	}
	if got := read(peer2, 600); !bytes.Equal(got, frameOf('c', 600)) {
		t.Fatal("w2: frame garbled")
	}
	w1.Flush()
	w2.Flush()
	for deadline := time.Now().Add(5 * time.Second); budget.Taken() != 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := budget.Taken(); n != 0 {
		t.Errorf("budget holds %d bytes after everything was written", n)
	}
	if waits.Load() < 1 {
		t.Error("no wait counted")
	}

	// A writer waiting on the budget when it closes gives up.
	w2.Write(frameOf('d', 600)) // held being written: peer2 reads no more
	go w2.Push()
	w1.Write(frameOf('e', 600)) // over the bound, w1 holding none
	stuck := make(chan error, 1)
	waited := waits.Load()
	go func() { stuck <- w1.Write(frameOf('f', 10)) }()
	waitUntil(t, "w1 waiting on the budget", func() bool { return waits.Load() > waited })
	peer1.Close()
	c1.Close()
	go w1.Close()
	select {
	case err := <-stuck:
		if err == nil {
			t.Error("write to a closed writer succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a write waiting on the budget did not give up when its writer closed")
	}
	peer2.Close()
}

// BenchmarkWriterRoundTrip writes and pushes one frame at a time and waits
// for the peer to echo it, as a request-response client makes the proxy
// do: each frame finds the writer idle.
func BenchmarkWriterRoundTrip(b *testing.B) {
	c, peer := tcpPair(b, "127.0.0.1:0")
	go io.Copy(peer, peer)
	w := NewWriter(c, 1<<20, nil)
	defer w.Close()
	f := frame.AppendHeader(nil, frame.Header{Version: 4, Response: true, Opcode: frame.OpResult, Length: 4})
	f = append(f, 0, 0, 0, 1)
	back := make([]byte, len(f))
	b.ReportAllocs()
	for b.Loop() {
		if err := w.Write(f); err != nil {
			b.Fatal(err)
		}
		if err := w.Push(); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, back); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriterRoundTripSegments is BenchmarkWriterRoundTrip on a v5
// connection: each frame, a RESULT of a few rows, goes out in a segment of
// its own, plain or LZ4.
func BenchmarkWriterRoundTripSegments(b *testing.B) {
	row := bytes.Repeat([]byte("row text "), 24)
	f := frame.AppendHeader(nil, frame.Header{Version: 5, Response: true, Opcode: frame.OpResult, Length: len(row)})
	f = append(f, row...)
	for _, compressed := range []bool{false, true} {
		b.Run(map[bool]string{false: "plain", true: "lz4"}[compressed], func(b *testing.B) {
			c, peer := tcpPair(b, "127.0.0.1:0")
			go io.Copy(peer, peer)
			w := NewWriter(c, 1<<20, nil)
			defer w.Close()
			w.UseSegments(compressed)
			back := make([]byte, len(frame.NewSegmentWriter(compressed).AppendFrames(nil, f)))
			b.ReportAllocs()
			for b.Loop() {
				if err := w.Write(f); err != nil {
					b.Fatal(err)
				}
				if err := w.Push(); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, back); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Waited tells the shedding queue that a Write waited for room, once.
func TestWriterWaited(t *testing.T) {
	t.Parallel()
	client, peer := net.Pipe()
	defer client.Close()
	defer peer.Close()
	f := frame.AppendHeader(nil, frame.Header{Version: 4, Opcode: frame.OpQuery, Length: 100})
	f = append(f, make([]byte, 100)...)
	w := NewWriter(client, len(f), nil)
	defer w.Close()
	if err := w.Write(f); err != nil {
		t.Fatal(err)
	}
	if w.Waited() {
		t.Fatal("Waited after a Write with room")
	}
	// The second frame has no room until the peer reads the first.
	read := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(peer, make([]byte, 2*len(f)))
		read <- err
	}()
	if err := w.Write(f); err != nil {
		t.Fatal(err)
	}
	if !w.Waited() {
		t.Fatal("not Waited after a Write that waited for room")
	}
	if w.Waited() {
		t.Fatal("Waited twice for one wait")
	}
	w.Flush()
	if err := <-read; err != nil {
		t.Fatal(err)
	}
}

// waitUntil polls cond until it holds, failing tb after 5 seconds.
func waitUntil(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
	}
}
