package fleet

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/ratelimit"
	"github.com/cqlguard/cqlguard/test/redistest"
)

// simProxy is one proxy of a simulated fleet: a local limiter, its Fleet
// and its Reporter, on a clock the test moves.
type simProxy struct {
	lim   *ratelimit.Limiter
	fleet *ratelimit.Fleet
	rep   *Reporter
	m     *Metrics
}

// simulation runs a fleet of proxies in front of one hot partition, on a
// simulated clock, reporting to a real Redis.
type simulation struct {
	algorithm   string
	limit       uint32
	offered     float64   // operations per second over the fleet, V
	split       []float64 // each proxy's part of the offered load
	seconds     int
	coordinated bool
	share       bool // fallback share rather than local
	// poisonCur and poisonPrev, when not empty, are what another writer
	// sets the partition's counts of this second and the last one to
	// before every report.
	poisonCur, poisonPrev string
	// check, when not nil, looks at each proxy's metrics at the end.
	check func(t *testing.T, m *Metrics)
	// phases, when not nil, is when in its 100 ms each proxy reports, in
	// milliseconds; otherwise each has its own.
	phases []int
	// at, when not nil, is called with the reporters at the start of
	// every millisecond.
	at func(ms int, reps []*Reporter)
}

// run returns the operations the fleet admitted in each second.
func (s simulation) run(t *testing.T, client func() redis.UniversalClient) []int {
	t.Helper()
	start := time.Unix(1_900_000_000, 0)
	if s.coordinated {
		// A fleet of its own: keys of another run do not count.
		start = start.Add(time.Duration(time.Now().UnixNano() % int64(1000*time.Hour)).Truncate(time.Second))
	}
	now := start
	clock := func() time.Time { return now }
	prefix := fmt.Sprintf("test:%s:%d:", t.Name(), time.Now().UnixNano())
	proxies := make([]simProxy, len(s.split))
	for i := range proxies {
		lim, err := ratelimit.New(ratelimit.Config{Algorithm: s.algorithm, Clock: func() int64 { return now.UnixNano() }, MemoryBytes: 1 << 16, Shards: 1, Seed: uint64(i + 1)})
		if err != nil {
			t.Fatal(err)
		}
		p := simProxy{lim: lim, fleet: ratelimit.NewFleet(1024), m: NewMetrics(nil)}
		if s.coordinated {
			redial := func() (redis.UniversalClient, error) { return client(), nil }
			p.rep = New(Config{Client: client(), Redial: redial, KeyPrefix: prefix, Interval: 100 * time.Millisecond, Share: s.share, Now: clock}, p.fleet, zerolog.Nop(), p.m)
			t.Cleanup(func() { p.rep.cfg.Client.Close() })
		}
		proxies[i] = p
	}
	var writer redis.UniversalClient
	if s.poisonCur != "" || s.poisonPrev != "" {
		writer = client()
		t.Cleanup(func() { writer.Close() })
	}
	poison := func(r *Reporter) {
		// The buckets the next report writes to and reads, as poisonCur
		// and poisonPrev.
		e, b := ratelimit.FleetEntry{Token: 42, Label: 7}, r.bucket(now)
		for i := b - r.window - 1; i <= b; i++ {
			v := s.poisonPrev
			if i >= b-1 {
				v = s.poisonCur
			}
			if v != "" {
				if err := writer.Set(context.Background(), r.key(e, i), v, 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	const step = time.Millisecond
	owed := make([]float64, len(proxies))
	admitted := make([]int, s.seconds)
	label := ratelimit.Label(7)
	var reps []*Reporter
	for _, p := range proxies {
		reps = append(reps, p.rep)
	}
	ops := uint64(0)
	for tick := 0; tick < s.seconds*1000; tick++ {
		now = start.Add(time.Duration(tick) * step)
		if s.at != nil {
			s.at(tick, reps)
		}
		for i := range proxies {
			p := &proxies[i]
			owed[i] += s.offered * s.split[i] * step.Seconds()
			for ; owed[i] >= 1; owed[i]-- {
				// Spread over the millisecond, as a real clock reads:
				// Admit takes a partition in at readings it picks by
				// their bits.
				ops++
				ts := now.UnixNano() + int64(ops*0x9E3779B97F4A7C15>>40%uint64(step))
				// As the proxy decides (decide.go).
				ok, limit := true, s.limit
				if s.coordinated {
					ok, limit = p.fleet.Decide(ts, 42, label, s.limit)
				}
				if ok {
					ok = p.lim.AllowAt(ts, 42, label, limit) != ratelimit.Reject
				}
				if ok {
					admitted[tick/1000]++
				}
			}
			phase := 99 - i*37%100
			if s.phases != nil {
				phase = s.phases[i]
			}
			if s.coordinated && tick%100 == phase {
				if writer != nil {
					poison(p.rep)
				}
				p.rep.Report(context.Background())
			}
		}
	}
	if s.check != nil {
		for _, p := range proxies {
			s.check(t, p.m)
		}
	}
	return admitted
}

// meanAfter is the mean of xs past the first skip.
func meanAfter(xs []int, skip int) float64 {
	sum := 0
	for _, x := range xs[skip:] {
		sum += x
	}
	return float64(sum) / float64(len(xs)-skip)
}

// redisClient starts a Redis and returns a function that makes clients of
// it, which read replies through the dialer the proxy uses.
func redisClient(t *testing.T) func() redis.UniversalClient {
	addr := redistest.Start(t)
	return func() redis.UniversalClient {
		return redis.NewClient(&redis.Options{Addr: addr, Dialer: NewDialer(time.Second, nil)})
	}
}

// TestFleetAdmitsTheLimit: three proxies, the load of one hot partition,
// 5 times its limit, split evenly or 80/10/10, on a simulated clock: with
// coordination the fleet admits the limit (token bucket: every second
// after the first two within 10%; scylla: the mean within 10% of its curve,
// the limit at that load); without it, each proxy admits up to the limit.
func TestFleetAdmitsTheLimit(t *testing.T) {
	client := redisClient(t)
	for _, alg := range []string{ratelimit.AlgorithmTokenBucket, ratelimit.AlgorithmScylla} {
		for _, split := range [][]float64{{1.0 / 3, 1.0 / 3, 1.0 / 3}, {0.8, 0.1, 0.1}} {
			name := fmt.Sprintf("%s/%v", alg, split)
			t.Run(name, func(t *testing.T) {
				const limit = 200
				sim := simulation{algorithm: alg, limit: limit, offered: 5 * limit, split: split, seconds: 8, coordinated: true}
				got := sim.run(t, client)
				// At five times the limit, ScyllaDB's curve is the limit
				// (FACTS.md section 1), as the token bucket's is.
				want := float64(limit)
				t.Logf("admitted per second %v", got)
				for sec, n := range got[2:] {
					if alg == ratelimit.AlgorithmTokenBucket && math.Abs(float64(n)-limit) > 0.1*limit {
						t.Errorf("second %d: %d admitted, want %d ±10%%", sec+2, n, limit)
					}
				}
				if m := meanAfter(got, 2); math.Abs(m-want) > 0.1*want {
					t.Errorf("mean %.1f admitted a second, want %.1f ±10%%", m, want)
				}
				uncoordinated := sim
				uncoordinated.coordinated = false
				free := meanAfter(uncoordinated.run(t, nil), 2)
				if want := float64(limit) * float64(countOver(split, limit, 5*limit)); free < 0.9*want {
					t.Errorf("without coordination %.1f admitted a second, want about %.0f", free, want)
				}
			})
		}
	}
}

// countOver is how many limits a fleet without coordination admits: each
// proxy admits its load, up to the limit.
func countOver(split []float64, limit, offered float64) float64 {
	n := 0.0
	for _, s := range split {
		n += min(s*offered, limit) / limit
	}
	return n
}

// TestAbsurdCounts: another writer sets a hot partition's counts in Redis
// to what no fleet could have counted, before every report of three
// proxies offered 5 times its limit: huge counts would have the fleet
// refuse it nearly whole, negative ones admit it as if uncoordinated (three
// times the limit). The proxies fall back as when Redis cannot be reached
// (here sharing the limit), count the counts in a metric, and the fleet
// admits about the limit.
func TestAbsurdCounts(t *testing.T) {
	client := redisClient(t)
	for _, tc := range []struct{ name, cur, prev string }{
		{"huge", "1000000000000000", "1000000000000000"},
		{"negative", "-1000000", "-1000000"},
		{"not a number", "", "many"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const limit = 200
			got := simulation{algorithm: ratelimit.AlgorithmTokenBucket, limit: limit, offered: 5 * limit, split: []float64{1.0 / 3, 1.0 / 3, 1.0 / 3},
				seconds: 5, coordinated: true, share: true, poisonCur: tc.cur, poisonPrev: tc.prev,
				check: func(t *testing.T, m *Metrics) {
					if n := testutil.ToFloat64(m.implausible); n < 40 || testutil.ToFloat64(m.up) != 0 {
						t.Errorf("%v implausible counts, up %v: want one a report (50) and down", n, testutil.ToFloat64(m.up))
					}
				}}.run(t, client)
			t.Logf("admitted per second %v", got)
			if m := meanAfter(got, 2); m < 0.5*limit || m > 1.5*limit {
				t.Errorf("mean %.1f admitted a second, want about %d", m, limit)
			}
		})
	}
}

// TestProxiesFromTheFuture: members of the proxies' set dated in the
// future, which no proxy writes and which would stay in the set, are not
// counted as proxies (that divide the limits under fallback share).
func TestProxiesFromTheFuture(t *testing.T) {
	addr := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: addr, Dialer: NewDialer(time.Second, nil)})
	defer c.Close()
	prefix := fmt.Sprintf("future:%d:", time.Now().UnixNano())
	future := float64(time.Now().Add(time.Hour).UnixMilli())
	for i := range 1000 {
		if err := c.ZAdd(context.Background(), prefix+"proxies", redis.Z{Score: future, Member: strconv.Itoa(i)}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	m := NewMetrics(prometheus.NewRegistry())
	r := New(Config{Client: c, KeyPrefix: prefix, Interval: 100 * time.Millisecond}, ratelimit.NewFleet(64), zerolog.Nop(), m)
	r.Report(context.Background())
	if up, n := testutil.ToFloat64(m.up), testutil.ToFloat64(m.proxies); up != 1 || n != 1 {
		t.Errorf("up %v, %v proxies seen, want up and 1", up, n)
	}
}

// aclUser is the ACL user docs/scale-out.md recommends, for the key
// prefix "cqlguard:": the fleet's commands on its own keys and nothing
// else (HELLO and AUTH are always allowed).
const aclUser = "ACL SETUSER cqlguard on >%s resetkeys ~cqlguard:* resetchannels -@all " +
	"+zadd +zremrangebyscore +zcount +zrange +pexpire +incrby +mget +cluster|slots"

// TestReporterACLUser: the ACL user of docs/scale-out.md reports to a
// Redis and to a Redis Cluster (ACL users are per node), and may touch no
// key outside the prefix nor run other commands.
func TestReporterACLUser(t *testing.T) {
	for _, tc := range []struct {
		name   string
		start  func(t testing.TB) []string
		client func(addrs []string, user, password string) redis.UniversalClient
	}{
		{"standalone", func(t testing.TB) []string { return []string{redistest.Start(t)} }, func(addrs []string, user, password string) redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: addrs[0], Username: user, Password: password, Dialer: NewDialer(time.Second, nil)})
		}},
		{"cluster", redistest.StartCluster, func(addrs []string, user, password string) redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, Username: user, Password: password, Dialer: NewDialer(time.Second, nil)})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrs := tc.start(t)
			ctx := context.Background()
			const password = "fleet-password"
			for _, a := range addrs {
				admin := redis.NewClient(&redis.Options{Addr: a})
				var args []any
				for _, f := range strings.Fields(fmt.Sprintf(aclUser, password)) {
					args = append(args, f)
				}
				if err := admin.Do(ctx, args...).Err(); err != nil {
					t.Fatalf("%s: %v", a, err)
				}
				admin.Close()
			}
			c := tc.client(addrs, "cqlguard", password)
			defer c.Close()
			f := ratelimit.NewFleet(4096)
			for tok := range 50 { // keys on every master of the cluster
				for range 100 {
					f.Admit(0, int64(tok), 7, 10)
				}
			}
			var log strings.Builder
			m := NewMetrics(prometheus.NewRegistry())
			r := New(Config{Client: c, KeyPrefix: "cqlguard:", Interval: 100 * time.Millisecond}, f, zerolog.New(&log), m)
			r.Report(ctx)
			if testutil.ToFloat64(m.up) != 1 || testutil.ToFloat64(m.partitions) != 50 {
				t.Fatalf("up %v, %v partitions reported; log:\n%s", testutil.ToFloat64(m.up), testutil.ToFloat64(m.partitions), log.String())
			}
			one := redis.NewClient(&redis.Options{Addr: addrs[0], Username: "cqlguard", Password: password})
			defer one.Close()
			for _, cmd := range [][]any{{"get", "other"}, {"set", "cqlguard:x", "1"}, {"del", "cqlguard:proxies"}, {"flushall"}, {"config", "get", "*"}} {
				if err := one.Do(ctx, cmd...).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
					t.Errorf("%v: %v, want NOPERM", cmd, err)
				}
			}
		})
	}
}

