package proxy

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/cqlguard/cqlguard/frame"
)

// Regression tests for what an attacker found in handing off the write to
// the client (handoff.go).

// floodChunk is 64 KiB of frames on stream, for flood.
func floodChunk(stream int16) []byte {
	one := frame.AppendHeader(nil, frame.Header{Version: 4, Response: true, Stream: stream, Opcode: frame.OpResult})
	chunk := make([]byte, 0, 64<<10)
	for len(chunk)+len(one) <= cap(chunk) {
		chunk = append(chunk, one...)
	}
	return chunk
}

// flood has the node write, on each of its connections, frames on stream,
// which nothing was asked on, back to back and without end, as a
// misbehaving node would, chunk after chunk (floodChunk), until the
// returned stop is called. The first chunk is written before flood
// returns. The frames are 9 bytes long: a full read of the proxy's 16 KiB
// buffer never ends on a frame's end, and the proxy handles them far more
// slowly than the node sends, so that its socket stays full.
func (n *legNode) flood(chunk []byte) (stop func()) {
	n.mu.Lock()
	conns := make([]*legConn, 0, len(n.conns))
	for c := range n.conns {
		// The kernel keeps the socket full without this goroutine.
		c.c.(*net.TCPConn).SetWriteBuffer(4 << 20)
		conns = append(conns, c)
	}
	n.mu.Unlock()
	write := func(c *legConn, b []byte) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, err := c.c.Write(b)
		return err == nil
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range conns {
		if !write(c, chunk) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if !write(c, chunk) {
					return
				}
			}
		}()
	}
	return func() {
		close(done)
		for _, c := range conns {
			// A write waiting for room gives up now.
			c.c.SetWriteDeadline(time.Now())
		}
		wg.Wait()
	}
}

// A response path that leaves its write to another (handoff.go) does not
// leave its answers waiting on that other path's node for as long as the
// node keeps sending: here one node answers as the other begins to send,
// unasked, frame after frame without a pause, and the first node's answer
// reaches the client while the second still sends. The first node's path
// finds the second's waiting with bytes in a few rounds only, as they
// come at once: hence the rounds.
func TestHandOffNodeFlooding(t *testing.T) {
	t.Parallel()
	b, c, addr := handOffNodes(t)
	chunk := floodChunk(1000)
	for round := range 100 {
		// b holds a request, so that its path is one to leave a write to.
		cl := heldPair(t, addr, b, c, round)
		c.release()
		stop := b.flood(chunk)
		// c's answer, while b floods: an answer left to b's path would
		// wait until b pauses.
		cl.c.SetReadDeadline(time.Now().Add(3 * time.Second))
		got, op, msg, err := cl.nextOp()
		stop()
		if err != nil || got != 4 || op != frame.OpResult {
			t.Fatalf("round %d: want c's RESULT on stream 4 while b floods, got %s %q on stream %d, %v", round, op, msg, got, err)
		}
		// Closed rather than drained: what b sent meanwhile would take
		// long to read.
		cl.c.Close()
		b.release()
	}
}
