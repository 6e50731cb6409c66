// Package load drives CQL servers with many connections and many requests
// in flight on each, pipelined over stream ids, and reports each second's
// attempted, succeeded, rejected and failed requests and latencies, per
// loader: the figures of cqlguard's benchmarks and of its goodput
// experiment, where several loaders with different workloads run at once
// through named phases.
//
// Requests are raw frames built with cqlguard's frame package: a loader
// spends its time on the network, not on a driver.
package load

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"sync"
	"time"
)

// Phase is a named stretch of a run, from At until the next phase.
type Phase struct {
	Name string
	At   time.Duration
	// Action, when set, runs once when the phase begins (reloading a
	// proxy's configuration, say); its outcome is reported as an event.
	Action func(ctx context.Context) error
}

// Options configure Run.
type Options struct {
	// Duration is the length of the run.
	Duration time.Duration
	// Warmup is the start of the run left out of the summaries.
	Warmup time.Duration
	// Phases name parts of the run; sorted by At.
	Phases []Phase
	// Report, when set, receives each second's figures as the run goes.
	Report func(Second)
	// Drain bounds the wait for answers once loaders stop (default 5s);
	// requests still unanswered then count as failed.
	Drain time.Duration
}

// Interval is what one loader did in one reporting interval. Latencies
// are those of the requests answered in it.
type Interval struct {
	Loader    string        `json:"loader"`
	Attempted uint64        `json:"attempted"`
	Succeeded uint64        `json:"succeeded"`
	Rejected  uint64        `json:"rejected"`
	Failed    uint64        `json:"failed"`
	P50       time.Duration `json:"p50_ns"`
	P99       time.Duration `json:"p99_ns"`
	P999      time.Duration `json:"p999_ns"`
	// OKP50 and OKP99 are the latencies of the succeeded requests alone.
	OKP50 time.Duration `json:"ok_p50_ns"`
	OKP99 time.Duration `json:"ok_p99_ns"`
}

// Second is one reporting interval, normally a second long.
type Second struct {
	T       time.Duration `json:"t_ns"` // end of the interval, from the start of the run
	Length  time.Duration `json:"length_ns"`
	Phase   string        `json:"phase,omitempty"`
	Loaders []Interval    `json:"loaders"`
	Events  []string      `json:"events,omitempty"` // phase actions and connection errors
}

// Summary is what one loader did over the measured part of the run: from
// Warmup (or its own start) to the end of the run (or its own stop).
type Summary struct {
	Loader    string        `json:"loader"`
	Seconds   float64       `json:"seconds"`
	Attempted uint64        `json:"attempted"`
	Succeeded uint64        `json:"succeeded"`
	Rejected  uint64        `json:"rejected"`
	Failed    uint64        `json:"failed"`
	Rate      float64       `json:"rate"` // answered requests per second
	P50       time.Duration `json:"p50_ns"`
	P90       time.Duration `json:"p90_ns"`
	P99       time.Duration `json:"p99_ns"`
	P999      time.Duration `json:"p999_ns"`
	Max       time.Duration `json:"max_ns"`
	Mean      time.Duration `json:"mean_ns"`
	// Errors are the distinct connection errors, with their counts.
	Errors map[string]int `json:"errors,omitempty"`
}

// Answered is how many requests got an answer.
func (s *Summary) Answered() uint64 { return s.Succeeded + s.Rejected + s.Failed }