// TestReporterFallback: a Redis that stops answering ends coordination only
// once it has been silent for the hold time; the reporter then says so
// (metric, one log line), shares the limit when asked to, and picks up again
// once Redis answers.
func TestReporterFallback(t *testing.T) {
	addr := redistest.Start(t)
	var log strings.Builder
	f := ratelimit.NewFleet(64)
	m := NewMetrics(prometheus.NewRegistry())
	now := time.Now()
	r := New(Config{Client: redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond, Dialer: NewDialer(100*time.Millisecond, nil)}),
		KeyPrefix: "test:fallback:", Interval: 100 * time.Millisecond, Share: true, Now: func() time.Time { return now }}, f,
		zerolog.New(&log), m)
	defer r.cfg.Client.Close()
	ctx := context.Background()
	r.Report(ctx)
	if testutil.ToFloat64(m.up) != 1 {
		t.Fatalf("coordination not up: %s", log.String())
	}
	r.seen[now.Unix()%int64(len(r.seen))].n = 4 // as if three others had reported
	redistest.Stop(t, addr)
	now = now.Add(r.hold - time.Millisecond)
	r.Report(ctx)
	if testutil.ToFloat64(m.up) != 1 || f.LocalLimit(100) != 100 {
		t.Errorf("a report failed within the hold time: up %v, local limit %d, want up and 100", testutil.ToFloat64(m.up), f.LocalLimit(100))
	}
	now = now.Add(time.Millisecond)
	r.Report(ctx)
	if testutil.ToFloat64(m.up) != 0 || testutil.ToFloat64(m.failures) != 2 {
		t.Errorf("up %v, failures %v", testutil.ToFloat64(m.up), testutil.ToFloat64(m.failures))
	}
	if got := f.LocalLimit(100); got != 25 {
		t.Errorf("local limit while Redis is down: %d, want 25 (shared by 4)", got)
	}
	redistest.Restart(t, addr)
	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(m.up) != 1 && time.Now().Before(deadline) {
		now = now.Add(100 * time.Millisecond)
		r.Report(ctx)
	}
	if testutil.ToFloat64(m.up) != 1 || f.LocalLimit(100) != 100 {
		t.Errorf("not back: up %v, local limit %d", testutil.ToFloat64(m.up), f.LocalLimit(100))
	}
	if n := strings.Count(log.String(), "coordination lost"); n != 1 {
		t.Errorf("%d lines saying coordination was lost, want 1:\n%s", n, log.String())
	}
	if n := strings.Count(log.String(), "coordination restored"); n != 1 {
		t.Errorf("%d lines saying coordination was restored, want 1:\n%s", n, log.String())
	}
}

