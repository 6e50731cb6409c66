package proxy

import (
	"strings"
	"testing"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/ratelimit"
	"github.com/cqlguard/cqlguard/schema"
)

// u32 returns a pointer to v, for config.RateLimits.
func u32(v config.OpsPerSecond) *config.OpsPerSecond { return &v }

func TestLimitsPrecedence(t *testing.T) {
	cfg := config.Default().Limits
	cfg.Default = config.RateLimits{MaxReadsPerSecond: u32(1000), MaxWritesPerSecond: u32(500)}
	cfg.Keyspaces = map[string]config.KeyspaceLimits{
		"shop": {
			Default: config.RateLimits{MaxReadsPerSecond: u32(300)},
			Tables: map[string]config.RateLimits{
				"carts":  {MaxReadsPerSecond: u32(100), MaxWritesPerSecond: u32(50)},
				"orders": {MaxWritesPerSecond: u32(0)}, // unlimited, whatever the option says
				"Items":  {MaxReadsPerSecond: u32(7)},
			},
		},
		"logs": {Default: config.RateLimits{MaxReadsPerSecond: u32(0), MaxWritesPerSecond: u32(20)}},
	}
	l, err := newLimits(cfg)
	if err != nil {
		t.Fatal(err)
	}
	opt := func(r, w uint32) schema.RateLimit {
		return schema.RateLimit{MaxReadsPerSecond: r, MaxWritesPerSecond: w}
	}
	tests := []struct {
		name          string
		ks, table     string
		option        schema.RateLimit
		reads, writes uint32
	}{
		{"table entry", "shop", "carts", schema.RateLimit{}, 100, 50},
		{"table entry beats option", "shop", "carts", opt(9, 9), 100, 50},
		{"explicit 0 beats option", "shop", "orders", opt(9, 9), 9, 0},
		{"option beats keyspace default, per op", "shop", "baskets", opt(0, 40), 300, 40},
		{"option beats keyspace default", "shop", "baskets", opt(5, 0), 5, 500},
		{"keyspace default, then global per op", "shop", "baskets", schema.RateLimit{}, 300, 500},
		{"names are case-sensitive", "shop", "items", schema.RateLimit{}, 300, 500},
		{"case preserved", "shop", "Items", schema.RateLimit{}, 7, 500},
		{"keyspace default 0 is unlimited", "logs", "events", schema.RateLimit{}, 0, 20},
		{"option beats keyspace 0", "logs", "events", opt(3, 0), 3, 20},
		{"global default", "other", "t", schema.RateLimit{}, 1000, 500},
		{"option beats global", "other", "t", opt(2, 0), 2, 500},
		{"keyspace case-sensitive", "Shop", "carts", schema.RateLimit{}, 1000, 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tbl := &schema.Table{Keyspace: tt.ks, Name: tt.table, RateLimit: tt.option}
			if r, w := l.forTable(tbl); r != tt.reads || w != tt.writes {
				t.Errorf("forTable = %d, %d; want %d, %d", r, w, tt.reads, tt.writes)
			}
			if tt.option == (schema.RateLimit{}) {
				if r, w := l.forName([]byte(tt.ks), []byte(tt.table)); r != tt.reads || w != tt.writes {
					t.Errorf("forName = %d, %d; want %d, %d", r, w, tt.reads, tt.writes)
				}
			}
		})
	}
	if r, w := l.forTable(nil); r != 1000 || w != 500 {
		t.Errorf("forTable(nil) = %d, %d", r, w)
	}
}

