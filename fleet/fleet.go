// Package fleet makes one proxy's limits hold for a whole fleet of proxies.
// Every interval a Reporter takes from a ratelimit.Fleet the partitions hot
// enough to matter, hottest first, reports what each let through since the
// last report to Redis in one pipelined round trip, reads back the fleet's
// count for the same partitions over the last second, and sets the share of
// operations each may admit until the next report: the limit over the
// fleet's rate, or all of them under it. This is Databricks' batch
// reporting: no remote call on the request path, which reads only the
// shares in local memory.
//
// In Redis a partition is named by its limiter label and token, never by
// its key, and counted in one key per wall-clock second, which expires by
// itself a few seconds later; the proxies' clocks are assumed to agree to
// within a small part of a second (NTP). A sorted set holds when each proxy
// last reported, so that each knows how many share the limits.
//
// While Redis cannot be reached, shares run out, and each proxy limits with
// its local Limiter alone: with the whole limit (fallback local), or with
// the limit divided by the proxies last seen (fallback share). A failed or
// slow report never holds up a request.
//
// Redis is trusted with the limits' accuracy, not with the proxy's memory
// or availability: its replies are bounded before they are allocated
// (NewDialer), and a count that no fleet could have written fails the
// report as if Redis could not be reached.
//
// The package knows Redis, tokens and labels; not CQL, tables or sockets
// to clients.
package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/ratelimit"
)

// Config configures a Reporter.
type Config struct {
	// Client is the Redis client, standalone or cluster; the Reporter
	// closes it when Run returns.
	Client redis.UniversalClient
	// KeyPrefix starts every key.
	KeyPrefix string
	// Interval is the time between reports.
	Interval time.Duration
	// Share divides the local limits by the proxies last seen while Redis
	// cannot be reached; without it each proxy applies them whole.
	Share bool
	// MaxPartitions bounds the partitions a report carries.
	MaxPartitions int
	// Now is the clock, time.Now if nil; its Unix nanoseconds must be the
	// clock the request path gives ratelimit.Fleet.Admit.
	Now func() time.Time
}

// proxiesWindow is how recently a proxy must have reported to count as one
// of the fleet.
const proxiesWindow = 3 * time.Second

// maxProxyRate bounds the operations one proxy can be offered on one
// partition in a second, and so what it can report of them: over 30 times
// the fastest a proxy has served all its requests (docs/benchmarks.md,
// about a million a second on two cores), a request counting each of its
// partitions once. It bounds the counts a fleet can have written.
const maxProxyRate = 1 << 25

// Reporter reports a proxy's hot partitions and sets their shares.
type Reporter struct {
	cfg   Config
	fleet *ratelimit.Fleet
	log   zerolog.Logger
	m     *Metrics
	id    string

	up      bool
	proxies int
	entries []ratelimit.FleetEntry
	incr    []*redis.IntCmd
	prev    []*redis.StringCmd
	rates   []float64
	key     []byte
}

// New returns a Reporter of f's partitions. Metrics come from NewMetrics,
// made once for the life of the process.
func New(cfg Config, f *ratelimit.Fleet, log zerolog.Logger, m *Metrics) *Reporter {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxPartitions < 1 {
		cfg.MaxPartitions = 1000
	}
	host, _ := os.Hostname()
	var b [6]byte
	rand.Read(b[:])
	return &Reporter{
		cfg: cfg, fleet: f, log: log, m: m,
		id:      host + "/" + strconv.Itoa(os.Getpid()) + "/" + hex.EncodeToString(b[:]),
		up:      true, // so that the first failure is logged
		proxies: 1,
	}
}

// Run reports every interval until ctx is done, then closes the client.
// A report that does not finish within the interval is abandoned: the next
// one carries fresh counts.
func (r *Reporter) Run(ctx context.Context) {
	defer r.cfg.Client.Close()
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			r.fleet.SetDivisor(1)
			return
		case <-t.C:
			r.Report(ctx)
		}
	}
}

