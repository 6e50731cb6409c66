package proxy

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"net"
	"path/filepath"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

// echoUpstream answers OPTIONS with an empty SUPPORTED and every other
// request with a void RESULT, in v5 segments after a v5 STARTUP,
// allocating nothing per request, so that a benchmark's allocations are
// the proxy's. It returns its address.
func echoUpstream(b *testing.B, addr string) string {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	return echoOn(b, ln)
}

// echoOn is echoUpstream on ln.
func echoOn(b *testing.B, ln net.Listener) string {
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go echo(c)
		}
	}()
	return ln.Addr().String()
}

func echo(c net.Conn) {
	defer c.Close()
	r := frame.NewReader(bufio.NewReader(c), 1<<20)
	var out, wire []byte
	var segs *frame.SegmentWriter
	for {
		f, h, err := r.Next()
		if err != nil {
			return
		}
		switch h.Opcode {
		case frame.OpOptions:
			out = frame.AppendHeader(out, frame.Header{Version: h.Version, Response: true, Stream: h.Stream, Opcode: frame.OpSupported, Length: 2})
			out = append(out, 0, 0)
		case frame.OpStartup:
			out = frame.AppendHeader(out, frame.Header{Version: h.Version, Response: true, Stream: h.Stream, Opcode: frame.OpReady})
		default:
			out = frame.AppendHeader(out, frame.Header{Version: h.Version, Response: true, Stream: h.Stream, Opcode: frame.OpResult, Length: 4})
			out = binary.BigEndian.AppendUint32(out, 1)
		}
		if h.Opcode == frame.OpStartup && h.Version >= 5 {
			// READY is the last plain frame.
			if _, err := c.Write(out); err != nil {
				return
			}
			out = out[:0]
			comp, _, _ := frame.StartupOption(f[frame.HeaderSize:], "COMPRESSION")
			lz4 := string(comp) == "lz4"
			r.UseSegments(lz4)
			segs = frame.NewSegmentWriter(lz4)
			continue
		}
		if r.Buffered() > 0 {
			continue
		}
		if segs != nil {
			wire = segs.AppendFrames(wire[:0], out)
		} else {
			wire = append(wire[:0], out...)
		}
		if _, err := c.Write(wire); err != nil {
			return
		}
		out = out[:0]
	}
}

// BenchmarkForwardExecute pipelines EXECUTE requests through the proxy, 128
// in flight, and reports the whole process's allocations per request: the
// client and upstream here allocate nothing, so they are the proxy's. On
// v5 they travel in segments, plain or LZ4.
func BenchmarkForwardExecute(b *testing.B) {
	// An EXECUTE with a 16-byte id, consistency ONE and one 8-byte value.
	v4 := binary.BigEndian.AppendUint16(nil, 16)
	v4 = append(v4, make([]byte, 16)...)
	v4 = append(v4, 0, 1, 0x01, 0, 1)
	v4 = binary.BigEndian.AppendUint32(v4, 8)
	v4 = append(v4, make([]byte, 8)...)
	// v5 adds the result metadata id and has 4-byte flags.
	v5 := binary.BigEndian.AppendUint16(nil, 16)
	v5 = append(v5, make([]byte, 16)...)
	v5 = binary.BigEndian.AppendUint16(v5, 16)
	v5 = append(v5, make([]byte, 16)...)
	v5 = append(v5, 0, 1, 0, 0, 0, 0x01, 0, 1)
	v5 = binary.BigEndian.AppendUint32(v5, 8)
	v5 = append(v5, make([]byte, 8)...)
	for _, bc := range []struct {
		name    string
		version uint8
		lz4     bool
		body    []byte
	}{
		{"v4", 4, false, v4},
		{"v5", 5, false, v5},
		{"v5-lz4", 5, true, v5},
	} {
		b.Run(bc.name, func(b *testing.B) {
			up := echoUpstream(b, "127.0.0.1:0")
			cfg := config.Default()
			cfg.Listen, cfg.Upstreams, cfg.Admin.Listen = "127.0.0.1:0", []string{up}, ""
			addr := startBenchProxy(b, cfg)
			pipelineVersion(b, addr, bc.version, bc.lz4, frame.OpExecute, bc.body)
		})
	}
}

