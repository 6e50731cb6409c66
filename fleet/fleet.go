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
// its key, and counted in one key per interval (a bucket, numbered from the
// Unix epoch), which expires by itself a few seconds later; the proxies'
// clocks are assumed to agree to within a small part of an interval (NTP),
// and every proxy of a fleet has the same interval. A sorted set holds when
// each proxy last reported, so that each knows how many share the limits.
//
// A report that fails ends nothing at once: its counts go with the next
// one, and shares keep their value for a hold time (three seconds, or three
// intervals if longer) after the last report that succeeded. Once Redis has
// been silent for that long, each proxy limits alone: a hot partition at
// its limit's part for this proxy of what this proxy is offered, the whole
// limit (fallback local) or the limit divided by the most proxies seen over
// the last ten seconds (fallback share), through the same shares, so that
// the local Limiter, kept under its limit while coordinated, releases no
// burst; other partitions with the local Limiter. When Redis answers again
// without the counts it held, the buckets it lost are taken at each
// partition's last known rate. A failed or slow report never holds up a
// request.
//
// Redis is trusted with the limits' accuracy, not with the proxy's memory
// or availability: its replies are bounded before they are allocated
// (NewDialer), and a count that no fleet could have written fails the
// report as if Redis could not be reached.
//
// The package knows Redis, tokens and labels; not CQL, tables or sockets
// to clients.
//
// The feature has one name in the code, fleet: this package, the request
// path's half (ratelimit.Fleet) and the proxy's glue (proxy/fleet.go).
// What users see calls it coordination, and keeps that name: the
// configuration's coordination section (config.CoordinationConfig, which
// mirrors the file), the cqlguard_coordination_* metrics and the log lines
// saying coordination was lost or restored.
package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
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
	// Redial, when not nil, returns a new client of the same Redis. While
	// coordination is lost, each report that fails other than by a
	// timeout replaces the client with one from Redial (closing the old),
	// so that the next report dials Redis again: a go-redis client whose
	// dials failed tries again only once a second, and a fleet whose
	// fallback admits more than the limit would go on admitting it for
	// that long after Redis is back.
	Redial func() (redis.UniversalClient, error)
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

// proxiesMemory is how long a count of the fleet's proxies is remembered:
// fallback share divides the limits by the most counted over it, so that a
// Redis that lost its set of proxies, or the first reports after it comes
// back, do not leave the limits divided by too few.
const proxiesMemory = 10 * time.Second

// minHold is the least time shares keep their value after the last report
// that succeeded; Config.Interval's triple when longer. Until then reports
// that fail, a loaded host's late one say, end nothing: coordination is
// lost only when Redis stays silent for as long.
const minHold = 3 * time.Second

// holdFor returns how long shares keep their value after the last report
// that succeeded, at interval.
func holdFor(interval time.Duration) time.Duration { return max(minHold, 3*interval) }

// ReportTimeout is how long a report at interval may take, half the time
// shares hold: on a host whose cores are busy, a round trip to a Redis on
// loopback can take several intervals, and a report that gave up after one
// would fail again and again until coordination was lost, though Redis
// answers. Reports run one after another, so a slow one delays the next
// and never piles up; the request path does not wait on any.
func ReportTimeout(interval time.Duration) time.Duration { return holdFor(interval) / 2 }

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

	// window is the buckets a rate is read from: a second of them.
	window int64
	hold   time.Duration

	up bool
	// lastOK is when a report last succeeded; zero before the first.
	lastOK time.Time
	// from is the start of the time the next report's counts cover: the
	// last report, or an earlier one whose counts a failure gave back.
	from time.Time
	// lost says that counts were dropped since the last report that
	// succeeded, so that Redis does not hold them.
	lost bool
	// oldest is when the proxy that reported least recently last
	// reported, in Unix milliseconds, as the last report found it; 0 when
	// unknown.
	oldest int64
	// since is the first bucket whose counts Redis holds in full: the
	// window's older buckets are taken at each partition's last rate.
	since int64
	// proxies is the proxies the last report counted; seen the most
	// counted in each second of the last proxiesMemory.
	proxies int
	seen    [proxiesMemory / time.Second]struct {
		sec int64
		n   int
	}

	entries []ratelimit.FleetEntry
	incr    []added
	counts  []*redis.SliceCmd
	rates   []float64
	parts   []part
	keyBuf  []byte
	keyArgs []string
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
		window:  max(2, int64(math.Round(float64(time.Second)/float64(cfg.Interval)))),
		hold:    holdFor(cfg.Interval),
		up:      true, // so that the first failure is logged
		proxies: 1,
	}
}