// TestScaleOutTable prints docs/scale-out.md's accuracy table:
// CQLGUARD_SCALEOUT=1 go test ./fleet -run ScaleOutTable -v.
func TestScaleOutTable(t *testing.T) {
	if os.Getenv("CQLGUARD_SCALEOUT") == "" {
		t.Skip("set CQLGUARD_SCALEOUT=1 to print the table")
	}
	client := redisClient(t)
	const limit = 1000
	t.Log("| algorithm | proxies | split | V/L | admitted/s, seconds 2-9 | of the curve | worst second | seconds to hold |")
	t.Log("| --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, alg := range []string{ratelimit.AlgorithmTokenBucket, ratelimit.AlgorithmScylla} {
		for _, n := range []int{2, 4, 8} {
			for _, skewed := range []bool{false, true} {
				split := make([]float64, n)
				for i := range split {
					split[i] = 1 / float64(n)
					if skewed {
						split[i] = 0.2 / float64(n-1)
					}
				}
				name := "even"
				if skewed {
					split[0] = 0.8
					name = "80% on one"
				}
				for _, vl := range []float64{0.5, 2, 10} {
					got := simulation{algorithm: alg, limit: limit, offered: vl * limit, split: split, seconds: 10, coordinated: true}.run(t, client)
					// Both curves are the offered rate up to the limit and
					// the limit from twice it on (FACTS.md section 1).
					want := min(vl, 1) * limit
					worst, hold := 0.0, -1
					for i, x := range got {
						dev := math.Abs(float64(x)-want) / want
						if i >= 2 {
							worst = max(worst, dev)
						}
						if dev > 0.1 {
							hold = -1
						} else if hold < 0 {
							hold = i
						}
					}
					t.Logf("| %s | %d | %s | %g | %.0f | %+.1f%% | %+.1f%% | %d |", alg, n, name, vl, meanAfter(got, 2), 100*(meanAfter(got, 2)-want)/want, 100*worst, hold)
				}
			}
		}
	}
}