// BenchmarkForwardQueryTLS pipelines QUERY requests through the proxy to
// the node, 128 in flight as BenchmarkForwardExecute's, with the client,
// the node or both over TLS. It also reports the goroutines the process
// starts per request: a read that may wait part way through a burst starts
// the flush loops of what was queued before it (the request path's
// kickWritten, the response path's kickClient), which over TLS must be a
// read of the socket under it, not any read of the connection.
func BenchmarkForwardQueryTLS(b *testing.B) {
	for _, bc := range []struct {
		name             string
		client, upstream bool
	}{
		{"client", true, false},
		{"upstream", false, true},
		{"both", true, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := config.Default()
			cfg.Listen, cfg.Admin.Listen = "127.0.0.1:0", ""
			up := ""
			if bc.upstream {
				ca := newTestCA(b)
				pair, err := tls.X509KeyPair(ca.issue(b, "node", 5))
				if err != nil {
					b.Fatal(err)
				}
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				up = echoOn(b, tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{pair}}))
				caFile := filepath.Join(b.TempDir(), "ca.pem")
				writeFile(b, caFile, ca.pem)
				cfg.UpstreamTLS = config.UpstreamTLSConfig{Enabled: true, CAFile: caFile}
			} else {
				up = echoUpstream(b, "127.0.0.1:0")
			}
			cfg.Upstreams = []string{up}
			dial := func(addr string) net.Conn {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { c.Close() })
				return c
			}
			if bc.client {
				var edit func(*config.Config)
				edit, dial = servedOverTLS(b)
				edit(&cfg)
			}
			c := dial(startBenchProxy(b, cfg))
			c.Write(append(frame.AppendHeader(nil, frame.Header{Version: 4, Opcode: frame.OpStartup, Length: 2}), 0, 0))
			r := frame.NewReader(bufio.NewReaderSize(c, 64<<10), 1<<20)
			if _, h, err := r.Next(); err != nil || h.Opcode != frame.OpReady {
				b.Fatalf("STARTUP: %v %v", h.Opcode, err)
			}
			query := "SELECT v FROM ks.t"
			body := append(binary.BigEndian.AppendUint32(nil, uint32(len(query))), query...)
			created := goroutinesCreated()
			runPipeline(b, c, r, nil, 4, frame.OpQuery, append(body, 0, 1, 0)) // ONE, no flags
			b.ReportMetric(float64(goroutinesCreated()-created)/float64(b.N), "goroutines/op")
		})
	}
}

// goroutinesCreated returns how many goroutines the process has started.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// pipeline sends v4 requests of opcode op with body to the proxy at addr,
// 128 in flight: batches of 128 pipelined requests, each batch's answers
// read before the next is sent, until b.N are answered. It reports the
// whole process's allocations.
func pipeline(b *testing.B, addr string, op frame.Opcode, body []byte) {
	pipelineVersion(b, addr, 4, false, op, body)
}

// pipelineVersion is pipeline in protocol version v, in LZ4 segments on v5
// when lz4 is set.
func pipelineVersion(b *testing.B, addr string, v uint8, lz4 bool, op frame.Opcode, body []byte) {
	c, r, segs := dialPipeline(b, addr, v, lz4)
	defer c.Close()
	runPipeline(b, c, r, segs, v, op, body)
}

// dialPipeline opens a connection to the proxy at addr in protocol version
// v, in LZ4 segments on v5 when lz4 is set, for runPipeline.
func dialPipeline(b *testing.B, addr string, v uint8, lz4 bool) (net.Conn, *frame.Reader, *frame.SegmentWriter) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	startup := []byte{0, 0}
	if lz4 {
		startup = []byte{0, 1, 0, 11, 'C', 'O', 'M', 'P', 'R', 'E', 'S', 'S', 'I', 'O', 'N', 0, 3, 'l', 'z', '4'}
	}
	c.Write(append(frame.AppendHeader(nil, frame.Header{Version: v, Opcode: frame.OpStartup, Length: len(startup)}), startup...))
	r := frame.NewReader(bufio.NewReaderSize(c, 64<<10), 1<<20)
	if _, h, err := r.Next(); err != nil || h.Opcode != frame.OpReady {
		b.Fatalf("STARTUP v%d: %v %v", v, h.Opcode, err)
	}
	var segs *frame.SegmentWriter
	if v >= 5 {
		r.UseSegments(lz4)
		segs = frame.NewSegmentWriter(lz4)
	}
	return c, r, segs
}