// Run reports every interval until ctx is done, then closes the client.
// A report that does not finish within ReportTimeout is abandoned, and its
// counts go with the next one.
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
	ctx, cancel := context.WithTimeout(ctx, ReportTimeout(r.cfg.Interval))
	defer cancel()
	start := time.Now()
	now := r.cfg.Now()
	from := r.from
	if from.IsZero() || !from.Before(now) {
		from = now.Add(-r.cfg.Interval)
	}
	// A partition is reported once its rate here reaches a twentieth of
	// its share of the limit: what the fleet's proxies do not report of a
	// partition is then at most a twentieth of its limit, and admitted on
	// top of it.
	interval, proxies := r.cfg.Interval.Seconds(), r.proxies
	hot := func(limit uint32) uint32 {
		return max(1, uint32(float64(limit)*interval/float64(20*proxies)))
	}
	r.entries = r.fleet.Collect(r.entries[:0], now.UnixNano(), hot, r.cfg.MaxPartitions)
	r.m.partitions.Set(float64(len(r.entries)))
	err := r.report(ctx, from, now)
	r.m.reportSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		r.failed(err, from, now)
		return
	}
	r.from = now
	r.lastOK = now
	if !r.up {
		r.log.Info().Int("proxies", r.proxies).Msg("coordination restored: limits hold for the fleet")
	}
	r.up = true
	r.m.up.Set(1)
	r.fleet.SetDivisor(1)
}

// failed follows a report that failed with err, whose counts covered from
// to now. The counts go with the next report, unless the report timed out
// or they would make it cover more than the hold time. Shares keep their value for the hold
// time after the last report that succeeded; past it, coordination is
// lost, and each hot partition is admitted at its limit's part for this
// proxy (the whole limit, or its share under fallback share) of what this
// proxy is offered: the local Limiter, which the shares kept under its
// limit, then holds no burst to let through.
func (r *Reporter) failed(err error, from, now time.Time) {
	r.m.failures.Inc()
	// A report that timed out may have been carried out all the same, its
	// reply late: its counts are not sent again, and, lost or not, the
	// window is read at the last rates until the buckets after it fill.
	if !timedOut(err) && now.Sub(from) < r.hold {
		for _, e := range r.entries {
			r.fleet.Return(e)
		}
		r.from = from
	} else {
		r.from, r.lost = now, true
	}
	if !r.lastOK.IsZero() && now.Sub(r.lastOK) < r.hold {
		return
	}
	if r.up {
		r.log.Warn().Err(err).Bool("share", r.cfg.Share).Msg("coordination lost: limits are local until Redis answers")
	}
	r.up = false
	r.m.up.Set(0)
	divisor := 1
	if r.cfg.Share {
		divisor = r.mostProxies(now)
		r.fleet.SetDivisor(uint32(divisor))
	}
	if r.cfg.Redial != nil && !timedOut(err) {
		if c, err := r.cfg.Redial(); err == nil {
			r.cfg.Client.Close()
			r.cfg.Client = c
		}
	}
	span := now.Sub(from).Seconds()
	// From when the report failed, not from when it began: one that failed
	// by its timeout began that long ago, and shares dated from then would
	// have lapsed already, leaving the local limiters, full, to let a burst
	// through until the next. They hold until the next report has failed
	// too, however long it takes.
	until := r.cfg.Now().Add(ReportTimeout(r.cfg.Interval) + 2*r.cfg.Interval).UnixNano()
	for _, e := range r.entries {
		own := float64(e.Hits) / span
		r.fleet.Set(e, share(float64(e.Limit)/float64(divisor), own), until)
	}
}

