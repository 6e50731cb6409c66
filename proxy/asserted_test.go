package proxy

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cqlguard/cqlguard/test/fakenode"
)

// A class matched on a STARTUP option alone is any client's to claim: the
// client chooses the option, and the proxy has nothing to check it
// against. This is why config.Warnings warns of such a class when it is
// more privileged than the default. Run with -v for the figures.
func TestAssertedKeysAreClaimable(t *testing.T) {
	t.Parallel()
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{Keyspace: "ks", Table: "kv"})
	cfg := parseConfig(t, `listen: 127.0.0.1:0
upstreams: [`+node.Addr()+`]
admin: {listen: ""}
clients:
  default: {max_units_per_second: 10}
  classes:
    - name: checkout
      tier: 0
      match: {application_names: [checkout]}
request_units: {fixed: 4, per_row: 0, per_kib: 0, per_ms: 0}
`)
	p, err := New(cfg, testLogger(), prometheus.NewRegistry(), WithSchema(staticSchema{testSnapshot(t)}))
	if err != nil {
		t.Fatal(err)
	}
	// The clock stands still: the default class's budget is never repaid.
	var clock atomic.Int64
	clock.Store(int64(time.Hour))
	p.elapsed = clock.Load
	if err := p.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	addr := servedOn(t, p)
	query := &message.Query{Query: "SELECT * FROM ks.kv WHERE k = 1", Options: &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne}}
	answered := func(opts map[string]string) int {
		c := dialRaw(t, addr, 4)
		c.startup(opts)
		n := 0
		for i := range 20 {
			c.send(int16(1+i), query)
			if _, refused := c.recv().Body.Message.(message.Error); !refused {
				n++
			}
		}
		return n
	}
	plain := answered(nil)
	claimed := answered(map[string]string{"APPLICATION_NAME": "checkout"})
	t.Logf("20 requests of 4 RU against a default budget of 10 RU/s: %d answered as the default class, %d claiming class checkout in STARTUP", plain, claimed)
	if plain >= 20 || claimed != 20 {
		t.Errorf("%d answered as the default class, %d claiming checkout; want fewer than 20, and 20", plain, claimed)
	}
}