// runPipeline is pipeline's loop on c, read by r, in segments when segs is
// set.
func runPipeline(b *testing.B, c net.Conn, r *frame.Reader, segs *frame.SegmentWriter, v uint8, op frame.Opcode, body []byte) {
	const inflight = 128
	reqs := make([][]byte, inflight)
	for i := range reqs {
		reqs[i] = frame.AppendHeader(nil, frame.Header{Version: v, Stream: int16(i), Opcode: op, Length: len(body)})
		reqs[i] = append(reqs[i], body...)
	}
	var batch, segments []byte
	b.ReportAllocs()
	b.ResetTimer()
	for sent := 0; sent < b.N; {
		n := min(inflight, b.N-sent)
		batch = batch[:0]
		for i := range n {
			batch = append(batch, reqs[i]...)
		}
		wire := batch
		if segs != nil {
			segments = segs.AppendFrames(segments[:0], batch)
			wire = segments
		}
		if _, err := c.Write(wire); err != nil {
			b.Fatal(err)
		}
		for range n {
			if _, _, err := r.Next(); err != nil {
				b.Fatal(err)
			}
		}
		sent += n
	}
	b.StopTimer()
}

func startBenchProxy(b *testing.B, cfg config.Config) string {
	p, err := New(cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{}))
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		b.Fatal(err)
	}
	go p.Serve(ln)
	b.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// BenchmarkGocqlThroughput runs a real driver's load through the proxy:
// gocql, 2 connections, 32 goroutines each running one query after
// another, simple (QUERY) and prepared (EXECUTE) in turn, against the fake
// node. It reports requests per second; compare with -run xxx -bench
// GocqlThroughput/direct for the same load without the proxy.
func BenchmarkGocqlThroughput(b *testing.B) {
	node, err := fakenode.Start("127.0.0.1:0", fakenode.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(node.Close)
	cfg := config.Default()
	cfg.Listen, cfg.Upstreams, cfg.Admin.Listen = "127.0.0.1:0", []string{node.Addr()}, ""
	_, addr := serveProxy(b, cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{testSnapshot(b)}))
	for _, tc := range []struct{ name, host string }{{"direct", node.Addr()}, {"cqlguard", addr}} {
		b.Run(tc.name, func(b *testing.B) {
			cluster := gocql.NewCluster(tc.host)
			cluster.ProtoVersion, cluster.NumConns = 4, 2
			cluster.Timeout = 10 * time.Second
			s, err := cluster.CreateSession()
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var n atomic.Int64
			b.SetParallelism(16) // 32 goroutines on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					var err error
					if i%2 == 0 {
						err = s.Query("SELECT v FROM ks.kv WHERE k = ?", fmt.Sprint(i)).Exec() // the fake node takes text
					} else {
						err = s.Query("SELECT v FROM ks.kv WHERE k = 1").Exec()
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
		})
	}
}

// BenchmarkHotReads pipelines identical reads of one partition of a table
// under hot_reads, 128 in flight: answered from the cache, or coalesced
// (the first read of each batch leads and the others wait for its answer),
// against forwarded with hot_reads off. It reports the whole process's
// allocations per request.
func BenchmarkHotReads(b *testing.B) {
	for _, bc := range []struct {
		name  string
		table *config.HotReadsTable
	}{
		{"forwarded", nil},
		{"cached", &config.HotReadsTable{CacheTTL: config.Duration(10 * time.Second)}},
		{"coalesced", &config.HotReadsTable{Coalesce: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			up := echoUpstream(b, "127.0.0.1:0")
			cfg := config.Default()
			cfg.Listen, cfg.Upstreams, cfg.Admin.Listen = "127.0.0.1:0", []string{up}, ""
			if bc.table != nil {
				zero := config.OpsPerSecond(0)
				t := *bc.table
				t.HotRate = &zero
				cfg.HotReads.Keyspaces = map[string]config.HotReadsKeyspace{"ks": {Tables: map[string]config.HotReadsTable{"kv": t}}}
			}
			p, err := New(cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{testSnapshot(b)}))
			if err != nil {
				b.Fatal(err)
			}
			ln, err := net.Listen("tcp", cfg.Listen)
			if err != nil {
				b.Fatal(err)
			}
			go p.Serve(ln)
			b.Cleanup(func() { ln.Close() })

			q := "SELECT * FROM ks.kv WHERE k = 1"
			body := binary.BigEndian.AppendUint32(nil, uint32(len(q)))
			body = append(body, q...)
			body = append(body, 0, 1, 0) // consistency ONE, no flags
			pipeline(b, ln.Addr().String(), frame.OpQuery, body)
			for _, o := range []string{"cached", "coalesced", "forwarded", "uncoalesced"} {
				if bc.table != nil {
					b.ReportMetric(metricValue(b, p.hotReads.served.WithLabelValues("ks", "kv", o))/float64(b.N), o+"/op")
				}
			}
		})
	}
}

// listRing holds every partition on the same nodes, in its order.
type listRing []string

func (r listRing) Replicas(dst []string, keyspace string, token int64) []string {
	return append(dst, r...)
}