// Run runs the loaders of specs for opts.Duration and returns a summary
// of each. It stops early, with ctx's error, when ctx ends.
func Run(ctx context.Context, specs []Spec, opts Options) ([]Summary, error) {
	if opts.Duration <= 0 {
		return nil, errors.New("load: duration must be positive")
	}
	if opts.Warmup >= opts.Duration {
		return nil, fmt.Errorf("load: warmup %v leaves nothing of the %v run", opts.Warmup, opts.Duration)
	}
	if opts.Drain <= 0 {
		opts.Drain = 5 * time.Second
	}
	loaders := make([]*loader, len(specs))
	for i := range specs {
		if err := specs[i].Validate(); err != nil {
			return nil, fmt.Errorf("load: %w", err)
		}
		loaders[i] = newLoader(specs[i])
	}
	phases := append([]Phase(nil), opts.Phases...)
	sort.SliceStable(phases, func(i, j int) bool { return phases[i].At < phases[j].At })

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	var events eventLog
	var wg sync.WaitGroup
	for _, l := range loaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.run(ctx, start, opts.Duration, opts.Drain, &events)
		}()
	}
	for _, p := range phases {
		if p.Action == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !SleepUntil(ctx, start.Add(p.At)) {
				return
			}
			if err := p.Action(ctx); err != nil {
				events.add(fmt.Sprintf("phase %s: %v", p.Name, err))
			} else {
				events.add("phase " + p.Name + " began")
			}
		}()
	}

	var last, lastStart time.Duration
	for k := 1; last < opts.Duration; k++ {
		t := min(time.Duration(k)*time.Second, opts.Duration)
		if !SleepUntil(ctx, start.Add(t)) {
			break
		}
		sec := Second{T: t, Length: t - last, Phase: phaseAt(phases, last), Events: events.take()}
		for _, l := range loaders {
			sec.Loaders = append(sec.Loaders, l.collect(last >= opts.Warmup))
		}
		if opts.Report != nil {
			opts.Report(sec)
		}
		last, lastStart = t, last
	}
	cancel()
	wg.Wait()
	// Answers that came in while the loaders drained belong to the last
	// interval measured.
	var out []Summary
	for _, l := range loaders {
		l.collect(lastStart >= opts.Warmup)
		out = append(out, l.summary(opts))
	}
	if err := context.Cause(ctx); err != nil && last < opts.Duration {
		return out, err
	}
	return out, nil
}

func phaseAt(phases []Phase, t time.Duration) string {
	name := ""
	for _, p := range phases {
		if p.At <= t {
			name = p.Name
		}
	}
	return name
}

// SleepUntil waits until t or until ctx ends, reporting whether t came.
func SleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// eventLog gathers events for the next report.
type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (e *eventLog) add(s string) {
	e.mu.Lock()
	e.events = append(e.events, s)
	e.mu.Unlock()
}

func (e *eventLog) take() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.events
	e.events = nil
	return out
}

// loader runs one Spec's connections.
type loader struct {
	spec  Spec
	stats []*connStats
	lat   *Latencies // one interval's
	okLat *Latencies // one interval's succeeded requests'
	total *Latencies // the measured intervals'
	sum   Summary

	errMu sync.Mutex
	errs  map[string]int
}

func newLoader(s Spec) *loader {
	l := &loader{spec: s, lat: NewLatencies(), okLat: NewLatencies(), total: NewLatencies(), errs: map[string]int{}}
	for range s.Conns {
		l.stats = append(l.stats, newConnStats())
	}
	l.sum.Loader = s.Name
	return l
}

func (l *loader) error(err error, events *eventLog) {
	msg := err.Error()
	l.errMu.Lock()
	l.errs[msg]++
	first := l.errs[msg] == 1
	l.errMu.Unlock()
	if first {
		events.add(l.spec.Name + ": " + msg)
	}
}

// run starts the loader's connections at its start and stops them at its
// stop or when ctx ends.
func (l *loader) run(ctx context.Context, start time.Time, runFor, drain time.Duration, events *eventLog) {
	if !SleepUntil(ctx, start.Add(l.spec.Start)) {
		return
	}
	stopAt := runFor
	if l.spec.Stop > 0 {
		stopAt = min(l.spec.Stop, runFor)
	}
	stop := make(chan struct{})
	go func() {
		SleepUntil(ctx, start.Add(stopAt))
		close(stop)
	}()
	var interval time.Duration
	if l.spec.Rate > 0 {
		interval = time.Duration(float64(l.spec.Conns) / l.spec.Rate * float64(time.Second))
	}
	h := fnv.New64a()
	h.Write([]byte(l.spec.Name))
	seed := h.Sum64()
	first := time.Now()
	var wg sync.WaitGroup
	for i, st := range l.stats {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Stagger the connections' schedules over one interval.
			at := first.Add(time.Duration(i) * interval / time.Duration(len(l.stats)))
			l.work(st, seed+uint64(i)<<32, at, interval, stop, drain, events)
		}()
	}
	wg.Wait()
}