// timedOut reports whether err is a report's timeout, or a read's or
// write's: Redis was reached, and the client's connections are dialled
// again as needed, without Redial.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// share is the part of rate to admit to keep it within limit.
func share(limit, rate float64) float64 {
	if rate > limit {
		return limit / rate
	}
	return 1
}

// mostProxies returns the most proxies counted in a second of the last
// proxiesMemory, at least 1.
func (r *Reporter) mostProxies(now time.Time) int {
	n := 1
	for _, s := range r.seen {
		if now.Unix()-s.sec < int64(len(r.seen)) {
			n = max(n, s.n)
		}
	}
	return n
}

// bucket returns the bucket of the counts of time t: buckets are an
// interval long, numbered from the Unix epoch, the same for every proxy
// of a fleet (which share one interval).
func (r *Reporter) bucket(t time.Time) int64 {
	return t.UnixNano() / int64(r.cfg.Interval)
}

// report reports the counts of r.entries, offered from from to now, and
// sets their shares.
//
// The counts go to the bucket of the middle of the time they cover, and a
// partition's rate is read from the second of buckets that ends two
// buckets before now's: each proxy has put one report's counts in each of
// them, and every proxy has reported (at least half an interval ago) all
// it will put in them, whatever the phase of its reports in the interval.
// A window that also took the latest buckets would hold more or less than
// a second of some proxies' counts, depending on whether they had reported
// yet in the current one, and err by up to an interval's worth.
func (r *Reporter) report(ctx context.Context, from, now time.Time) error {
	last := r.bucket(now) - 2
	// A proxy whose reports run late (a busy host's) has not yet put its
	// counts in the buckets since its last report: the window ends before
	// the last report of the proxy that reported least recently, as the
	// last report here found it, unless that is over a report's timeout
	// and an interval ago (a proxy that stopped).
	if r.oldest > 0 {
		last = min(last, max(r.bucket(time.UnixMilli(r.oldest))-1, last-r.lag()))
	}
	first := last - r.window + 1
	// Counts of a report late by more than an interval (a loaded host's,
	// or those a failed report handed on) are spread over the buckets of
	// the time they cover, from the oldest a window may still read.
	spread := r.spread(from, now, first-1)
	pipe := r.cfg.Client.Pipeline()
	hb := r.queueHeartbeat(ctx, pipe, now)
	r.incr, r.counts = r.incr[:0], r.counts[:0]
	for i, e := range r.entries {
		r.addCounts(ctx, pipe, i, e, spread)
		args := r.keyArgs[:0]
		for b := first; b <= last; b++ {
			args = append(args, r.key(e, b))
		}
		r.keyArgs = args
		r.counts = append(r.counts, pipe.MGet(ctx, args...))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("reporting %d partitions: %w", len(r.entries), err)
	}
	r.proxiesSeen(hb, now)
	// This proxy's counts are missing from Redis when it dropped some, or
	// when Redis no longer knew it though it reported within the window
	// that keeps it: a Redis that lost its data, restarted empty say. The
	// buckets before this report's are then read at each partition's last
	// known rate, so that the shares go on from it rather than from an
	// empty history.
	since := r.since
	if r.lost || (hb.joined.Val() == 1 && !r.lastOK.IsZero() && now.Sub(r.lastOK) < proxiesWindow) {
		// Other proxies' counts of the buckets until now may be missing
		// too, until they have reported again.
		since = r.bucket(now) - 1
	}
	if err := r.rate(first, since, now.Sub(from)); err != nil {
		return err
	}
	r.since, r.lost = since, false
	// Past the hold time, until the report that fails after it sets the
	// shares of a proxy alone: shares that lapsed first would leave the
	// local limiters, full, to let their burst through. That report may
	// take its whole timeout and, on a busy host, begin well after the hold
	// (TestScaleOutBusyHost saw a fleet admit 3,516 in a second, over its
	// fallback's 3,000, with a report's timeout and two intervals of
	// slack): another hold of it. A reporter that cannot run for that long leaves the fleet's last
	// shares in force meanwhile.
	until := now.Add(2*r.hold + ReportTimeout(r.cfg.Interval) + 2*r.cfg.Interval).UnixNano()
	for i, e := range r.entries {
		r.fleet.Remember(e, r.rates[i])
		r.fleet.Set(e, share(float64(e.Limit), r.rates[i]), until)
	}
	return nil
}

