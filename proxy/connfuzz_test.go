package proxy

import (
	"bufio"
	"crypto/md5"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cqlguard/cqlguard/classify"
	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
)

// fuzzStatements are the statements a fuzzed connection sends, by index:
// limited tables and system ones, literal and bound keys, a USE that works
// and one the node refuses, and statements the node refuses.
var fuzzStatements = []string{
	"SELECT v FROM ks.kv WHERE k = ?",
	"SELECT * FROM system.local WHERE key = 'local'",
	"UPDATE ks.kv SET v = 1 WHERE k IN (1, 2, 3)",
	"SELECT refuse FROM ks.kv WHERE k = 1",
	"USE ks",
	"USE refuse",
	"INSERT INTO ks.comp (a, b) VALUES (1, 'x')",
	"SELECT * FROM system.peers",
	"INSERT INTO refuse.kv (k) VALUES (?)",
	"SELECT v FROM kv WHERE k = 7",
}

// fuzzFrames turns data into the frames a client sends: each op takes a
// kind, a stream id from a small signed range (so that ids repeat and go
// negative), and a length-prefixed payload. The connection negotiated LZ4,
// so a frame may carry the compression flag over any payload.
func fuzzFrames(data []byte) (frames []byte, streams []int16) {
	for len(data) >= 3 && len(streams) < 200 {
		kind, stream, n := data[0], int16(int8(data[1])), int(data[2])
		data = data[3:]
		payload := data[:min(n, len(data))]
		data = data[len(payload):]
		text := fuzzStatements[int(kind>>3)%len(fuzzStatements)]
		var body []byte
		op := frame.OpQuery
		h := frame.Header{Version: 4, Stream: stream}
		switch kind % 8 {
		case 0:
			op = frame.OpOptions
		case 1: // QUERY of a statement, the payload as its one value
			body = queryBody(text, payload)
		case 2:
			op = frame.OpPrepare
			body = binary.BigEndian.AppendUint32(nil, uint32(len(text)))
			body = append(body, text...)
		case 3: // EXECUTE of a statement, prepared or not
			op = frame.OpExecute
			id := md5.Sum([]byte(text))
			body = binary.BigEndian.AppendUint16(nil, uint16(len(id)))
			body = append(body, id[:]...)
			body = append(body, 0, 1, 1, 0, 1) // ONE, values: one
			body = binary.BigEndian.AppendUint32(body, uint32(len(payload)))
			body = append(body, payload...)
		case 4:
			op, body = frame.OpBatch, payload
		case 5: // a body flagged as compressed, whatever it holds
			h.Flags, body = frame.FlagCompression, payload
		case 6:
			body = payload
		case 7: // compressed for real
			var z frame.Compressor
			h.Flags, body = frame.FlagCompression, z.AppendBody(nil, frame.CompressionLZ4, queryBody(text, payload))
		}
		h.Opcode, h.Length = op, len(body)
		frames = append(frame.AppendHeader(frames, h), body...)
		streams = append(streams, stream)
	}
	return frames, streams
}

func queryBody(text string, value []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(text)))
	b = append(b, text...)
	b = append(b, 0, 1, 1, 0, 1) // ONE, values: one
	b = binary.BigEndian.AppendUint32(b, uint32(len(value)))
	return append(b, value...)
}

// FuzzConnection drives whole connections through a proxy in front of a
// stub node: sequences of frames, reused and negative stream ids, garbage
// and compressed bodies. It checks that every request is answered exactly
// once, that the prepared registry holds only statements the node prepared
// and what the proxy learned of each is its own text's, and that an idle
// connection's stream table is back to its idle size.
func FuzzConnection(f *testing.F) {
	seed := func(ops ...[]byte) []byte {
		var b []byte
		for _, op := range ops {
			b = append(b, op...)
		}
		return b
	}
	op := func(kind, stmt byte, stream int8, payload ...byte) []byte {
		return append([]byte{stmt<<3 | kind, byte(stream), byte(len(payload))}, payload...)
	}
	f.Add(seed(op(0, 0, 1), op(1, 0, 2, 0, 0, 0, 1)))
	f.Add(seed(op(2, 0, 9), op(2, 1, 9), op(3, 0, 10, 0, 0, 0, 7)))          // two PREPAREs on one stream
	f.Add(seed(op(0, 0, -1), op(1, 1, -2), op(2, 7, -128)))                  // negative streams
	f.Add(seed(op(5, 0, 3, 0, 0xff, 0xff, 0xff, 0, 0), op(7, 2, 4, 1)))      // an LZ4 claim, a real LZ4 body
	f.Add(seed(op(1, 4, 1), op(1, 9, 2), op(1, 5, 3), op(1, 9, 4)))          // USE, then unqualified
	f.Add(seed(op(2, 3, 5), op(3, 3, 6), op(2, 8, 7), op(4, 0, 8, 1, 2, 3))) // refused PREPAREs, a garbage BATCH
	f.Add(seed(op(6, 0, 1, 0, 0, 0, 99), op(1, 0, 1), op(1, 0, 1), op(1, 0, 1)))

	node := startStubNode(f, "127.0.0.1:0")
	p, addr := startFuzzProxy(f, node.ln.Addr().String())
	f.Fuzz(func(t *testing.T, data []byte) { fuzzOne(t, p, addr, data) })
}