func TestLimitsUnsetMeansUnlimited(t *testing.T) {
	l, err := newLimits(config.Default().Limits)
	if err != nil {
		t.Fatal(err)
	}
	if r, w := l.forTable(&schema.Table{Keyspace: "ks", Name: "t"}); r != 0 || w != 0 {
		t.Errorf("no limits configured: %d, %d", r, w)
	}
	// Only the table option: ScyllaDB's behaviour.
	if r, w := l.forTable(&schema.Table{Keyspace: "ks", Name: "t", RateLimit: schema.RateLimit{MaxWritesPerSecond: 10}}); r != 0 || w != 10 {
		t.Errorf("option only: %d, %d", r, w)
	}
	if !l.limitLWT || !l.limitCounters || l.dryRun {
		t.Errorf("flags %+v", l)
	}
	if c := l.limiter; c.Algorithm != ratelimit.AlgorithmScylla || c.MemoryBytes != ratelimit.DefaultMemoryBytes || c.Burst != 1 || c.Clock != nil || c.Seed != 0 || c.Shards != 0 {
		t.Errorf("limiter config %+v", l.limiter)
	}
}

func TestNewLimitsValidates(t *testing.T) {
	cfg := config.Default().Limits
	cfg.Algorithm = "leaky"
	if _, err := newLimits(cfg); err == nil || !strings.Contains(err.Error(), "limits.algorithm") {
		t.Fatalf("want an algorithm error, got %v", err)
	}
}

func TestSameLimiter(t *testing.T) {
	scylla := ratelimit.Config{Algorithm: ratelimit.AlgorithmScylla, MemoryBytes: 1 << 20, Burst: 1}
	bucket := ratelimit.Config{Algorithm: ratelimit.AlgorithmTokenBucket, MemoryBytes: 1 << 20, Burst: 1}
	with := func(c ratelimit.Config, edit func(*ratelimit.Config)) ratelimit.Config { edit(&c); return c }
	tests := []struct {
		name string
		a, b ratelimit.Config
		same bool
	}{
		{"identical", scylla, scylla, true},
		{"scylla ignores burst", scylla, with(scylla, func(c *ratelimit.Config) { c.Burst = 3 }), true},
		{"bucket burst", bucket, with(bucket, func(c *ratelimit.Config) { c.Burst = 3 }), false},
		{"algorithm", scylla, bucket, false},
		{"memory", scylla, with(scylla, func(c *ratelimit.Config) { c.MemoryBytes = 2 << 20 }), false},
	}
	for _, tt := range tests {
		if got := sameLimiter(tt.a, tt.b); got != tt.same {
			t.Errorf("%s: sameLimiter = %v", tt.name, got)
		}
	}
}

// BenchmarkLimitsForTable measures resolving a table's limits, as the
// request path does for every counted request, and fails if it allocates.
func BenchmarkLimitsForTable(b *testing.B) {
	cfg := config.Default().Limits
	cfg.Default = config.RateLimits{MaxReadsPerSecond: u32(1000)}
	cfg.Keyspaces = map[string]config.KeyspaceLimits{"shop": {
		Default: config.RateLimits{MaxWritesPerSecond: u32(10)},
		Tables:  map[string]config.RateLimits{"carts": {MaxReadsPerSecond: u32(100)}},
	}}
	l, err := newLimits(cfg)
	if err != nil {
		b.Fatal(err)
	}
	tables := []*schema.Table{
		{Keyspace: "shop", Name: "carts"},
		{Keyspace: "shop", Name: "orders", RateLimit: schema.RateLimit{MaxReadsPerSecond: 5}},
		{Keyspace: "other", Name: "t"},
	}
	ks, tbl := []byte("shop"), []byte("carts")
	var sink uint32
	if n := testing.AllocsPerRun(100, func() {
		for _, t := range tables {
			r, w := l.forTable(t)
			sink += r + w
		}
		r, w := l.forName(ks, tbl)
		sink += r + w
	}); n != 0 {
		b.Fatalf("%v allocations per run, want 0", n)
	}
	for _, bt := range []struct {
		name string
		t    *schema.Table
	}{{"table-entry", tables[0]}, {"keyspace-default", tables[1]}, {"global-default", tables[2]}} {
		b.Run(bt.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r, w := l.forTable(bt.t)
				sink += r + w
			}
		})
	}
	b.Run("by-name", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r, w := l.forName(ks, tbl)
			sink += r + w
		}
	})
	_ = sink
}