// TestFleetOnRedisCluster: the fleet admits the limit through a
// three-master Redis Cluster, whose nodes hold different partitions' keys.
func TestFleetOnRedisCluster(t *testing.T) {
	addrs := redistest.StartCluster(t)
	client := func() redis.UniversalClient {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, Dialer: NewDialer(time.Second, nil)})
	}
	const limit = 200
	got := simulation{algorithm: ratelimit.AlgorithmTokenBucket, limit: limit, offered: 5 * limit, split: []float64{0.8, 0.1, 0.1}, seconds: 6, coordinated: true}.run(t, client)
	t.Logf("admitted per second %v", got)
	for sec, n := range got[2:] {
		if math.Abs(float64(n)-limit) > 0.1*limit {
			t.Errorf("second %d: %d admitted, want %d ±10%%", sec+2, n, limit)
		}
	}
}

// TestRedisCost prints what reporting costs Redis, for docs/scale-out.md:
// CQLGUARD_SCALEOUT=1 go test ./fleet -run RedisCost -v. Proxies report in
// real time, every 100 ms, each with its hot partitions all over the bar.
func TestRedisCost(t *testing.T) {
	if os.Getenv("CQLGUARD_SCALEOUT") == "" {
		t.Skip("set CQLGUARD_SCALEOUT=1 to print the figures")
	}
	addr := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	stat := func() (cmds, in, out float64) {
		info, err := admin.Info(context.Background(), "stats").Result()
		if err != nil {
			t.Fatal(err)
		}
		field := func(name string) float64 {
			for _, line := range strings.Split(info, "\r\n") {
				if v, ok := strings.CutPrefix(line, name+":"); ok {
					f, _ := strconv.ParseFloat(v, 64)
					return f
				}
			}
			return 0
		}
		return field("total_commands_processed"), field("total_net_input_bytes"), field("total_net_output_bytes")
	}
	t.Log("| proxies | hot partitions each | reported each | commands/s per proxy | bytes/s in per proxy | bytes/s out per proxy | total commands/s | report p50 | report p99 |")
	t.Log("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, tc := range []struct{ proxies, hot, max int }{{1, 1, 1000}, {1, 100, 1000}, {1, 10000, 1000}, {1, 10000, 10000}, {100, 100, 1000}} {
		prefix := fmt.Sprintf("cost:%d:", time.Now().UnixNano())
		type sim struct {
			f *ratelimit.Fleet
			r *Reporter
		}
		sims := make([]sim, tc.proxies)
		for i := range sims {
			f := ratelimit.NewFleet(2 * tc.hot)
			sims[i] = sim{f, New(Config{Client: redis.NewClient(&redis.Options{Addr: addr}), KeyPrefix: prefix, Interval: 100 * time.Millisecond, MaxPartitions: tc.max}, f, zerolog.Nop(), NewMetrics(nil))}
			defer sims[i].r.cfg.Client.Close()
		}
		c0, i0, o0 := stat()
		start := time.Now()
		var took []time.Duration
		const rounds = 30
		for range rounds {
			next := time.Now().Add(100 * time.Millisecond)
			for _, s := range sims {
				for tok := range int64(tc.hot) {
					for range 3 { // tracked within a few operations
						s.f.Admit(time.Now().UnixNano()&^(7<<10), tok, 1, 100)
					}
				}
				t0 := time.Now()
				s.r.Report(context.Background())
				took = append(took, time.Since(t0))
			}
			time.Sleep(time.Until(next))
		}
		secs := time.Since(start).Seconds()
		c1, i1, o1 := stat()
		n := float64(tc.proxies)
		slices.Sort(took)
		t.Logf("| %d | %d | %d | %.0f | %.0f | %.0f | %.0f | %v | %v |", tc.proxies, tc.hot, min(tc.hot, tc.max),
			(c1-c0)/secs/n, (i1-i0)/secs/n, (o1-o0)/secs/n, (c1-c0)/secs,
			took[len(took)/2].Round(10*time.Microsecond), took[len(took)*99/100].Round(10*time.Microsecond))
	}
}