// heartbeat is what a report asks of the set of proxies: whether this
// proxy joined it (ZADD added it: Redis no longer knew it), how many
// reported within proxiesWindow, and which reported least recently.
type heartbeat struct {
	joined *redis.IntCmd
	count  *redis.IntCmd
	oldest *redis.ZSliceCmd
	ms     int64
}

// queueHeartbeat queues on pipe this proxy's report in the set of proxies, at
// now, and the questions of heartbeat.
func (r *Reporter) queueHeartbeat(ctx context.Context, pipe redis.Pipeliner, now time.Time) heartbeat {
	members := r.cfg.KeyPrefix + "proxies"
	ms := now.UnixMilli()
	hb := heartbeat{ms: ms}
	hb.joined = pipe.ZAdd(ctx, members, redis.Z{Score: float64(ms), Member: r.id})
	pipe.ZRemRangeByScore(ctx, members, "-inf", strconv.FormatInt(ms-proxiesWindow.Milliseconds(), 10))
	// A proxy's score is when it reported: one from the future is none a
	// proxy wrote, and would stay in the set.
	hb.count = pipe.ZCount(ctx, members, "-inf", strconv.FormatInt(ms+proxiesWindow.Milliseconds(), 10))
	hb.oldest = pipe.ZRangeWithScores(ctx, members, 0, 0)
	pipe.PExpire(ctx, members, 2*proxiesWindow)
	return hb
}

// proxiesSeen takes in what the heartbeat hb found, at now.
func (r *Reporter) proxiesSeen(hb heartbeat, now time.Time) {
	if z := hb.oldest.Val(); len(z) == 1 && z[0].Score > 0 && z[0].Score <= float64(hb.ms) {
		r.oldest = int64(z[0].Score)
	}
	if n, err := hb.count.Result(); err == nil && n > 0 {
		r.proxies = int(n)
		r.m.proxies.Set(float64(n))
		s := &r.seen[now.Unix()%int64(len(r.seen))]
		if s.sec != now.Unix() {
			s.sec, s.n = now.Unix(), 0
		}
		s.n = max(s.n, int(n))
	}
}

// addCounts queues on pipe the counts of e, the i-th entry reported, into
// the buckets of spread.
func (r *Reporter) addCounts(ctx context.Context, pipe redis.Pipeliner, i int, e ratelimit.FleetEntry, spread []part) {
	// Rounded from the counts to the end of each part, so that the parts
	// add up to the counts, less what went before oldest.
	done, before := 0.0, int64(0)
	for _, part := range spread {
		done += part.weight
		upto := int64(math.Round(float64(e.Hits) * min(done, 1)))
		n := upto - before
		before = upto
		if n == 0 {
			continue
		}
		k := r.key(e, part.bucket)
		r.incr = append(r.incr, added{pipe.IncrBy(ctx, k, n), n, i, part.bucket})
		// Kept for as long as a window, held back as far as it may be, can
		// read it, and a few intervals more.
		pipe.PExpire(ctx, k, time.Duration(r.window+r.lag()+3)*r.cfg.Interval)
	}
}

