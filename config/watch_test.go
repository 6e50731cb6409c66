package config

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// readsFile is a configuration whose global reads limit is reads, so that
// a test can tell which contents were loaded.
func readsFile(reads int) string {
	return fmt.Sprintf("limits:\n  default: {max_reads_per_second: %d}\n", reads)
}

// readsOf returns the global reads limit of c.
func readsOf(c Config) int {
	if r := c.Limits.Default.MaxReadsPerSecond; r != nil {
		return int(*r)
	}
	return -1
}

// rewrite replaces the file at path by renaming a new one over it, as
// careful tools do, so that the watcher never reads it half written.
func rewrite(t *testing.T, path, text string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// touch moves the file's modification time on by an hour from the last
// touch, leaving its contents alone.
func touch(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	later := fi.ModTime().Add(time.Hour)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
}

// result is one call of a Watcher's changed function.
type result struct {
	cfg Config
	err error
}

// syncBuffer is a log written from the watcher's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newWatcher loads text from a new file and returns a watcher of it, the
// file, the results the watcher hands over and its log.
func newWatcher(t *testing.T, text string) (*Watcher, string, chan result, *syncBuffer) {
	t.Helper()
	path := writeConfig(t, text)
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	results := make(chan result, 100)
	logs := &syncBuffer{}
	w := NewWatcher(cfg, zerolog.New(logs), func(c Config, err error) { results <- result{c, err} })
	return w, path, results, logs
}

// none checks that the watcher has handed nothing over.
func none(t *testing.T, results chan result, after string) {
	t.Helper()
	select {
	case r := <-results:
		t.Fatalf("after %s: a result (reads %d, err %v), want none", after, readsOf(r.cfg), r.err)
	default:
	}
}

// next returns the result the watcher handed over, failing if there is
// none.
func next(t *testing.T, results chan result, after string) result {
	t.Helper()
	select {
	case r := <-results:
		return r
	default:
		t.Fatalf("after %s: no result", after)
		return result{}
	}
}

func TestWatcherRead(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, "a: 1\n")
	w := &Watcher{path: path}
	if data, ok, err := w.read(); !ok || err != nil || string(data) != "a: 1\n" {
		t.Fatalf("first look: %q, %v, %v", data, ok, err)
	}
	if _, ok, err := w.read(); ok || err != nil {
		t.Errorf("unchanged file: %v, %v", ok, err)
	}
	// A touch is a possible change.
	touch(t, path)
	if _, ok, _ := w.read(); !ok {
		t.Error("touched file not read")
	}
	// A vanished file is an error, and its return a change.
	os.Remove(path)
	if _, ok, err := w.read(); ok || err == nil {
		t.Errorf("removed file: ok %v, err %v", ok, err)
	}
	rewrite(t, path, "a: 3\n")
	if data, ok, err := w.read(); !ok || string(data) != "a: 3\n" || err != nil {
		t.Errorf("restored file: %q, %v, %v", data, ok, err)
	}
}