// TestReportFailsOnAnyCommand: a command that fails in the middle of a
// report (here a key of the wrong type; a Redis Cluster master down would
// do the same) fails the report, even behind a partition new this second,
// whose missing count for the last second is no failure.
func TestReportFailsOnAnyCommand(t *testing.T) {
	addr := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	now := time.Unix(1_900_000_000, 500_000_000)
	f := ratelimit.NewFleet(64)
	m := NewMetrics(prometheus.NewRegistry())
	r := New(Config{Client: c, KeyPrefix: fmt.Sprintf("fail:%d:", time.Now().UnixNano()), Interval: 100 * time.Millisecond,
		Now: func() time.Time { return now }}, f, zerolog.Nop(), m)
	for tok, hits := range []int{300, 200, 100} {
		for range hits {
			f.Admit(0, int64(tok), 7, 10)
		}
	}
	// The bucket of the middle of the interval the first report covers.
	bad := r.key(ratelimit.FleetEntry{Token: 1, Label: 7}, r.bucket(now.Add(-50*time.Millisecond)))
	if err := c.RPush(context.Background(), bad, "x").Err(); err != nil {
		t.Fatal(err)
	}
	r.Report(context.Background())
	if testutil.ToFloat64(m.up) != 0 || testutil.ToFloat64(m.failures) != 1 {
		t.Errorf("up %v, failures %v: a report with a failed command counted as a success", testutil.ToFloat64(m.up), testutil.ToFloat64(m.failures))
	}
}

