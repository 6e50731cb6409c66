package proxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/shed"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

// When the node slows, the least important tier is shed with Overloaded,
// and tier 0 never; while it is healthy nothing is.
func TestShedding(t *testing.T) {
	t.Parallel()
	p, node, addr := shedProxy(t, "", "")
	var slow atomic.Bool
	phase := shedLoad(t, addr, func(string) bool { return slow.Load() })
	// Windows this short see a loaded test machine's jitter: a healthy
	// node may have some of its batch requests shed, never a critical one.
	// (The shed package's tests hold the defaults to shedding nothing on a
	// healthy node.)
	crit, batch := phase(2500*time.Millisecond, false)
	shedHealthy := batch.overloaded.Load()
	t.Logf("healthy node: critical %d ok %d shed, batch %d ok %d shed", crit.ok.Load(), crit.overloaded.Load(), batch.ok.Load(), shedHealthy)
	if crit.overloaded.Load() != 0 {
		t.Errorf("healthy node: %d critical requests shed", crit.overloaded.Load())
	}
	slow.Store(true)
	// The highest pressure while the node is slow, read as often as the
	// controller moves.
	var highest float64
	stopWatch, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopWatch:
				return
			case <-tick.C:
			}
			highest = max(highest, metricValue(t, p.shedding.pressure.WithLabelValues(node.Addr())))
		}
	}()
	// The node's slowness is seen within a phase or two; on a loaded
	// machine, later: phases run until the batch tier is shed, or 8 s.
	crit, batch = &shedCounts{}, &shedCounts{}
	for end := time.Now().Add(8 * time.Second); batch.overloaded.Load() == 0 && time.Now().Before(end); {
		c, b := phase(500*time.Millisecond, false)
		crit.add(c)
		batch.add(b)
	}
	close(stopWatch)
	<-watched
	t.Logf("slow node: critical %d ok %d shed, batch %d ok %d shed", crit.ok.Load(), crit.overloaded.Load(), batch.ok.Load(), batch.overloaded.Load())
	if crit.overloaded.Load() != 0 || crit.other.Load()+batch.other.Load() != 0 {
		t.Errorf("critical requests shed (%d) or other errors (%d, %d)", crit.overloaded.Load(), crit.other.Load(), batch.other.Load())
	}
	if batch.overloaded.Load() == 0 {
		t.Errorf("no batch request shed while the node was slow")
	}
	// Only tiers 0 and 5 carry requests: the default class's tier 1 is not
	// one more tier for the pressure to climb through before tier 5 is
	// shed entirely.
	if highest > 1+shed.Reserve {
		t.Errorf("pressure reached %v tiers with one sheddable tier in use and a reserve of %v", highest, shed.Reserve)
	}
	if got := metricValue(t, p.shedding.shedTotal.WithLabelValues("5", "shed")); got != float64(shedHealthy+batch.overloaded.Load()) {
		t.Errorf("shed counted %v, the batch clients saw %d", got, shedHealthy+batch.overloaded.Load())
	}
	// The node is well again: shedding falls, until a phase of the batch
	// tier is answered, but for what jitter sheds on a healthy node (see
	// above), at least nine times in ten. How soon depends on the
	// machine: a loaded one's jitter holds the ratio where shedding holds.
	slow.Store(false)
	for deadline, phases := time.Now().Add(30*time.Second), 1; ; phases++ {
		crit, batch = phase(300*time.Millisecond, false)
		if batch.ok.Load() > 9*batch.overloaded.Load() {
			t.Logf("recovered after %d phases of 300 ms: critical %d ok, batch %d ok", phases, crit.ok.Load(), batch.ok.Load())
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the node recovered, batch still got %d answers and %d refusals in 300 ms", batch.ok.Load(), batch.overloaded.Load())
		}
	}
}

// shedCounts are what one class's clients got in a phase.
type shedCounts struct{ ok, overloaded, configErr, other atomic.Int64 }

// add adds the counts of o to c.
func (c *shedCounts) add(o *shedCounts) {
	c.ok.Add(o.ok.Load())
	c.overloaded.Add(o.overloaded.Load())
	c.configErr.Add(o.configErr.Load())
	c.other.Add(o.other.Load())
}