// rate sets rates to the fleet's rate of each partition reported, from its
// counts in the window's buckets, the first of which is first, and for
// buckets before since, its last known rate (or, if none is known, this
// proxy's rate over span times the proxies seen). Counts that no fleet
// could have written fail the report, as if Redis could not be reached,
// rather than have the fleet refuse a partition nearly whole (a huge count)
// or admit it as if uncoordinated (a negative one): a count under 0, or not
// a number, under what this report just added to it (a count only grows),
// or over what the proxies seen could have reported in a bucket (each,
// what it was offered over twice the hold time: a report carries counts of
// at most the hold time and a report's timeout).
func (r *Reporter) rate(first, since int64, span time.Duration) error {
	most := int64(float64(2*r.proxies*maxProxyRate) * r.hold.Seconds())
	var bad error
	implausible := func(e ratelimit.FleetEntry, b int64, v any) {
		r.m.implausible.Inc()
		if bad == nil {
			bad = fmt.Errorf("counts no fleet of %d proxies could have written: %s is %v, this report added %d in all",
				r.proxies, r.key(e, b), v, e.Hits)
		}
	}
	for _, a := range r.incr {
		if cur, err := a.cmd.Result(); err == nil && (cur < a.n || cur > most) {
			implausible(r.entries[a.entry], a.bucket, cur)
		}
	}
	r.rates = r.rates[:0]
	for i, e := range r.entries {
		// A partition that no proxy reported in the window's first
		// buckets turned hot since: its rate is over the buckets from the
		// first that holds a count, not over a second it was not hot for.
		sum, missing, empty := 0.0, 0, 0
		for j, v := range r.counts[i].Val() {
			b := first + int64(j)
			var n int64
			if v != nil {
				s, ok := v.(string)
				var err error
				if n, err = strconv.ParseInt(s, 10, 64); !ok || err != nil || n < 0 || n > most {
					implausible(e, b, v)
					continue
				}
			}
			switch {
			case b < since:
				// What Redis holds of it came after it lost the rest.
				missing++
			case v == nil && sum == 0 && missing == 0:
				empty++
			default:
				sum += float64(n)
			}
		}
		if missing > 0 {
			last := float64(e.Rate)
			if last == 0 {
				last = float64(e.Hits) / span.Seconds() * float64(r.proxies)
			}
			sum += last * float64(missing) * r.cfg.Interval.Seconds()
		}
		rate := 0.0
		if empty < int(r.window) {
			rate = sum / (float64(int(r.window)-empty) * r.cfg.Interval.Seconds())
		}
		r.rates = append(r.rates, rate)
	}
	return bad
}

// lag returns the most buckets a window is held back for a proxy whose
// reports run late: a report's timeout and an interval.
func (r *Reporter) lag() int64 {
	return int64((ReportTimeout(r.cfg.Interval) + r.cfg.Interval) / r.cfg.Interval)
}

// added is an INCRBY of a report: n added to the count of entry's
// partition in bucket.
type added struct {
	cmd    *redis.IntCmd
	n      int64
	entry  int
	bucket int64
}

// part is a bucket of a report's counts, and the part of them it gets.
type part struct {
	bucket int64
	weight float64
}

// spread returns the buckets a report's counts, of the time from from to
// now, go to, none before oldest: the bucket of the middle of that time,
// when it is at most two intervals long (each proxy then puts one report's
// counts in each bucket, whatever the phase of its reports), or else the
// buckets it covers, each in proportion to the time it covers of them.
func (r *Reporter) spread(from, now time.Time, oldest int64) []part {
	parts := r.parts[:0]
	if now.Sub(from) <= 2*r.cfg.Interval {
		r.parts = append(parts, part{bucket: max(r.bucket(from.Add(now.Sub(from)/2)), oldest), weight: 1})
		return r.parts
	}
	iv := int64(r.cfg.Interval)
	a, b := from.UnixNano(), now.UnixNano()
	for k := max(a, oldest*iv) / iv; k*iv < b; k++ {
		lo, hi := max(a, k*iv), min(b, (k+1)*iv)
		parts = append(parts, part{bucket: k, weight: float64(hi-lo) / float64(b-a)})
	}
	r.parts = parts
	return parts
}

// key returns the key of a partition's counts in bucket b:
// prefix{label:token}:bucket, the braces keeping a partition's keys in one
// Redis Cluster slot.
func (r *Reporter) key(e ratelimit.FleetEntry, b int64) string {
	k := append(r.keyBuf[:0], r.cfg.KeyPrefix...)
	k = append(k, '{')
	k = strconv.AppendUint(k, uint64(e.Label), 16)
	k = append(k, ':')
	k = strconv.AppendInt(k, e.Token, 16)
	k = append(k, "}:"...)
	k = strconv.AppendInt(k, b, 10)
	r.keyBuf = k
	return string(k)
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
