package proxy

import (
	"bytes"
	"io"
	"net"
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
	w := newWriter(client, max)
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
	}()
	time.Sleep(200 * time.Millisecond)
	w.mu.Lock()
	pending := len(w.pending)
	w.mu.Unlock()
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
	w := newWriter(client, 1<<20)
	ready := frame.AppendHeader(nil, frame.Header{Version: 5, Response: true, Opcode: frame.OpReady})
	result := frame.AppendHeader(nil, frame.Header{Version: 5, Response: true, Stream: 1, Opcode: frame.OpResult, Length: 4})
	result = append(result, 0, 0, 0, 1)
	w.Write(ready)
	w.UseSegments(false)
	w.Write(result)
	want := append(append([]byte{}, ready...), frame.NewSegmentWriter(false).AppendFrames(nil, result)...)
	b := make([]byte, len(want))
	if _, err := io.ReadFull(peer, b); err != nil || !bytes.Equal(b, want) {
		t.Fatalf("got % x, want % x (%v)", b, want, err)
	}
	peer.Close()
	w.Close()
}