// shedLoad returns a function that runs a phase of d: four connections of
// application critical and, unless critOnly, four of batch, reading as
// fast as they are answered, each request ks.kv's key 1, or key 2 (the
// fake node's slow query) while slow says so for its application.
func shedLoad(t *testing.T, addr string, slow func(app string) bool) func(d time.Duration, critOnly bool) (crit, batch *shedCounts) {
	run := func(app string, c *shedCounts, stop <-chan struct{}) {
		conn := dialRaw(t, addr, 4)
		conn.startup(map[string]string{"APPLICATION_NAME": app})
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			q := "SELECT * FROM ks.kv WHERE k = 1"
			if slow(app) {
				q = "SELECT * FROM ks.kv WHERE k = 2"
			}
			stream := int16(i & 0x7fff)
			conn.send(stream, &message.Query{Query: q, Options: &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne}})
			switch m := conn.recv().Body.Message.(type) {
			case message.Error:
				switch m.GetErrorCode() {
				case primitive.ErrorCodeOverloaded:
					c.overloaded.Add(1)
				case primitive.ErrorCodeConfigError:
					c.configErr.Add(1)
				default:
					c.other.Add(1)
				}
			default:
				c.ok.Add(1)
			}
		}
	}
	return func(d time.Duration, critOnly bool) (crit, batch *shedCounts) {
		crit, batch = &shedCounts{}, &shedCounts{}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() { run("critical", crit, stop) })
			if !critOnly {
				wg.Go(func() { run("batch", batch, stop) })
			}
		}
		time.Sleep(d) // the phase's length is what is measured
		close(stop)
		wg.Wait()
		return crit, batch
	}
}

// With max_price, a tier being shed whose class has a budget is not
// refused with Overloaded but charged more, so that its budget refuses it
// sooner; tier 0 is neither.
func TestSheddingPrices(t *testing.T) {
	t.Parallel()
	// A slow node answers the batch class's 4 connections about 200
	// reads a second, a fifth of its budget; at a price of up to 100 the
	// budget admits 10.
	p, _, addr := shedProxy(t, ", max_units_per_second: 1000", "  max_price: 100\nrequest_units: {fixed: 1, per_row: 0, per_kib: 0, per_ms: 0}\n")
	var slow atomic.Bool
	phase := shedLoad(t, addr, func(string) bool { return slow.Load() })
	phase(2500*time.Millisecond, false)
	slow.Store(true)
	// The node's slowness is seen within a phase or two; on a loaded
	// machine, later: phases run until the budget refuses, or 8 s.
	crit, batch := &shedCounts{}, &shedCounts{}
	for end := time.Now().Add(8 * time.Second); batch.configErr.Load() == 0 && time.Now().Before(end); {
		c, b := phase(500*time.Millisecond, false)
		crit.add(c)
		batch.add(b)
	}
	t.Logf("slow node: critical %d ok %d refused; batch %d ok, %d over budget, %d overloaded",
		crit.ok.Load(), crit.configErr.Load()+crit.overloaded.Load(), batch.ok.Load(), batch.configErr.Load(), batch.overloaded.Load())
	if n := crit.overloaded.Load() + crit.configErr.Load() + crit.other.Load() + batch.other.Load(); n != 0 {
		t.Errorf("%d critical requests refused or other errors", n)
	}
	if n := batch.overloaded.Load(); n != 0 {
		t.Errorf("%d batch requests shed; want them priced", n)
	}
	if batch.configErr.Load() == 0 {
		t.Error("no batch request refused for its budget while priced up")
	}
	if got := metricValue(t, p.shedding.shedTotal.WithLabelValues("5", "priced")); got == 0 {
		t.Error("no batch request counted as priced")
	}
	if got := metricValue(t, p.shedding.shedTotal.WithLabelValues("0", "priced")); got != 0 {
		t.Errorf("%v critical requests priced", got)
	}
}

// shedProxy serves a proxy in front of a fake node whose reads of key 2
// take 20 ms, with classes critical (tier 0) and batch (tier 5, with
// batchExtra in its flow mapping), and shedding on with windows short
// enough for a test and a latency floor under the slow reads' 20 ms, then
// extra's lines.
func shedProxy(t *testing.T, batchExtra, extra string) (*Proxy, *fakenode.Node, string) {
	t.Helper()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{Keyspace: "ks", Table: "kv", SlowQuery: "k = 2", SlowFor: 20 * time.Millisecond})
	cfg := parseConfig(t, `listen: 127.0.0.1:0
upstreams: [`+node.Addr()+`]
admin: {listen: ""}
clients:
  classes:
    - {name: critical, tier: 0, match: {application_names: [critical]}}
    - {name: batch, tier: 5, match: {application_names: [batch]}`+batchExtra+`}
shedding:
  enabled: true
  short_window: 100ms
  long_window: 2s
  min_samples: 10
  latency_floor: 5ms
  rise: 100ms
  fall: 100ms
  update_every: 20ms
`+extra)
	p, err := New(cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{testSnapshot(t)}))
	if err != nil {
		t.Fatal(err)
	}
	return p, node, servedOn(t, p)
}