// work keeps one connection going until stop, reconnecting after errors.
func (l *loader) work(st *connStats, seed uint64, first time.Time, interval time.Duration, stop <-chan struct{}, drain time.Duration, events *eventLog) {
	for attempt := uint64(0); ; attempt++ {
		select {
		case <-stop:
			return
		default:
		}
		c, err := dial(&l.spec, st, seed+attempt)
		if err != nil {
			l.error(err, events)
			if !sleepOrStop(200*time.Millisecond, stop) {
				return
			}
			continue
		}
		dead := make(chan struct{})
		readErr := make(chan error, 1)
		go func() {
			readErr <- c.readLoop()
			close(dead)
		}()
		werr := c.writeLoop(stop, dead, first, interval)
		if werr == nil {
			// Stopped: wait for the answers still due.
			deadline := time.Now().Add(drain)
			for c.inflight() > 0 && time.Now().Before(deadline) {
				select {
				case <-dead:
					deadline = time.Now()
				case <-time.After(time.Millisecond):
				}
			}
		}
		c.nc.Close()
		rerr := <-readErr
		if n := c.inflight(); n > 0 {
			st.addFailed(uint64(n))
		}
		select {
		case <-stop:
			if werr != nil {
				l.error(werr, events)
			}
			return
		default:
		}
		if werr == nil || errors.Is(werr, errReaderDone) {
			werr = rerr
		}
		l.error(werr, events)
		if !sleepOrStop(200*time.Millisecond, stop) {
			return
		}
		// A new connection's schedule starts now: the requests due while
		// it was down were never attempted.
		first = time.Now()
	}
}

func sleepOrStop(d time.Duration, stop <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	}
}

// collect takes the counts since the last collect, adding them to the
// summary when they are measured.
func (l *loader) collect(measured bool) Interval {
	iv := Interval{Loader: l.spec.Name}
	l.lat.Reset()
	l.okLat.Reset()
	for _, s := range l.stats {
		iv.Attempted += s.attempted.Swap(0)
		s.mu.Lock()
		iv.Succeeded += s.succeeded
		iv.Rejected += s.rejected
		iv.Failed += s.failed
		s.succeeded, s.rejected, s.failed = 0, 0, 0
		l.lat.Merge(s.lat)
		l.okLat.Merge(s.okLat)
		s.lat.Reset()
		s.okLat.Reset()
		s.mu.Unlock()
	}
	iv.P50, iv.P99, iv.P999 = l.lat.Percentile(50), l.lat.Percentile(99), l.lat.Percentile(99.9)
	iv.OKP50, iv.OKP99 = l.okLat.Percentile(50), l.okLat.Percentile(99)
	if measured {
		l.total.Merge(l.lat)
		l.sum.Attempted += iv.Attempted
		l.sum.Succeeded += iv.Succeeded
		l.sum.Rejected += iv.Rejected
		l.sum.Failed += iv.Failed
	}
	return iv
}

func (l *loader) summary(opts Options) Summary {
	s := l.sum
	from := max(opts.Warmup, l.spec.Start)
	to := opts.Duration
	if l.spec.Stop > 0 {
		to = min(to, l.spec.Stop)
	}
	s.Seconds = max(0, (to - from).Seconds())
	if s.Seconds > 0 {
		s.Rate = float64(s.Answered()) / s.Seconds
	}
	t := l.total
	s.P50, s.P90, s.P99, s.P999 = t.Percentile(50), t.Percentile(90), t.Percentile(99), t.Percentile(99.9)
	s.Max, s.Mean = t.Max(), t.Mean()
	l.errMu.Lock()
	if len(l.errs) > 0 {
		s.Errors = l.errs
	}
	l.errMu.Unlock()
	return s
}
