package proxy

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/schema"
)

// safeBuffer is a bytes.Buffer for a logger written from several
// goroutines.
type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// metricValue returns the value of a counter or gauge.
func metricValue(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetCounter().GetValue() + d.GetGauge().GetValue()
}

// newReloadProxy returns a proxy, not serving, configured from the file at
// path, as cmd/cqlguard does, and its log.
func newReloadProxy(t *testing.T, path string) (*Proxy, *safeBuffer) {
	t.Helper()
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	logs := &safeBuffer{}
	p, err := New(cfg, zerolog.New(logs), prometheus.NewRegistry(), WithSchema(staticSchema{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Shutdown(context.Background()) })
	return p, logs
}

// carts is the table the reload tests look up.
var carts = &schema.Table{Keyspace: "shop", Name: "carts"}

func limitsFile(reads int) string {
	return "limits:\n  keyspaces:\n    shop:\n      tables:\n        carts: {max_reads_per_second: " + strconv.Itoa(reads) + "}\n"
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

func TestReloadConfig(t *testing.T) {
	path := writeConfig(t, limitsFile(100))
	p, logs := newReloadProxy(t, path)
	if r, _ := p.limits.Load().forTable(carts); r != 100 {
		t.Fatalf("initial reads limit %d, want 100", r)
	}
	limiter := p.limiter.Load()
	started := metricValue(t, p.reload.lastSuccess)
	if started == 0 {
		t.Error("last success timestamp not set at start")
	}

	// A good file: new limits, same limiter (its settings did not change).
	rewrite(t, path, limitsFile(7)+"  dry_run: true\n")
	if err := p.ReloadConfig(path); err != nil {
		t.Fatal(err)
	}
	l := p.limits.Load()
	if r, _ := l.forTable(carts); r != 7 || !l.dryRun {
		t.Fatalf("after reload: reads %d, dry run %v; want 7, true", r, l.dryRun)
	}
	if p.limiter.Load() != limiter {
		t.Error("limiter replaced though its settings did not change")
	}
	if got := metricValue(t, p.reload.success); got != 1 {
		t.Errorf("success count %v, want 1", got)
	}

	// A bad file: an error naming file and line, and nothing changes.
	rewrite(t, path, limitsFile(1)+"  dry_rn: true\n")
	err := p.ReloadConfig(path)
	if err == nil || !strings.Contains(err.Error(), path+":6:") {
		t.Fatalf("error %v, want one naming %s:6", err, path)
	}
	if p.limits.Load() != l {
		t.Error("a bad file changed the limits")
	}
	if got := metricValue(t, p.reload.failure); got != 1 {
		t.Errorf("failure count %v, want 1", got)
	}
	if !strings.Contains(logs.String(), "dry_rn") {
		t.Errorf("the failure was not logged with its cause: %s", logs)
	}

	// A file that is invalid as a whole (not only its limits) changes
	// nothing either.
	rewrite(t, path, limitsFile(1)+"mode: mesh\n")
	if err := p.ReloadConfig(path); err == nil || p.limits.Load() != l {
		t.Errorf("invalid mode: err %v, limits changed %v", err, p.limits.Load() != l)
	}
	// Nor does a missing file.
	if err := p.ReloadConfig(path + ".gone"); err == nil || p.limits.Load() != l {
		t.Errorf("missing file: err %v", err)
	}
	if got := metricValue(t, p.reload.failure); got != 3 {
		t.Errorf("failure count %v, want 3", got)
	}
}

func TestReloadConfigReplacesLimiter(t *testing.T) {
	path := writeConfig(t, "limits: {algorithm: token-bucket, burst: 1}\n")
	p, logs := newReloadProxy(t, path)
	tests := []struct {
		text    string
		replace bool
	}{
		{"limits: {algorithm: token-bucket, burst: 1, dry_run: true}\n", false},
		{"limits: {algorithm: token-bucket, burst: 2}\n", true},
		{"limits: {algorithm: scylla, burst: 2}\n", true},
		{"limits: {algorithm: scylla, burst: 5}\n", false}, // scylla has no burst
		{"limits: {algorithm: scylla, burst: 5, memory: 8MiB}\n", true},
	}
	for _, tt := range tests {
		before := p.limiter.Load()
		rewrite(t, path, tt.text)
		if err := p.ReloadConfig(path); err != nil {
			t.Fatal(err)
		}
		if replaced := p.limiter.Load() != before; replaced != tt.replace {
			t.Errorf("%q: limiter replaced %v, want %v", tt.text, replaced, tt.replace)
		}
	}
	if !strings.Contains(logs.String(), "rate limiter replaced") {
		t.Errorf("replacing the limiter was not logged: %s", logs)
	}
}

func TestReloadConfigLogsRestartOnlySettings(t *testing.T) {
	path := writeConfig(t, "listen: 127.0.0.1:19999\n")
	p, logs := newReloadProxy(t, path)
	rewrite(t, path, "listen: 127.0.0.1:19998\nschema: {refresh: 1m}\nlimits: {dry_run: true}\n")
	if err := p.ReloadConfig(path); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"key":"listen"`, `"key":"schema.refresh"`} {
		if !strings.Contains(logs.String(), key) {
			t.Errorf("log does not mention %s: %s", key, logs)
		}
	}
	if strings.Contains(logs.String(), `"key":"limits`) {
		t.Errorf("a reloadable setting was logged as ignored: %s", logs)
	}
	// Reported once, not at every reload.
	n := strings.Count(logs.String(), `"key":"listen"`)
	if err := p.ReloadConfig(path); err != nil {
		t.Fatal(err)
	}
	if strings.Count(logs.String(), `"key":"listen"`) != n {
		t.Error("an unchanged restart-only setting was logged again")
	}
}

func TestRestartOnlyChanges(t *testing.T) {
	a := DefaultConfig()
	b := DefaultConfig()
	b.Upstreams = []string{"10.0.0.1:9042"}
	b.Admin.Listen = ""
	b.Log.Level = "debug"
	b.Limits.DryRun = true
	b.Limits.Memory = 1 << 30
	got := restartOnlyChanges(a, b)
	want := []string{"upstreams", "admin.listen", "log.level"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// The request path reads the limits while reloads swap them.
func TestReloadConfigConcurrentReads(t *testing.T) {
	path := writeConfig(t, limitsFile(1))
	p, _ := newReloadProxy(t, path)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if r, _ := p.limits.Load().forTable(carts); r == 0 {
				t.Error("limits unset during a reload")
				return
			}
			p.limiter.Load().Allow(1, 0, 1)
		}
	}()
	for i := range 20 {
		text := limitsFile(i + 1)
		if i%5 == 0 {
			text += "  algorithm: token-bucket\n"
		}
		rewrite(t, path, text)
		if err := p.ReloadConfig(path); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	wg.Wait()
}

func TestFileWatch(t *testing.T) {
	path := writeConfig(t, "a: 1\n")
	w := fileWatch{path: path}
	if data, ok, err := w.changed(); !ok || err != nil || string(data) != "a: 1\n" {
		t.Fatalf("first look: %q, %v, %v", data, ok, err)
	}
	if _, ok, err := w.changed(); ok || err != nil {
		t.Errorf("unchanged file: %v, %v", ok, err)
	}
	// A touch is a possible change.
	later := time.Now().Add(time.Hour)
	os.Chtimes(path, later, later)
	if _, ok, _ := w.changed(); !ok {
		t.Error("touched file not read")
	}
	// A vanished file is an error, and its return a change.
	os.Remove(path)
	if _, ok, err := w.changed(); ok || err == nil {
		t.Errorf("removed file: ok %v, err %v", ok, err)
	}
	rewrite(t, path, "a: 3\n")
	if data, ok, err := w.changed(); !ok || string(data) != "a: 3\n" || err != nil {
		t.Errorf("restored file: %q, %v, %v", data, ok, err)
	}
}

// pollConfig, one look of the watcher, reloads new contents only.
func TestPollConfig(t *testing.T) {
	path := writeConfig(t, limitsFile(100))
	p, logs := newReloadProxy(t, path)
	w := fileWatch{path: path}
	reloads := func() float64 { return metricValue(t, p.reload.success) + metricValue(t, p.reload.failure) }

	// The contents loaded at startup are not loaded again.
	p.pollConfig(&w)
	if n := reloads(); n != 0 {
		t.Fatalf("%v reloads of the startup contents", n)
	}
	// Nor after a touch.
	later := time.Now().Add(time.Hour)
	os.Chtimes(path, later, later)
	p.pollConfig(&w)
	if n := reloads(); n != 0 {
		t.Fatalf("%v reloads after a touch", n)
	}
	// New contents are.
	rewrite(t, path, limitsFile(200))
	p.pollConfig(&w)
	if r, _ := p.limits.Load().forTable(carts); r != 200 || reloads() != 1 {
		t.Fatalf("after a change: reads %d, %v reloads", r, reloads())
	}
	// Bad contents are tried once.
	rewrite(t, path, limitsFile(300)+"  bogus: 1\n")
	p.pollConfig(&w)
	later = later.Add(time.Hour)
	os.Chtimes(path, later, later)
	p.pollConfig(&w)
	if f := metricValue(t, p.reload.failure); f != 1 {
		t.Errorf("%v failures, want 1", f)
	}
	// Contents SIGHUP already applied are not applied again.
	rewrite(t, path, limitsFile(400))
	if err := p.ReloadConfig(path); err != nil {
		t.Fatal(err)
	}
	p.pollConfig(&w)
	if s := metricValue(t, p.reload.success); s != 2 {
		t.Errorf("%v successes, want 2", s)
	}
	// A missing file is logged once, and its return loaded.
	os.Remove(path)
	p.pollConfig(&w)
	p.pollConfig(&w)
	if n := strings.Count(logs.String(), "cannot read the configuration file"); n != 1 {
		t.Errorf("missing file logged %d times", n)
	}
	rewrite(t, path, limitsFile(500))
	p.pollConfig(&w)
	if r, _ := p.limits.Load().forTable(carts); r != 500 {
		t.Errorf("after the file returned: reads %d", r)
	}
}

// The file changed between loading it and starting the watcher: the
// watcher's first look applies it.
func TestWatchConfigFirstLook(t *testing.T) {
	path := writeConfig(t, limitsFile(100))
	p, _ := newReloadProxy(t, path)
	rewrite(t, path, limitsFile(9))
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // one look, then stop
	p.WatchConfig(ctx, path, time.Hour)
	if r, _ := p.limits.Load().forTable(carts); r != 9 {
		t.Errorf("reads %d, want 9", r)
	}
}

func TestWatchConfig(t *testing.T) {
	path := writeConfig(t, limitsFile(100))
	p, _ := newReloadProxy(t, path)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.WatchConfig(ctx, path, time.Millisecond)
	}()
	defer func() { cancel(); <-done }()

	waitReads := func(want uint32) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if r, _ := p.limits.Load().forTable(carts); r == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the watcher never applied reads limit %d", want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	rewrite(t, path, limitsFile(2000))
	waitReads(2000)

	// A bad file is refused once, and not retried while it stays the same.
	rewrite(t, path, limitsFile(5)+"  bogus: 1\n")
	deadline := time.Now().Add(10 * time.Second)
	for metricValue(t, p.reload.failure) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the watcher never tried the bad file")
		}
		time.Sleep(time.Millisecond)
	}
	if r, _ := p.limits.Load().forTable(carts); r != 2000 {
		t.Errorf("a bad file changed the limits to %d", r)
	}
	rewrite(t, path, limitsFile(30))
	waitReads(30)
	if got := metricValue(t, p.reload.failure); got != 1 {
		t.Errorf("failure count %v, want 1: a bad file was retried", got)
	}
}