// A tier whose requests are slower than another's, joining it, is not the
// node slowing down: each tier's latency is measured against its own, on
// a clock of the test's.
func TestNodeSignalsPerTier(t *testing.T) {
	t.Parallel()
	cfg := config.Default().Shedding
	cfg.ShortWindow, cfg.LongWindow, cfg.MinSamples = config.Duration(100*time.Millisecond), config.Duration(2*time.Second), 10
	ctl, err := shed.NewController(cfg.Controller(nil))
	if err != nil {
		t.Fatal(err)
	}
	perTier := &nodeSignals{cfg: cfg.Latency(), ctl: ctl}
	oneLatency := &nodeSignals{cfg: cfg.Latency(), ctl: ctl} // every tier's latency as tier 0's
	const ms = int64(time.Millisecond)
	base := int64(1e12)
	at := base
	// Tier 0 alone for 3 s: 0.3 ms reads, 1,000 a second.
	for ; at < base+3000*ms; at += ms {
		perTier.observe(0, at, 3*ms/10)
		oneLatency.observe(0, at, 3*ms/10)
	}
	// Tier 5 joins with 20 ms reads, 200 a second, for 2 s.
	lowest, lowestOne := 1.0, 1.0
	for ; at < base+5000*ms; at += ms {
		perTier.observe(0, at, 3*ms/10)
		oneLatency.observe(0, at, 3*ms/10)
		if at%(5*ms) == 0 {
			perTier.observe(5, at, 20*ms)
			oneLatency.observe(0, at, 20*ms)
		}
		if at%(50*ms) == 0 {
			if r := perTier.reading(at); r.OK {
				lowest = min(lowest, r.Ratio)
			}
			if r := oneLatency.reading(at); r.OK {
				lowestOne = min(lowestOne, r.Ratio)
			}
		}
	}
	if ratioBelow := shed.DefaultRatioBelow; lowest < ratioBelow || lowestOne >= ratioBelow {
		t.Errorf("lowest ratio %.3f per tier, %.3f over every request; want the first at least %v, the second under it", lowest, lowestOne, ratioBelow)
	}
}

// With max_in_flight saturated, the queue stands: the requests read
// behind one that waited for a slot have waited inside the proxy since
// then, and a request arriving as a slot is given back does not pass the
// ones waiting for it.
func TestSheddingQueueStands(t *testing.T) {
	t.Parallel()
	p, _, addr := shedProxy(t, "", "max_in_flight: 2\n")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			conn := dialRaw(t, addr, 4)
			conn.startup(map[string]string{"APPLICATION_NAME": "critical"})
			for {
				select {
				case <-stop:
					return
				default:
				}
				// 8 pipelined reads of 20 ms each, answered two at a time
				// over all four connections.
				for i := range 8 {
					conn.send(int16(i), &message.Query{Query: "SELECT * FROM ks.kv WHERE k = 2", Options: &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne}})
				}
				for range 8 {
					conn.recv()
				}
			}
		})
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	waitUntil(t, "the queue to stand", func() bool {
		return metricValue(t, p.shedding.standing) > (5 * time.Millisecond).Seconds()
	})
}

// /shed/trace gives back a node's last shedding updates in the form a
// test replays, and says which nodes there are when asked for another.
func TestSheddingTrace(t *testing.T) {
	t.Parallel()
	p, node, addr := shedProxy(t, "", "")
	phase := shedLoad(t, addr, func(string) bool { return false })
	phase(200*time.Millisecond, true)
	get := func(url string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		adminHandler(t, p, prometheus.NewRegistry()).ServeHTTP(rec, httptest.NewRequest("GET", url, nil))
		return rec
	}
	waitUntil(t, "a few updates", func() bool {
		ticks, err := shed.ReadTrace(get("/shed/trace").Body)
		return err == nil && len(ticks) >= 3
	})
	for _, tc := range []struct {
		url  string
		code int
	}{
		{"/shed/trace", http.StatusOK},
		{"/shed/trace?node=" + node.Addr(), http.StatusOK},
		{"/shed/trace?node=10.9.9.9:9042", http.StatusBadRequest},
	} {
		rec := get(tc.url)
		if rec.Code != tc.code {
			t.Errorf("%s: %d %q, want %d", tc.url, rec.Code, rec.Body, tc.code)
			continue
		}
		if tc.code != http.StatusOK {
			if !strings.Contains(rec.Body.String(), node.Addr()) {
				t.Errorf("%s: %q does not name the node", tc.url, rec.Body)
			}
			continue
		}
		ticks, err := shed.ReadTrace(rec.Body)
		if err != nil || len(ticks) < 3 {
			t.Fatalf("%s: %d ticks, %v", tc.url, len(ticks), err)
		}
		for i := 1; i < len(ticks); i++ {
			if ticks[i].At <= ticks[i-1].At {
				t.Fatalf("%s: tick %d at %d after %d", tc.url, i, ticks[i].At, ticks[i-1].At)
			}
		}
	}
}
