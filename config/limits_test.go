package config

import (
	"testing"

	"github.com/cqlguard/cqlguard/ratelimit"
)

func TestLoadLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		text    string
		wantErr string // substring; empty means success
		check   func(t *testing.T, c LimitsConfig)
	}{
		{name: "defaults", text: "", check: func(t *testing.T, c LimitsConfig) {
			want := Default().Limits
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
	t.Parallel()
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