// TestRateOverAnyPhases: the fleet admits a partition's limit whatever when
// in the interval each proxy reports. Counts keyed by the second they were
// reported in, read over the current second and part of the last, read the
// rate high by about 0.1·W − φ of a second for a report φ seconds into its
// interval, W the part of the traffic from proxies that reported before it
// in theirs: a lone proxy reporting 31 to 75 ms into its interval admitted
// 0.935 to 0.976 of the limit, as that predicts. Here fleets of 1 to 8
// proxies at random phases and splits, offered 5 times the limit: every
// second from the second within 2% of it, their mean within 0.5%.
func TestRateOverAnyPhases(t *testing.T) {
	client := redisClient(t)
	rng := rand.New(rand.NewPCG(1, 2))
	const limit = 1000
	for run := range 16 {
		n := 1 + run%8
		phases, split, sum := make([]int, n), make([]float64, n), 0.0
		for i := range n {
			phases[i], split[i] = rng.IntN(100), 0.05+rng.Float64()
			sum += split[i]
		}
		for i := range split {
			split[i] /= sum
		}
		alg := ratelimit.AlgorithmTokenBucket
		if run%2 == 1 {
			alg = ratelimit.AlgorithmScylla
		}
		got := simulation{algorithm: alg, limit: limit, offered: 5 * limit, split: split, phases: phases, seconds: 8, coordinated: true}.run(t, client)
		t.Logf("%s, phases %v: admitted per second %v", alg, phases, got)
		for sec, x := range got[2:] {
			if math.Abs(float64(x)-limit) > 0.02*limit {
				t.Errorf("%s, phases %v, split %.2f: second %d admitted %d, want %d ±2%%", alg, phases, split, sec+2, x, limit)
			}
		}
		if m := meanAfter(got, 2); math.Abs(m-limit) > 0.005*limit {
			t.Errorf("%s, phases %v, split %.2f: mean %.1f admitted a second, want %d ±0.5%%", alg, phases, split, m, limit)
		}
	}
}

