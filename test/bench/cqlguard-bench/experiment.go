package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/cqlguard/cqlguard/test/load"
)

// nodeRun is what the experiments against a real node (goodput, classes,
// shedding) share: cqlguard's binary and the node, the loaders' user and
// connections, the phases' lengths, the pinning, and the outputs.
type nodeRun struct {
	cqlguard, upstream     string
	user, password         string
	keys                   uint64 // partitions of bench.kv, written first
	conns                  int    // connections of each loader
	phase, warmup, preload time.Duration
	upstreamPID            int
	out, jsonPath, dir     string
	stdout, stderr         io.Writer
}

// flags registers the shared flags on fs: keys says what bench.kv's
// partitions are read by, and out and warmup are the experiment's own
// defaults.
func (r *nodeRun) flags(fs *flag.FlagSet, keys, out string, warmup time.Duration) {
	fs.StringVar(&r.cqlguard, "cqlguard", "bin/cqlguard", "the cqlguard binary")
	fs.StringVar(&r.upstream, "upstream", "127.0.0.2:9042", "the Cassandra or ScyllaDB node")
	fs.StringVar(&r.user, "user", "cassandra", "PasswordAuthenticator user of the loaders, of cqlguard's schema reads and of the node's counts")
	fs.StringVar(&r.password, "password", "cassandra", "the password of -user")
	fs.Uint64Var(&r.keys, "keys", 10000, "partitions of bench.kv "+keys+" reads, a row each, written first")
	fs.IntVar(&r.conns, "conns", 2, "connections of each loader")
	fs.DurationVar(&r.phase, "phase", 30*time.Second, "length of each phase")
	fs.DurationVar(&r.warmup, "warmup", warmup, "load before the phases, left out of the figures")
	fs.DurationVar(&r.preload, "preload", 5*time.Second, "time spent writing bench.kv's rows first")
	fs.IntVar(&r.upstreamPID, "upstream-pid", 0, "the node's process id, when it runs on this machine: it is pinned to the last CPU and everything else here to the others, as a cluster runs on machines of its own; the classes experiment also measures its CPU time (0: no pinning, and no figures of the node's work)")
	fs.StringVar(&r.out, "out", out, "the plot to write")
	fs.StringVar(&r.jsonPath, "json", "", "also write each second's figures to this file, one JSON object a line")
}

// inTempDir runs run with r.dir a temporary directory of its own, removed
// after.
func (r *nodeRun) inTempDir(name string, run func() error) error {
	dir, err := os.MkdirTemp("", "cqlguard-"+name+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	r.dir = dir
	return run()
}

// savePanels draws panels one above the other, aligned, into a PNG at
// path.
func savePanels(path string, panels [][]*plot.Plot) error {
	img := vgimg.New(12*vg.Inch, vg.Length(len(panels))*4*vg.Inch)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4),
		PadLeft: vg.Points(4), PadRight: vg.Points(10), PadY: vg.Points(12)}
	canvases := plot.Align(panels, tiles, draw.New(img))
	for j := range panels {
		panels[j][0].Draw(canvases[j][0])
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

// wideTable is bench.wide's shape: partitions that a heavy class reads
// whole.
type wideTable struct{ partitions, rows, rowBytes int }

// flags registers the table's flags on fs; reader says who reads it.
func (w *wideTable) flags(fs *flag.FlagSet, reader string) {
	fs.IntVar(&w.partitions, "wide-partitions", 16, "partitions of bench.wide "+reader+" reads whole, written first")
	fs.IntVar(&w.rows, "wide-rows", 256, "rows of each partition of bench.wide")
	fs.IntVar(&w.rowBytes, "row-bytes", 1024, "size of each row's value in bench.wide")
}

func (w wideTable) validate() error {
	if w.partitions < 1 || w.rows < 1 || w.rowBytes < 0 {
		return errors.New("-wide-partitions and -wide-rows must be positive, -row-bytes not negative")
	}
	return nil
}

// connect opens a session to the node itself, for the tables and the
// node's counts: it is no client of cqlguard's.
func (r *nodeRun) connect() (*gocql.Session, error) {
	cluster := gocql.NewCluster(r.upstream)
	cluster.Authenticator = gocql.PasswordAuthenticator{Username: r.user, Password: r.password}
	cluster.NumConns, cluster.Timeout, cluster.ConnectTimeout = 1, 10*time.Second, 10*time.Second
	s, err := cluster.CreateSession()
	if err != nil {
		return nil, fmt.Errorf("connecting to the node %s: %w", r.upstream, err)
	}
	return s, nil
}

// createTables creates bench.kv and bench.wide, writes bench.wide's
// partitions whole, as w says, and bench.kv's rows for the preload's time.
func (r *nodeRun) createTables(ctx context.Context, s *gocql.Session, w wideTable) error {
	for _, q := range []string{
		"CREATE KEYSPACE IF NOT EXISTS bench WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
		"CREATE TABLE IF NOT EXISTS bench.kv (k bigint PRIMARY KEY, v blob)",
		"CREATE TABLE IF NOT EXISTS bench.wide (k bigint, c int, v blob, PRIMARY KEY (k, c))",
	} {
		if err := s.Query(q).ExecContext(ctx); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	fmt.Fprintf(r.stderr, "writing bench.wide: %d partitions of %d rows of %d bytes\n", w.partitions, w.rows, w.rowBytes)
	type row struct {
		k int64
		c int
	}
	rows := make(chan row)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := make([]byte, w.rowBytes)
			for r := range rows {
				rand.Read(v)
				if err := s.Query("INSERT INTO bench.wide (k, c, v) VALUES (?, ?, ?)", r.k, r.c, v).ExecContext(ctx); err != nil {
					errs <- fmt.Errorf("writing bench.wide: %w", err)
					return
				}
			}
		}()
	}
	var werr error
fill:
	for k := range w.partitions {
		for i := range w.rows {
			select {
			case rows <- row{int64(k), i}:
			case werr = <-errs:
				break fill
			}
		}
	}
	close(rows)
	wg.Wait()
	if werr != nil {
		return werr
	}
	select {
	case err := <-errs:
		return err
	default:
	}
	fmt.Fprintf(r.stderr, "writing bench.kv's rows for %v\n", r.preload)
	pre := load.DefaultSpec()
	pre.Name, pre.Addr, pre.Username, pre.Password = "preload", r.upstream, r.user, r.password
	pre.Op, pre.Keys, pre.Conns, pre.Concurrency = load.Write, r.keys, 2, 64
	if _, err := load.Run(ctx, []load.Spec{pre}, load.Options{Duration: r.preload}); err != nil {
		return fmt.Errorf("writing bench.kv: %w", err)
	}
	return nil
}
