// Package transport moves the bytes of the proxy's connections: it reads a
// socket into a buffer only while bytes arrive, writes frames to it from
// several goroutines in batches, and bounds what all connections together
// hold, so that a peer that stops reading holds up only its own producers.
//
// A [LazyReader] reads a connection through a bufio.Reader whose buffer,
// from [ReadBuffers], it holds only while bytes come: idle connections, the
// many a driver keeps open, hold none. A [Writer] queues whole frames from
// any goroutine and writes them with one system call per batch, on the
// goroutine that pushes or on a flush loop that runs only while something
// is queued; its queue is bounded, and its stall hook says when it waits.
// A [Bound] is a limit shared by many connections (requests in flight,
// bytes of large frames, bytes queued to write), taken and given back
// without a lock. On Linux a [SockReader], the Writer, and the socket under
// a [TLSServer] connection read and write plain TCP sockets with raw system
// calls, outside the runtime's blocking system call accounting, which costs
// a busy proxy more CPU than the calls themselves.
//
// The package knows frames only as runs of bytes: where a frame's stream id
// is and how v5 wraps frames in segments it leaves to package frame. What a
// frame means, which node to dial, when to refuse, and what to count are
// the proxy's: a Bound counts its waits and a Writer reports its stalls
// through callbacks the proxy gives them.
package transport
