package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
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