// poll, one look of the watcher, hands over new contents only; Reload
// hands over the file whatever it holds.
func TestWatcherPoll(t *testing.T) {
	t.Parallel()
	w, path, results, logs := newWatcher(t, readsFile(100))

	// The contents loaded at startup are not handed over.
	w.poll()
	none(t, results, "the first look")
	// Nor after a touch.
	touch(t, path)
	w.poll()
	none(t, results, "a touch")
	// New contents are.
	rewrite(t, path, readsFile(200))
	w.poll()
	if r := next(t, results, "a change"); r.err != nil || readsOf(r.cfg) != 200 || r.cfg.File() != path {
		t.Fatalf("after a change: reads %d from %q, err %v", readsOf(r.cfg), r.cfg.File(), r.err)
	}
	// Bad contents are handed over once, with the error naming file and
	// line.
	rewrite(t, path, readsFile(300)+"  bogus: 1\n")
	w.poll()
	if r := next(t, results, "a bad change"); r.err == nil || !strings.Contains(r.err.Error(), path+":3:") {
		t.Fatalf("bad contents: err %v, want one naming %s:3", r.err, path)
	}
	touch(t, path)
	w.poll()
	none(t, results, "touching a bad file")
	// Reload hands over the file as it is, changed or not, and contents
	// it handed over are not handed over again by poll.
	rewrite(t, path, readsFile(400))
	for range 2 {
		w.Reload()
		if r := next(t, results, "Reload"); r.err != nil || readsOf(r.cfg) != 400 {
			t.Fatalf("Reload: reads %d, err %v", readsOf(r.cfg), r.err)
		}
	}
	w.poll()
	none(t, results, "a look at what Reload loaded")
	// A missing file is logged once, and is a failed load for Reload;
	// its return is handed over.
	os.Remove(path)
	w.poll()
	w.poll()
	none(t, results, "the file went")
	if n := strings.Count(logs.String(), "cannot read the configuration file"); n != 1 {
		t.Errorf("missing file logged %d times", n)
	}
	w.Reload()
	if r := next(t, results, "Reload of a missing file"); r.err == nil || !strings.Contains(r.err.Error(), path) {
		t.Errorf("Reload of a missing file: err %v, want one naming %s", r.err, path)
	}
	rewrite(t, path, readsFile(500))
	w.poll()
	if r := next(t, results, "the file returned"); r.err != nil || readsOf(r.cfg) != 500 {
		t.Errorf("after the file returned: reads %d, err %v", readsOf(r.cfg), r.err)
	}
}

// The file changed between loading it and starting the watcher: the
// watcher's first look hands it over.
func TestWatcherFirstLook(t *testing.T) {
	t.Parallel()
	w, path, results, _ := newWatcher(t, readsFile(100))
	rewrite(t, path, readsFile(9))
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // one look, then stop
	w.Run(ctx, time.Hour)
	if r := next(t, results, "the first look"); readsOf(r.cfg) != 9 {
		t.Errorf("reads %d, want 9", readsOf(r.cfg))
	}
}

func TestWatcherRun(t *testing.T) {
	t.Parallel()
	w, path, results, _ := newWatcher(t, readsFile(100))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx, time.Millisecond)
	}()
	defer func() { cancel(); <-done }()
	wait := func(after string) result {
		t.Helper()
		select {
		case r := <-results:
			return r
		case <-time.After(10 * time.Second):
			t.Fatalf("after %s: the watcher handed nothing over", after)
			return result{}
		}
	}

	rewrite(t, path, readsFile(2000))
	if r := wait("a change"); r.err != nil || readsOf(r.cfg) != 2000 {
		t.Fatalf("reads %d, err %v; want 2000", readsOf(r.cfg), r.err)
	}
	// A bad file is handed over once, and not again while it stays the
	// same: the next result is the good file that follows it.
	rewrite(t, path, readsFile(5)+"  bogus: 1\n")
	if r := wait("a bad change"); r.err == nil {
		t.Fatalf("bad file loaded: reads %d", readsOf(r.cfg))
	}
	touch(t, path)
	rewrite(t, path, readsFile(30))
	if r := wait("a good change"); r.err != nil || readsOf(r.cfg) != 30 {
		t.Fatalf("reads %d, err %v; want 30: a bad file was retried", readsOf(r.cfg), r.err)
	}
}

// A reload logs the warnings of what it loaded, and still hands it over.
func TestWatcherLogsWarnings(t *testing.T) {
	t.Parallel()
	w, path, results, logs := newWatcher(t, readsFile(100))
	rewrite(t, path, "clients:\n  classes:\n    - {name: vip, tier: 0, match: {driver_names: [gocql]}}\n")
	w.Reload()
	if r := next(t, results, "Reload"); r.err != nil {
		t.Fatalf("Reload: %v", r.err)
	}
	if want := path + ":3: clients.classes.0.match: class vip is matched on driver_names alone"; !strings.Contains(logs.String(), want) {
		t.Errorf("log %q does not hold %q", logs.String(), want)
	}
}
