package fakenode

import (
	"bufio"
	"bytes"
	"crypto/md5"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/apache/cassandra-gocql-driver/v2/lz4"
	"github.com/apache/cassandra-gocql-driver/v2/snappy"
	"github.com/datastax/go-cassandra-native-protocol/message"

	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/schema"
)

func startNode(t *testing.T, opts Options) *Node {
	t.Helper()
	n, err := Start("127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

func session(t *testing.T, s *Node, proto int, comp gocql.Compressor, auth gocql.Authenticator) (*gocql.Session, error) {
	t.Helper()
	host, port, _ := net.SplitHostPort(s.Addr())
	c := gocql.NewCluster(host)
	c.Port, _ = strconv.Atoi(port)
	c.ProtoVersion = proto
	c.Compressor = comp
	c.Authenticator = auth
	c.Consistency = gocql.One
	c.Timeout = 5 * time.Second
	c.ConnectTimeout = 5 * time.Second
	c.NumConns = 1
	return c.CreateSession()
}

// A stock driver connects (discovering the node from system.local and
// system.peers_v2), prepares, executes, queries inline and batches, in
// each protocol version and compression it speaks.
func TestGocql(t *testing.T) {
	t.Parallel()
	s := startNode(t, Options{RowBytes: 32, PeersV2: true})
	for _, tc := range []struct {
		proto int
		comp  gocql.Compressor
	}{
		{4, nil}, {4, lz4.LZ4Compressor{}}, {4, snappy.SnappyCompressor{}},
		{5, nil}, {5, lz4.LZ4Compressor{}},
	} {
		name := fmt.Sprintf("v%d", tc.proto)
		if tc.comp != nil {
			name += "-" + tc.comp.Name()
		}
		t.Run(name, func(t *testing.T) {
			before := len(s.Startups())
			sess, err := session(t, s, tc.proto, tc.comp, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			want := fmt.Sprintf("v%d-", tc.proto)
			if tc.comp != nil {
				want += tc.comp.Name()
			}
			var startups []string
			for _, st := range s.Startups()[before:] {
				startups = append(startups, fmt.Sprintf("v%d-%s", st.Version, st.Options["COMPRESSION"]))
			}
			if !slices.Contains(startups, want) {
				t.Errorf("STARTUPs %v, want %s", startups, want)
			}
			var v []byte
			if err := sess.Query("SELECT v FROM bench.kv WHERE k = ?", int64(7)).Scan(&v); err != nil {
				t.Fatalf("prepared SELECT: %v", err)
			}
			if len(v) != 32 {
				t.Errorf("prepared SELECT: v has %d bytes, want 32", len(v))
			}
			if err := sess.Query("INSERT INTO bench.kv (k, v) VALUES (?, ?)", int64(7), []byte("x")).Exec(); err != nil {
				t.Fatalf("prepared INSERT: %v", err)
			}
			// No bind values: gocql sends an inline QUERY.
			if err := sess.Query("SELECT v FROM bench.kv WHERE k = 8").Scan(&v); err != nil {
				t.Fatalf("inline SELECT: %v", err)
			}
			b := sess.Batch(gocql.UnloggedBatch)
			b.Query("INSERT INTO bench.kv (k, v) VALUES (?, ?)", int64(1), []byte("a"))
			b.Query("INSERT INTO bench.kv (k, v) VALUES (2, 0x62)")
			if err := b.Exec(); err != nil {
				t.Fatalf("BATCH: %v", err)
			}
			var release string
			if err := sess.Query("SELECT release_version FROM system.local WHERE key = 'local'").Scan(&release); err != nil || release != "5.0.0" {
				t.Fatalf("system.local: %q, %v", release, err)
			}
		})
	}
	if s.Requests() == 0 {
		t.Error("Requests() is 0 after the sessions")
	}
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	s := startNode(t, Options{Username: "bench", Password: "secret"})
	for _, proto := range []int{4, 5} {
		sess, err := session(t, s, proto, nil, gocql.PasswordAuthenticator{Username: "bench", Password: "secret"})
		if err != nil {
			t.Fatalf("v%d with the right password: %v", proto, err)
		}
		if err := sess.Query("INSERT INTO bench.kv (k, v) VALUES (?, ?)", int64(1), []byte("a")).Exec(); err != nil {
			t.Errorf("v%d: INSERT: %v", proto, err)
		}
		sess.Close()
		if sess, err := session(t, s, proto, nil, gocql.PasswordAuthenticator{Username: "bench", Password: "wrong"}); err == nil {
			sess.Close()
			t.Errorf("v%d: a wrong password was accepted", proto)
		}
	}
}

// RejectEvery answers every n-th request on the user table with
// Config_error for a driver that did not opt in to ScyllaDB's error.
func TestRejectEvery(t *testing.T) {
	t.Parallel()
	s := startNode(t, Options{RejectEvery: 2})
	sess, err := session(t, s, 4, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	rejected := 0
	for i := range 10 {
		err := sess.Query("INSERT INTO bench.kv (k, v) VALUES (?, ?)", int64(i), []byte("a")).Exec()
		var reqErr gocql.RequestError
		switch {
		case err == nil:
		case errors.As(err, &reqErr) && reqErr.Code() == 0x2300:
			rejected++
		default:
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if rejected != 5 {
		t.Errorf("%d of 10 rejected, want 5", rejected)
	}
}

// system.peers reports the peers the node is told of; system.peers_v2
// lists them too when asked for, and is refused otherwise, as Cassandra 3
// refuses it.
func TestPeers(t *testing.T) {
	t.Parallel()
	for _, v2 := range []bool{false, true} {
		s := startNode(t, Options{Peers: []string{"127.0.0.4", "127.0.0.5"}, PeersV2: v2})
		sess, err := session(t, s, 4, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if n := sess.Query("SELECT peer FROM system.peers").Iter().NumRows(); n != 2 {
			t.Errorf("PeersV2 %v: system.peers has %d rows, want 2", v2, n)
		}
		iter := sess.Query("SELECT peer FROM system.peers_v2").Iter()
		n := iter.NumRows()
		err = iter.Close()
		var reqErr gocql.RequestError
		switch {
		case v2 && (err != nil || n != 2):
			t.Errorf("system.peers_v2: %d rows, %v; want 2", n, err)
		case !v2 && !(errors.As(err, &reqErr) && reqErr.Code() == 0x2200):
			t.Errorf("system.peers_v2 without PeersV2: %v, want Invalid", err)
		}
		sess.Close()
	}
}

// discardConn is a connection whose writes go nowhere.
type discardConn struct{ net.Conn }

func (discardConn) Write(b []byte) (int, error) { return len(b), nil }

// recordConn is a connection that keeps what is written to it.
type recordConn struct {
	net.Conn
	buf bytes.Buffer
}

func (c *recordConn) Write(b []byte) (int, error) { return c.buf.Write(b) }

// The request path, answers written included, allocates nothing, in every
// version and compression: a benchmark through the fake measures the proxy.
func TestRequestPathAllocatesNothing(t *testing.T) {
	s := startNode(t, Options{})
	const stmt = "SELECT v FROM bench.kv WHERE k = ?"
	s.prepare([]byte(stmt))
	id := md5.Sum([]byte(stmt))
	for _, v := range []uint8{4, 5} {
		for _, comp := range []frame.Compression{frame.CompressionNone, frame.CompressionLZ4, frame.CompressionSnappy} {
			if v == 5 && comp == frame.CompressionSnappy {
				continue
			}
			var z frame.Compressor
			var frames [][]byte
			add := func(op frame.Opcode, body []byte) {
				h := frame.Header{Version: v, Stream: int16(len(frames)), Opcode: op}
				if comp != frame.CompressionNone && v < 5 {
					h.Flags = frame.FlagCompression
					body = z.AppendBody(nil, comp, body)
				}
				h.Length = len(body)
				frames = append(frames, append(frame.AppendHeader(nil, h), body...))
			}
			exec := binary.BigEndian.AppendUint16(nil, 16)
			exec = append(exec, id[:]...)
			if v >= 5 {
				exec = binary.BigEndian.AppendUint16(exec, 8)
				exec = append(exec, id[:8]...)
			}
			exec = binary.BigEndian.AppendUint16(exec, 1)
			if v >= 5 {
				exec = binary.BigEndian.AppendUint32(exec, 3)
			} else {
				exec = append(exec, 3)
			}
			exec = binary.BigEndian.AppendUint16(exec, 1)
			exec = binary.BigEndian.AppendUint32(exec, 8)
			exec = binary.BigEndian.AppendUint64(exec, 42)
			add(frame.OpExecute, exec)
			for _, q := range []string{"SELECT v FROM bench.kv WHERE k = 42", "INSERT INTO bench.kv (k, v) VALUES (1, 0x00)"} {
				body := binary.BigEndian.AppendUint32(nil, uint32(len(q)))
				body = append(body, q...)
				body = binary.BigEndian.AppendUint16(body, 1)
				body = append(body, make([]byte, 1+3*int(v/5))...)
				add(frame.OpQuery, body)
			}
			// An unlogged batch of the prepared statement, consistency ONE.
			batch := []byte{1, 0, 1, 1}
			batch = binary.BigEndian.AppendUint16(batch, 16)
			batch = append(batch, id[:]...)
			batch = binary.BigEndian.AppendUint16(batch, 1)
			batch = binary.BigEndian.AppendUint32(batch, 8)
			batch = binary.BigEndian.AppendUint64(batch, 42)
			batch = append(batch, 0, 1)
			batch = append(batch, make([]byte, 1+3*int(v/5))...)
			add(frame.OpBatch, batch)

			rec := &recordConn{}
			c := &conn{n: s, nc: rec, comp: comp}
			if v >= 5 {
				c.segs = frame.NewSegmentWriter(comp == frame.CompressionLZ4)
			}
			serve := func() {
				for _, f := range frames {
					h, _ := frame.ParseHeader(f)
					if err := c.handle(f, h); err != nil {
						t.Fatal(err)
					}
					c.pending++
				}
				if err := c.flush(); err != nil {
					t.Fatal(err)
				}
			}
			serve()
			r := frame.NewReader(bufio.NewReader(bytes.NewReader(rec.buf.Bytes())), 1<<20)
			if v >= 5 {
				r.UseSegments(comp == frame.CompressionLZ4)
			}
			for i := range frames {
				_, h, err := r.Next()
				if err != nil || h.Opcode != frame.OpResult || h.Stream != int16(i) {
					t.Fatalf("v%d %d: answer %d: %+v, %v", v, comp, i, h, err)
				}
			}
			c.nc = discardConn{}
			if n := testing.AllocsPerRun(100, serve); n != 0 {
				t.Errorf("v%d %d: %v allocations per round of requests", v, comp, n)
			}
		}
	}
}

// shardOfConn asks the node on c for OPTIONS and returns the shard its
// SUPPORTED names, and the options.
func shardOfConn(t *testing.T, c net.Conn) (int, map[string][]string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(frame.AppendHeader(nil, frame.Header{Version: 4, Opcode: frame.OpOptions})); err != nil {
		t.Fatal(err)
	}
	f, err := codec.DecodeFrame(c)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := f.Body.Message.(*message.Supported)
	if !ok {
		t.Fatalf("OPTIONS answered with %v", f.Body.Message)
	}
	shard, err := strconv.Atoi(s.Options["SCYLLA_SHARD"][0])
	if err != nil {
		t.Fatal(err)
	}
	return shard, s.Options
}

// A node of shards advertises ScyllaDB's sharding keys; on the regular
// port connections go to the least loaded shard, on the shard-aware port
// to the shard of the client's source port.
func TestShards(t *testing.T) {
	t.Parallel()
	const shards = 4
	n := startNode(t, Options{Shards: shards, ShardAwarePort: true})
	var regular []int
	for range 2 * shards {
		c, err := net.Dial("tcp", n.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		shard, opts := shardOfConn(t, c)
		regular = append(regular, shard)
		_, port, _ := net.SplitHostPort(n.ShardAwareAddr())
		want := map[string][]string{
			"SCYLLA_NR_SHARDS": {"4"}, "SCYLLA_SHARDING_ALGORITHM": {"biased-token-round-robin"},
			"SCYLLA_SHARDING_IGNORE_MSB": {"12"}, "SCYLLA_PARTITIONER": {"org.apache.cassandra.dht.Murmur3Partitioner"},
			"SCYLLA_SHARD_AWARE_PORT": {port},
		}
		for k, v := range want {
			if !slices.Equal(opts[k], v) {
				t.Errorf("%s = %q, want %q", k, opts[k], v)
			}
		}
	}
	if want := []int{0, 1, 2, 3, 0, 1, 2, 3}; !slices.Equal(regular, want) {
		t.Errorf("connections to the regular port went to shards %v, want %v", regular, want)
	}
	if got, want := n.Conns(), []int{2, 2, 2, 2}; !slices.Equal(got, want) {
		t.Errorf("connections per shard %v, want %v", got, want)
	}
	// Source ports of each residue, from one chosen at random among the
	// ephemeral ones; a port in use is skipped.
	start := 49152 + int(time.Now().UnixNano()%8000)
	seen := map[int]bool{}
	for port := start; len(seen) < shards && port < start+1000; port++ {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}}
		c, err := d.Dial("tcp", n.ShardAwareAddr())
		if err != nil {
			continue
		}
		defer c.Close()
		if shard, _ := shardOfConn(t, c); shard != port%shards {
			t.Errorf("a connection from port %d went to shard %d, want %d", port, shard, port%shards)
		}
		seen[port%shards] = true
	}
	if len(seen) < shards {
		t.Fatalf("connected from ports of %d residues only", len(seen))
	}
}

// A node that records what it served gives each request on the user table
// its shard and partition key, bound or literal, and the key's token.
func TestServed(t *testing.T) {
	t.Parallel()
	n := startNode(t, Options{Shards: 2, RecordServed: true})
	sess, err := session(t, n, 4, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	const keys = 20
	for k := range keys {
		if err := sess.Query("SELECT v FROM bench.kv WHERE k = ?", k).Exec(); err != nil {
			t.Fatal(err)
		}
		if err := sess.Query(fmt.Sprintf("UPDATE bench.kv SET v = 0x00 WHERE k = %d", k)).Exec(); err != nil {
			t.Fatal(err)
		}
		if err := sess.Query("INSERT INTO bench.kv (v, k) VALUES (?, ?)", []byte{1}, k).Exec(); err != nil {
			t.Fatal(err)
		}
	}
	if err := sess.Query("SELECT v FROM bench.kv").Exec(); err != nil {
		t.Fatal(err)
	}
	served := n.Served()
	if len(served) != 3*keys+1 {
		t.Fatalf("%d requests served, want %d", len(served), 3*keys+1)
	}
	for i, s := range served[:3*keys] {
		key := binary.BigEndian.AppendUint64(nil, uint64(i/3))
		if !bytes.Equal(s.Key, key) || s.Token != schema.Token(key) || s.Shard < 0 || s.Shard > 1 {
			t.Errorf("request %d: %+v, want key %x, token %d", i, s, key, schema.Token(key))
		}
	}
	if s := served[3*keys]; s.Key != nil {
		t.Errorf("a scan served with key %x", s.Key)
	}
}
