package loader

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/schema"
)

// Source gives snapshots of the schema; *Loader is one.
type Source interface {
	Load(ctx context.Context) (*schema.Snapshot, error)
}

// Schema holds the current snapshot and reloads it from a Source
// periodically and when asked. Its methods are safe for concurrent use.
type Schema struct {
	src   Source
	log   zerolog.Logger
	every time.Duration
	// settle is how long Run waits after a Refresh before loading, so that
	// the rest of a burst of schema changes lands in the same load.
	settle time.Duration
	// timeout bounds one load, so that a hung upstream does not stop the
	// periodic reloads.
	timeout time.Duration
	cur     atomic.Pointer[schema.Snapshot]
	// loadedAt is when the last load succeeded, in Unix nanoseconds; 0
	// before the first. failures counts failed loads.
	loadedAt atomic.Int64
	failures atomic.Uint64
	// kick holds at most one pending Refresh; more are redundant.
	kick chan struct{}
}

// Defaults for Schema's internal timings.
const (
	defaultSettle  = 250 * time.Millisecond
	defaultTimeout = time.Minute
	// maxRetry caps the delay between attempts after failed loads; retries
	// start at a second so that a proxy started before its cluster learns
	// the schema soon after the cluster is up.
	maxRetry = 30 * time.Second
)

// NewSchema returns a Schema that loads from src every period, and on Refresh,
// once Run is running. If every is zero or negative it loads only at start
// and on Refresh. Until the first load succeeds, Current is an empty
// snapshot.
func NewSchema(src Source, log zerolog.Logger, every time.Duration) *Schema {
	s := &Schema{
		src:     src,
		log:     log,
		every:   every,
		settle:  defaultSettle,
		timeout: defaultTimeout,
		kick:    make(chan struct{}, 1),
	}
	s.cur.Store(schema.NewSnapshot(nil))
	return s
}

// Current returns the latest snapshot; never nil.
func (s *Schema) Current() *schema.Snapshot {
	return s.cur.Load()
}

// LoadedAt returns when the current snapshot was loaded: the zero time
// until a load succeeds, while Current is an empty snapshot that holds no
// table at all.
func (s *Schema) LoadedAt() time.Time {
	if ns := s.loadedAt.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// Failures returns how many loads have failed.
func (s *Schema) Failures() uint64 { return s.failures.Load() }

// Refresh asks for a reload soon, without waiting for it. A burst of
// Refresh calls, such as a DDL script gives, causes one reload, or two if
// the burst outlasts a load.
func (s *Schema) Refresh() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run loads the schema at once and then every period and after each
// Refresh, until ctx ends. Failures are logged and keep the previous
// snapshot; after one, Run retries sooner than the period.
func (s *Schema) Run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-s.kick:
			if !sleep(ctx, s.settle) {
				return
			}
		}
		// This load will see every change announced so far; only a Refresh
		// from now on needs another.
		select {
		case <-s.kick:
		default:
		}
		next := s.every
		if s.load(ctx) {
			failures = 0
		} else {
			failures++
			if retry := retryDelay(failures); next <= 0 || retry < next {
				next = retry
			}
		}
		if next > 0 {
			timer.Reset(next)
		}
	}
}

// load loads and installs one snapshot, and reports whether it got one.
func (s *Schema) load(parent context.Context) bool {
	ctx, cancel := context.WithTimeout(parent, s.timeout)
	defer cancel()
	start := time.Now()
	snap, err := s.src.Load(ctx)
	elapsed := time.Since(start)
	if snap == nil {
		if err == nil {
			err = errors.New("schema: source returned no snapshot")
		}
		// A load cut short because Run is stopping is no failure to report.
		if parent.Err() == nil {
			s.failures.Add(1)
			s.log.Error().Err(err).Float64("took_seconds", elapsed.Seconds()).Int("tables", s.Current().Len()).
				Msg("loading the schema failed; keeping the previous one")
		}
		return false
	}
	if err != nil {
		// Some tables could not be understood: the rest are still better
		// than a snapshot that misses every change since the last good load.
		s.log.Warn().Err(err).Msg("some tables of the schema were left out")
	}
	prev := s.cur.Swap(snap)
	s.loadedAt.Store(time.Now().UnixNano())
	ev := s.log.Debug()
	if prev.Len() != snap.Len() {
		ev = s.log.Info()
	}
	ev.Int("tables", snap.Len()).Float64("took_seconds", elapsed.Seconds()).Msg("schema loaded")
	return true
}

// retryDelay is the wait before the next attempt after n consecutive
// failures: doubling from a second, up to maxRetry.
func retryDelay(n int) time.Duration {
	d := time.Second
	for i := 1; i < n && d < maxRetry; i++ {
		d *= 2
	}
	return min(d, maxRetry)
}

// sleep waits for d or until ctx ends, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