// fuzzOne sends the frames data makes on a new connection to the proxy p
// at addr, and checks the invariants.
func fuzzOne(t *testing.T, p *Proxy, addr string, data []byte) {
	t.Helper()
	frames, streams := fuzzFrames(data)
	count := len(streams)
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := frame.NewReader(bufio.NewReader(c), 16<<20)
	startup := msgFrame(t, 4, 0, &message.Startup{Options: map[string]string{"CQL_VERSION": "3.0.0", "COMPRESSION": "lz4"}})
	if _, err := c.Write(startup); err != nil {
		t.Fatal(err)
	}
	if _, h, err := r.Next(); err != nil || h.Opcode != frame.OpReady {
		t.Fatalf("STARTUP: %v %v", h.Opcode, err)
	}
	// An OPTIONS on a stream no op uses comes last: its answer comes
	// after every other, so an answer too many shows before it.
	const last = 1000
	frames = frame.AppendHeader(frames, frame.Header{Version: 4, Stream: last, Opcode: frame.OpOptions})
	streams = append(streams, last)
	count++
	if _, err := c.Write(frames); err != nil {
		t.Fatal(err)
	}
	sent := map[int16]int{}
	for _, s := range streams {
		sent[s]++
	}
	for i := range count {
		_, h, err := r.Next()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("%d of %d requests answered, then nothing", i, count)
			}
			t.Fatalf("answer %d of %d: %v", i+1, count, err)
		}
		if !h.Response || sent[h.Stream] == 0 {
			t.Fatalf("answer %v on stream %d: no request waits on it", h.Opcode, h.Stream)
		}
		sent[h.Stream]--
		if h.Stream == last && i != count-1 {
			t.Fatalf("the last request answered %d answers early", count-1-i)
		}
	}
	checkPrepared(t, p)
	checkIdleStreams(t, p)
}

// checkPrepared checks that the registry holds only statements the stub
// node prepared (whose id is the MD5 of their text, and which it never
// prepares when the text says "refuse"), each with what its own text says.
func checkPrepared(t *testing.T, p *Proxy) {
	t.Helper()
	for _, text := range fuzzStatements {
		id := md5.Sum([]byte(text))
		st := registered(t, p, id[:])
		if st == nil {
			continue
		}
		if strings.Contains(text, "refuse") {
			t.Fatalf("%q registered, which the node refused to prepare", text)
		}
		want := prepared(t, text)
		if st.Op != want.Op || st.Internal != want.Internal || string(st.Table) != string(want.Table) {
			t.Fatalf("%q registered as %v of %q (internal %v), its text is %v of %q", text, st.Op, st.Table, st.Internal, want.Op, want.Table)
		}
	}
	if n := p.prepared.Len(); n > len(fuzzStatements) {
		t.Fatalf("%d statements registered, more than were sent", n)
	}
}

// prepared is what a PREPARE of text says, in keyspace ks.
func prepared(t *testing.T, text string) *classify.Classification {
	t.Helper()
	var c classify.Classifier
	h := frame.Header{Version: 4, Opcode: frame.OpPrepare}
	got, err := c.Classify(h, encodeBody(t, 4, &message.Prepare{Query: text}), &classify.Env{Schema: testSnapshot(t), Keyspace: []byte("ks")})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// checkIdleStreams checks that every session has nothing in flight and at
// most the stream table an idle connection keeps.
func checkIdleStreams(t *testing.T, p *Proxy) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := range p.sessions {
		s.mu.Lock()
		inflight, slots := s.streams.inflight, len(s.streams.slots)
		s.mu.Unlock()
		if inflight != 0 || slots > streamsKeptIdle {
			t.Fatalf("a session with every request answered: %d in flight, %d stream slots", inflight, slots)
		}
	}
}

func startFuzzProxy(f *testing.F, upstream string) (*Proxy, string) {
	cfg := config.Default()
	cfg.Admin.Listen = ""
	cfg.Listen, cfg.Upstreams = "127.0.0.1:0", []string{upstream}
	return serveProxy(f, cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{testSnapshot(f)}))
}
