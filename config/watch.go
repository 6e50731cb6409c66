package config

import (
	"context"
	"crypto/sha256"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// DefaultWatchInterval is how often a Watcher polls when given no
// interval.
const DefaultWatchInterval = 2 * time.Second

// Watcher loads a configuration file again when its contents change, or
// when asked, and hands each result to a function: the new Config, or the
// error that names the file and line. It remembers the contents last
// loaded, whether they loaded or not, so that it hands over each new
// contents once.
//
// It polls rather than use inotify: polling works the same on every
// platform, and sees files replaced by rename or behind a swapped symlink
// (as Kubernetes updates ConfigMap volumes).
type Watcher struct {
	path    string
	log     zerolog.Logger
	changed func(Config, error)

	// mu serializes looks at the file and the calls of changed, so that
	// an older result never follows a newer one.
	mu  sync.Mutex
	sum [sha256.Size]byte // of the contents last loaded
	// modTime and size are the file's when its contents were last read,
	// once statted is set.
	modTime time.Time
	size    int64
	statted bool
	failing bool // a failure to read the file has been logged
}

// NewWatcher returns a watcher of the file loaded was read from, whose
// contents, as loaded, count as loaded. It calls changed, one call at a
// time, with the result of each load; it logs to log that it cannot read
// the file, which is not a load's result.
func NewWatcher(loaded Config, log zerolog.Logger, changed func(Config, error)) *Watcher {
	return &Watcher{path: loaded.file, log: log, changed: changed, sum: loaded.sum}
}

// Reload loads the file now, as Load does, whether or not its contents
// changed, and hands the result to changed: for SIGHUP, which also makes a
// renewed certificate take effect.
func (w *Watcher) Reload() {
	w.mu.Lock()
	defer w.mu.Unlock()
	data, err := readFile(w.path)
	if err != nil {
		w.changed(Config{}, err)
		return
	}
	w.load(data)
}

// Run polls the file every interval (every <= 0 means
// DefaultWatchInterval) until ctx ends, and loads it when its contents
// differ from those last loaded: at the start, by Reload or by Run. A
// change of modification time or size makes it read the file; a touch
// that leaves the contents alone loads nothing. Contents that failed to
// load are not tried again until they change.
func (w *Watcher) Run(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = DefaultWatchInterval
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		// The first look is immediate: the file may have changed since it
		// was loaded.
		w.poll()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// poll looks at the file once, and loads it if its contents are new.
func (w *Watcher) poll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	data, ok, err := w.read()
	switch {
	case err != nil:
		if !w.failing {
			w.failing = true
			w.log.Warn().Err(err).Msg("cannot read the configuration file; watching it for changes")
		}
	case ok:
		w.failing = false
		if sha256.Sum256(data) != w.sum {
			w.load(data)
		}
	default:
		w.failing = false
	}
}

// load parses data, the file's contents, remembers them as loaded, logs
// its warnings and hands the result to changed.
func (w *Watcher) load(data []byte) {
	w.sum = sha256.Sum256(data)
	c, err := Parse(w.path, data)
	if err == nil {
		for _, warning := range Warnings(&c, data) {
			w.log.Warn().Msg(warning)
		}
	}
	w.changed(c, err)
}

// read returns the file's contents and true if its time or size changed
// since the last call that returned them.
func (w *Watcher) read() ([]byte, bool, error) {
	fi, err := os.Stat(w.path)
	if err != nil {
		return nil, false, err
	}
	if w.statted && fi.ModTime().Equal(w.modTime) && fi.Size() == w.size {
		return nil, false, nil
	}
	// Read after Stat: a write in between gives a newer time, seen at the
	// next poll.
	data, err := os.ReadFile(w.path)
	if err != nil {
		return nil, false, err
	}
	w.modTime, w.size, w.statted = fi.ModTime(), fi.Size(), true
	return data, true, nil
}