// BenchmarkRouted pipelines reads of one partition, 128 in flight, through
// a proxy that routes (WithRing) in front of three nodes, against one that
// does not: the partition held by the connection's own node, by another
// node (the session's connection there), and by all three, chosen among by
// load. It reports the whole process's allocations per request.
func BenchmarkRouted(b *testing.B) {
	three := func(up, other, third string) Ring { return listRing{other, third, up} }
	for _, bc := range []struct {
		name  string
		ring  func(up, other, third string) Ring
		hedge bool
	}{
		{"pinned", nil, false},
		{"own-node", func(up, _, _ string) Ring { return listRing{up} }, false},
		{"other-node", func(_, other, _ string) Ring { return listRing{other} }, false},
		{"three-replicas", three, false},
		// Each read kept to be hedged, none answered late enough to be.
		{"three-replicas-hedged", three, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			up := echoUpstream(b, "127.0.0.1:0")
			cfg := config.Default()
			cfg.Listen, cfg.Upstreams, cfg.Admin.Listen = "127.0.0.1:0", []string{up}, ""
			if bc.hedge {
				cfg.Routing.HedgeAfter = config.Duration(time.Second)
			}
			opts := []Option{WithSchema(staticSchema{benchSnapshot(b)})}
			if bc.ring != nil {
				opts = append(opts, WithRing(bc.ring(up, echoUpstream(b, "127.0.0.1:0"), echoUpstream(b, "127.0.0.1:0"))))
			}
			p, addr := serveProxy(b, cfg, testLogger(), prometheus.NewRegistry(), opts...)
			q := "SELECT * FROM bench.kv WHERE k = 1"
			body := binary.BigEndian.AppendUint32(nil, uint32(len(q)))
			body = append(body, q...)
			body = append(body, 0, 1, 0) // consistency ONE, no flags
			pipeline(b, addr, frame.OpQuery, body)
			if bc.ring != nil {
				// Every request ran on a replica, on the other node's
				// connection where the ring says so.
				b.ReportMetric(metricValue(b, p.metrics.routed[routedReplica])/float64(b.N), "replica/op")
				b.ReportMetric(metricValue(b, p.metrics.legsOpened), "legs")
			}
		})
	}
}

// BenchmarkRoutedExecute pipelines EXECUTEs of a read of one partition,
// 128 in flight, through a proxy that routes them to another node than the
// connection's (fake nodes), which keeps a copy of each until its answer,
// to send it again should the node have forgotten the statement
// (reprepare.go). It reports the whole process's allocations per request.
func BenchmarkRoutedExecute(b *testing.B) {
	up, err := fakenode.Start("127.0.0.1:0", fakenode.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(up.Close)
	other, err := fakenode.Start("127.0.0.1:0", fakenode.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(other.Close)
	cfg := config.Default()
	cfg.Listen, cfg.Upstreams, cfg.Admin.Listen = "127.0.0.1:0", []string{up.Addr()}, ""
	p, addr := serveProxy(b, cfg, testLogger(), prometheus.NewRegistry(),
		WithSchema(staticSchema{benchSnapshot(b)}), WithRing(listRing{other.Addr()}))
	c, r, segs := dialPipeline(b, addr, 4, false)
	q := "SELECT v FROM bench.kv WHERE k = ?"
	prep := binary.BigEndian.AppendUint32(nil, uint32(len(q)))
	prep = append(prep, q...)
	c.Write(append(frame.AppendHeader(nil, frame.Header{Version: 4, Opcode: frame.OpPrepare, Length: len(prep)}), prep...))
	f, h, err := r.Next()
	if err != nil || h.Opcode != frame.OpResult {
		b.Fatalf("PREPARE: %v %v", h.Opcode, err)
	}
	res := f[frame.HeaderSize+4:]
	id := res[2 : 2+binary.BigEndian.Uint16(res)]
	// The id, consistency ONE, one value: the key, 1.
	body := binary.BigEndian.AppendUint16(nil, uint16(len(id)))
	body = append(body, id...)
	body = append(body, 0, 1, 0x01, 0, 1)
	body = binary.BigEndian.AppendUint32(body, 8)
	body = binary.BigEndian.AppendUint64(body, 1)
	runPipeline(b, c, r, segs, 4, frame.OpExecute, body)
	b.ReportMetric(metricValue(b, p.metrics.routed[routedReplica])/float64(b.N), "replica/op")
	b.ReportMetric(float64(other.Requests())/float64(b.N), "node-requests/op")
	b.ReportMetric(metricValue(b, p.metrics.reprepares), "reprepares")
}