// Report makes one report now; Run calls it every interval.
func (r *Reporter) Report(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Interval)
	defer cancel()
	start := time.Now()
	err := r.report(ctx)
	r.m.reportSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		r.m.failures.Inc()
		if r.up {
			r.log.Warn().Err(err).Bool("share", r.cfg.Share).Msg("coordination lost: limits are local until Redis answers")
		}
		r.up = false
		r.m.up.Set(0)
		if r.cfg.Share {
			r.fleet.SetDivisor(uint32(r.proxies))
		}
		return
	}
	if !r.up {
		r.log.Info().Int("proxies", r.proxies).Msg("coordination restored: limits hold for the fleet")
	}
	r.up = true
	r.m.up.Set(1)
	r.fleet.SetDivisor(1)
}

func (r *Reporter) report(ctx context.Context) error {
	now := r.cfg.Now()
	interval := r.cfg.Interval.Seconds()
	proxies := r.proxies
	// A partition is reported once its rate here reaches a twentieth of
	// its share of the limit: what the fleet's proxies do not report of a
	// partition is then at most a twentieth of its limit, and admitted on
	// top of it.
	hot := func(limit uint32) uint32 {
		return max(1, uint32(float64(limit)*interval/float64(20*proxies)))
	}
	r.entries = r.fleet.Collect(r.entries[:0], now.UnixNano(), hot, r.cfg.MaxPartitions)
	r.m.partitions.Set(float64(len(r.entries)))

	sec := now.Unix()
	pipe := r.cfg.Client.Pipeline()
	members := r.cfg.KeyPrefix + "proxies"
	ms := now.UnixMilli()
	pipe.ZAdd(ctx, members, redis.Z{Score: float64(ms), Member: r.id})
	pipe.ZRemRangeByScore(ctx, members, "-inf", strconv.FormatInt(ms-proxiesWindow.Milliseconds(), 10))
	// A proxy's score is when it reported: one from the future is none a
	// proxy wrote, and would stay in the set.
	count := pipe.ZCount(ctx, members, "-inf", strconv.FormatInt(ms+proxiesWindow.Milliseconds(), 10))
	pipe.PExpire(ctx, members, 2*proxiesWindow)
	r.incr, r.prev = r.incr[:0], r.prev[:0]
	for _, e := range r.entries {
		cur, prev := r.keys(e, sec)
		r.incr = append(r.incr, pipe.IncrBy(ctx, cur, int64(e.Hits)))
		pipe.PExpire(ctx, cur, 3*time.Second)
		r.prev = append(r.prev, pipe.Get(ctx, prev))
	}
	// Exec reports the first error of all, and a partition new this second
	// has no count for the last one (redis.Nil): look at each command, so
	// that such a partition hides no failure behind it.
	cmds, err := pipe.Exec(ctx)
	if errors.Is(err, redis.Nil) {
		err = nil
		for _, c := range cmds {
			if e := c.Err(); e != nil && !errors.Is(e, redis.Nil) {
				err = e
				break
			}
		}
	}
	if err != nil {
		return fmt.Errorf("reporting %d partitions: %w", len(r.entries), err)
	}
	if n, err := count.Result(); err == nil && n > 0 {
		r.proxies = int(n)
		r.m.proxies.Set(float64(n))
	}
	// The fleet's rate over the last second: what was reported in this
	// second so far, and the part of what was reported in the last one that
	// a sliding second still covers. Counts are keyed by when they were
	// reported, so each proxy's are late by up to an interval, but the
	// window holds a second's worth of every proxy's reports all the same.
	frac := float64(now.Nanosecond()) / 1e9
	if err := r.rate(frac, sec); err != nil {
		return err
	}
	until := now.Add(max(3*r.cfg.Interval, 300*time.Millisecond)).UnixNano()
	for i, e := range r.entries {
		share := 1.0
		if rate := r.rates[i]; rate > float64(e.Limit) {
			share = float64(e.Limit) / rate
		}
		r.fleet.Set(e, share, until)
	}
	return nil
}