// TestFleetOutage: three proxies offered 5 times a partition's limit L,
// evenly; Redis is stopped under load after 4 s and started again, empty,
// after 8 s. While it is down no second admits more than 10% over the
// fallback's level (L on each proxy, or L in all with fallback share): the
// local Limiters, kept under their limit by the shares, hold no burst.
// From its return no second admits more than 1.2 L: the buckets it lost
// are taken at the rate the proxies knew last.
func TestFleetOutage(t *testing.T) {
	t.Parallel()
	addr := redistest.Start(t)
	client := func() redis.UniversalClient {
		return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: 50 * time.Millisecond, Dialer: NewDialer(50*time.Millisecond, nil)})
	}
	const limit, stop, start = 200, 4, 8
	for _, alg := range []string{ratelimit.AlgorithmTokenBucket, ratelimit.AlgorithmScylla} {
		for _, share := range []bool{false, true} {
			level := 3.0 * limit
			if share {
				level = limit
			}
			got := simulation{algorithm: alg, limit: limit, offered: 5 * limit, split: []float64{1.0 / 3, 1.0 / 3, 1.0 / 3}, seconds: 12, coordinated: true, share: share,
				at: func(ms int, reps []*Reporter) {
					switch ms {
					case stop * 1000:
						redistest.Stop(t, addr)
					case start * 1000:
						redistest.Restart(t, addr)
					}
				}}.run(t, client)
			t.Logf("%s, share %v: admitted per second %v (Redis down from second %d to %d)", alg, share, got, stop, start)
			for sec, x := range got {
				switch {
				case sec >= 2 && sec < stop && math.Abs(float64(x)-limit) > 0.05*limit:
					t.Errorf("second %d, coordinated: %d admitted, want %d ±5%%", sec, x, limit)
				case sec >= stop && sec < start && float64(x) > 1.1*level:
					t.Errorf("second %d, Redis down: %d admitted, want at most %.0f", sec, x, 1.1*level)
				case sec >= start && float64(x) > 1.2*limit:
					t.Errorf("second %d, Redis back empty: %d admitted, want at most %.0f", sec, x, 1.2*limit)
				}
			}
		}
	}
}

// TestFallbackOutlastsSlowFailures: shares set when coordination is lost
// hold from when the report failed, not from when it began. A report that
// fails only after its timeout (a Redis that does not answer, or a host so
// busy that its answer comes too late) would otherwise set shares that had
// lapsed already, and every operation until the next would be admitted
// (5,000 a second against a limit of 1,000 under TestScaleOutBusyHost).
func TestFallbackOutlastsSlowFailures(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_900_000_000, 0)
	const interval, limit = 100 * time.Millisecond, 10
	f := ratelimit.NewFleet(64)
	offered, admitted := 0, 0
	// offer offers the partition 1,000 operations a second for d.
	offer := func(d time.Duration) {
		for end := now.Add(d); now.Before(end); now = now.Add(time.Millisecond) {
			offered++
			if f.Admit(now.UnixNano(), 1, 7, limit) {
				admitted++
			}
		}
	}
	// Each report times out: its first dial takes all of its time.
	timedOut := false
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if !timedOut {
			offer(ReportTimeout(interval))
			timedOut = true
		}
		return nil, &net.OpError{Op: "dial", Net: network, Err: os.ErrDeadlineExceeded}
	}
	var r *Reporter
	report := func() {
		timedOut = false
		r.Report(context.Background())
	}
	m := NewMetrics(prometheus.NewRegistry())
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", Dialer: dial, MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	r = New(Config{Client: c, KeyPrefix: "slow:", Interval: interval, Now: func() time.Time { return now }}, f, zerolog.Nop(), m)
	offer(interval)
	report() // lost at once: no report ever succeeded
	offered, admitted = 0, 0
	for range 4 {
		offer(interval)
		report()
	}
	// This proxy alone (fallback local) admits the limit, 10 a second.
	secs := float64(offered) / 1000
	if max := 1.2 * limit * secs; float64(admitted) > max {
		t.Errorf("%d of %d admitted over %.1f s, want at most %.0f", admitted, offered, secs, max)
	}
}
