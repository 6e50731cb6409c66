package proxy

import (
	"strings"
	"testing"

	"github.com/cqlguard/cqlguard/ratelimit"
	"github.com/cqlguard/cqlguard/schema"
)

func TestLoadConfigLimits(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		wantErr string // substring; empty means success
		check   func(t *testing.T, c LimitsConfig)
	}{
		{name: "defaults", text: "", check: func(t *testing.T, c LimitsConfig) {
			want := DefaultConfig().Limits
			if c.Algorithm != ratelimit.AlgorithmScylla || c.Memory != ratelimit.DefaultMemoryBytes || c.Burst != 1 ||
				c.DryRun || !c.LimitLWT || !c.LimitCounters || c.Default != (RateLimits{}) || c.Keyspaces != nil {
				t.Errorf("defaults %+v, want %+v", c, want)
			}
		}},
		{name: "empty section keeps defaults", text: "limits:\n", check: func(t *testing.T, c LimitsConfig) {
			if !c.LimitLWT || !c.LimitCounters || c.Algorithm != ratelimit.AlgorithmScylla {
				t.Errorf("got %+v", c)
			}
		}},
		{name: "everything", text: `
limits:
  algorithm: token-bucket
  memory: 64MiB
  burst: 2.5
  dry_run: true
  limit_lwt: false
  limit_counters: false
  default: {max_reads_per_second: 1000}
  keyspaces:
    Shop:
      default: {max_writes_per_second: 0}
      tables:
        carts: {max_reads_per_second: 100, max_writes_per_second: 50}
`, check: func(t *testing.T, c LimitsConfig) {
			if c.Algorithm != ratelimit.AlgorithmTokenBucket || c.Memory != 64<<20 || c.Burst != 2.5 ||
				!c.DryRun || c.LimitLWT || c.LimitCounters {
				t.Errorf("flags %+v", c)
			}
			if c.Default.MaxReadsPerSecond == nil || *c.Default.MaxReadsPerSecond != 1000 || c.Default.MaxWritesPerSecond != nil {
				t.Errorf("default %+v", c.Default)
			}
			ks := c.Keyspaces["Shop"]
			if ks.Default.MaxWritesPerSecond == nil || *ks.Default.MaxWritesPerSecond != 0 || ks.Default.MaxReadsPerSecond != nil {
				t.Errorf("keyspace default %+v", ks.Default)
			}
			if tl := ks.Tables["carts"]; *tl.MaxReadsPerSecond != 100 || *tl.MaxWritesPerSecond != 50 {
				t.Errorf("table %+v", tl)
			}
		}},
		{name: "memory as integer", text: "limits: {memory: 1048576}\n", check: func(t *testing.T, c LimitsConfig) {
			if c.Memory != 1<<20 {
				t.Errorf("memory %d", c.Memory)
			}
		}},
		{name: "unknown key names file and line", text: "limits:\n  keyspaces:\n    ks:\n      tables:\n        t: {max_read_per_second: 1}\n",
			wantErr: `cqlguard.yaml:5: unknown key "max_read_per_second"`},
		{name: "unknown key in keyspace", text: "limits:\n  keyspaces:\n    ks:\n      table: {}\n", wantErr: `cqlguard.yaml:4: unknown key "table"`},
		{name: "negative limit", text: "limits:\n  default:\n    max_reads_per_second: -1\n", wantErr: "cqlguard.yaml:3:"},
		{name: "limit too large", text: "limits:\n  default: {max_writes_per_second: 4294967296}\n", wantErr: "cqlguard.yaml:2:"},
		{name: "fractional limit", text: "limits:\n  default: {max_writes_per_second: 1.5}\n", wantErr: `cqlguard.yaml:2: "1.5" is not a whole number`},
		{name: "negative fraction", text: "limits:\n  default: {max_writes_per_second: -0.5}\n", wantErr: "cqlguard.yaml:2:"},
		{name: "limit not a scalar", text: "limits:\n  default: {max_writes_per_second: [1]}\n", wantErr: "cqlguard.yaml:2:"},
		{name: "null limit is unset", text: "limits:\n  default: {max_writes_per_second: ~, max_reads_per_second: 4294967295}\n",
			check: func(t *testing.T, c LimitsConfig) {
				if c.Default.MaxWritesPerSecond != nil || *c.Default.MaxReadsPerSecond != 1<<32-1 {
					t.Errorf("got %+v", c.Default)
				}
			}},
		{name: "bad size", text: "limits:\n  memory: 4 megs\n", wantErr: `cqlguard.yaml:2: "4 megs" is not a size in bytes`},
		{name: "ambiguous size unit", text: "limits:\n  memory: 4M\n", wantErr: "cqlguard.yaml:2:"},
		{name: "size overflow", text: "limits:\n  memory: 99999999999TiB\n", wantErr: "cqlguard.yaml:2:"},
		{name: "tiny memory", text: "\nlimits:\n  memory: 1KiB\n", wantErr: "cqlguard.yaml:3: limits.memory: 1024 bytes"},
		{name: "huge memory", text: "limits:\n  memory: 5GiB\n", wantErr: "cqlguard.yaml:2: limits.memory: 5368709120 bytes is outside 64 KiB to 4 GiB"},
		{name: "bad algorithm", text: "limits:\n  algorithm: leaky\n", wantErr: `cqlguard.yaml:2: limits.algorithm: "leaky"`},
		{name: "zero burst", text: "limits:\n  burst: 0\n", wantErr: "cqlguard.yaml:2: limits.burst"},
		{name: "quoted table name", text: "limits:\n  keyspaces:\n    ks:\n      tables:\n        '\"Carts\"': {}\n",
			wantErr: `cqlguard.yaml:5: limits.keyspaces.ks.tables."Carts": "\"Carts\"" is not a table name`},
		{name: "dotted keyspace name", text: "limits:\n  keyspaces:\n    ks.t: {}\n", wantErr: `cqlguard.yaml:3: limits.keyspaces.ks.t: "ks.t" is not a keyspace name`},
		{name: "duplicate table", text: "limits:\n  keyspaces:\n    ks:\n      tables:\n        t: {}\n        t: {}\n", wantErr: "cqlguard.yaml:6:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if c, ok := loadCase(t, tt.text, tt.wantErr); ok && tt.check != nil {
				tt.check(t, c.Limits)
			}
		})
	}
}

func TestParseByteSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"4194304", 4 << 20, true},
		{"4MiB", 4 << 20, true},
		{"4 MiB", 4 << 20, true},
		{"4mib", 4 << 20, true},
		{"64MB", 64e6, true},
		{"512KiB", 512 << 10, true},
		{"1GiB", 1 << 30, true},
		{"2kb", 2000, true},
		{"100B", 100, true},
		{"", 0, false},
		{"MiB", 0, false},
		{"-1MiB", 0, false},
		{"1.5MiB", 0, false},
		{"4M", 0, false},
		{"9223372036854775807", 1<<63 - 1, true},
		{"9223372036854775808", 0, false},
		{"8388608TiB", 0, false},
	}
	for _, tt := range tests {
		got, err := parseByteSize(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseByteSize(%q) = %d, %v; want %d, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

// u32 returns a pointer to v, for RateLimits.
func u32(v OpsPerSecond) *OpsPerSecond { return &v }

func TestLimitsPrecedence(t *testing.T) {
	cfg := DefaultConfig().Limits
	cfg.Default = RateLimits{MaxReadsPerSecond: u32(1000), MaxWritesPerSecond: u32(500)}
	cfg.Keyspaces = map[string]KeyspaceLimits{
		"shop": {
			Default: RateLimits{MaxReadsPerSecond: u32(300)},
			Tables: map[string]RateLimits{
				"carts":  {MaxReadsPerSecond: u32(100), MaxWritesPerSecond: u32(50)},
				"orders": {MaxWritesPerSecond: u32(0)}, // unlimited, whatever the option says
				"Items":  {MaxReadsPerSecond: u32(7)},
			},
		},
		"logs": {Default: RateLimits{MaxReadsPerSecond: u32(0), MaxWritesPerSecond: u32(20)}},
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
	l, err := newLimits(DefaultConfig().Limits)
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
	cfg := DefaultConfig().Limits
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
	cfg := DefaultConfig().Limits
	cfg.Default = RateLimits{MaxReadsPerSecond: u32(1000)}
	cfg.Keyspaces = map[string]KeyspaceLimits{"shop": {
		Default: RateLimits{MaxWritesPerSecond: u32(10)},
		Tables:  map[string]RateLimits{"carts": {MaxReadsPerSecond: u32(100)}},
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