// rate sets rates to the fleet's rate of each partition reported, from its
// counts in second sec and the one before, frac of sec past. Counts that no
// fleet could have written fail the report, as if Redis could not be
// reached, rather than have the fleet refuse a partition nearly whole (a
// huge count) or admit it as if uncoordinated (a negative one): a count
// under 0, or not a number, under what this report just added to it (a
// count only grows), or over what the proxies seen could have reported in
// a second (each, what it was offered in the second and at most one
// interval, 500 ms, before it).
func (r *Reporter) rate(frac float64, sec int64) error {
	most := 2 * int64(r.proxies) * maxProxyRate
	var bad error
	r.rates = r.rates[:0]
	for i, e := range r.entries {
		cur, err := r.incr[i].Result()
		prev, perr := r.prev[i].Int64()
		if errors.Is(perr, redis.Nil) {
			prev, perr = 0, nil
		}
		if err == nil && (perr != nil || cur < int64(e.Hits) || cur > most || prev < 0 || prev > most) {
			r.m.implausible.Inc()
			if bad == nil {
				kc, kp := r.keys(e, sec)
				bad = fmt.Errorf("counts no fleet of %d proxies could have written: %s is %d after adding %d, %s is %q",
					r.proxies, kc, cur, e.Hits, kp, r.prev[i].Val())
			}
		}
		r.rates = append(r.rates, float64(cur)+float64(prev)*(1-frac))
	}
	return bad
}

// keys returns the keys of a partition's counts in second sec and the one
// before: prefix{label:token}:second, the braces keeping both in one Redis
// Cluster slot.
func (r *Reporter) keys(e ratelimit.FleetEntry, sec int64) (cur, prev string) {
	k := append(r.key[:0], r.cfg.KeyPrefix...)
	k = append(k, '{')
	k = strconv.AppendUint(k, uint64(e.Label), 16)
	k = append(k, ':')
	k = strconv.AppendInt(k, e.Token, 16)
	k = append(k, "}:"...)
	n := len(k)
	cur = string(strconv.AppendInt(k, sec, 10))
	prev = string(strconv.AppendInt(k[:n], sec-1, 10))
	r.key = k
	return cur, prev
}

// Metrics are a Reporter's metrics, registered once for the process.
type Metrics struct {
	up            prometheus.Gauge
	reportSeconds prometheus.Histogram
	failures      prometheus.Counter
	partitions    prometheus.Gauge
	proxies       prometheus.Gauge
	implausible   prometheus.Counter
}

// NewMetrics registers the coordination metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		up: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cqlguard_coordination_up",
			Help: "1 while the last report to Redis succeeded, 0 while limits are local (coordination.fallback)."}),
		reportSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cqlguard_coordination_report_seconds",
			Help:    "Time of a report to Redis: one pipelined round trip.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1}}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "cqlguard_coordination_report_failures_total",
			Help: "Reports to Redis that failed or did not finish within coordination.sync_interval."}),
		partitions: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cqlguard_coordination_reported_partitions",
			Help: "Partitions the last report carried."}),
		proxies: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cqlguard_coordination_proxies",
			Help: "Proxies seen reporting in the last 3 seconds, this one included."}),
		implausible: prometheus.NewCounter(prometheus.CounterOpts{Name: "cqlguard_coordination_implausible_counts_total",
			Help: "Partitions whose counts in Redis no fleet could have written (negative, not a number, under this proxy's report or over what the proxies seen could offer); each fails its report."}),
	}
	if reg != nil {
		reg.MustRegister(m.up, m.reportSeconds, m.failures, m.partitions, m.proxies, m.implausible)
	}
	return m
}
