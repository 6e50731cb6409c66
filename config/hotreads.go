package config

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// HotReadsConfig configures serving the reads of hot partitions instead of
// forwarding each one: reads identical to one in flight wait for its
// answer (coalescing), and reads identical to one answered less than a
// table's cache_ttl ago get that answer (the cache). Tables take part only
// when listed. The tables are reloadable; the rest takes effect on restart.
type HotReadsConfig struct {
	// Memory bounds the cached answers and their requests together.
	Memory ByteSize `yaml:"memory"`
	// MaxAnswerBytes is the largest answer that is cached; larger answers
	// are still shared with the reads that waited for them.
	MaxAnswerBytes ByteSize `yaml:"max_answer_bytes"`
	// MaxWait is how long a read waits for an identical read's answer
	// before the proxy forwards it on its own.
	MaxWait Duration `yaml:"max_wait"`
	// Keyspaces list the tables whose hot reads are served, by name as
	// stored.
	Keyspaces map[string]HotReadsKeyspace `yaml:"keyspaces"`
}

// HotReadsKeyspace lists one keyspace's tables whose hot reads are served.
type HotReadsKeyspace struct {
	Tables map[string]HotReadsTable `yaml:"tables"`
}

// HotReadsTable says how one table's hot reads are served.
type HotReadsTable struct {
	// Coalesce makes a read identical to one in flight wait for its answer.
	Coalesce bool `yaml:"coalesce"`
	// CacheTTL is how long an answer serves identical reads; 0 turns the
	// cache off for the table. Above 0 it implies Coalesce: a read in
	// flight is the cache's next answer.
	CacheTTL Duration `yaml:"cache_ttl"`
	// HotRate is the reads per second, as /hot estimates them, from which
	// a partition's reads are served; 0 serves every read of the table.
	// Nil means DefaultHotRate.
	HotRate *OpsPerSecond `yaml:"hot_rate"`
}

// DefaultHotRate is a table's hot_rate when it sets none: a partition read
// this often is hot on any cluster, and reads of the many cooler
// partitions pay nothing for coalescing or the cache.
const DefaultHotRate = 100

// maxCacheTTL bounds hot_reads' cache_ttl: the cache serves reads that
// arrive while a hot partition is hot, not as a general-purpose cache.
const maxCacheTTL = 10 * time.Second

func defaultHotReads() HotReadsConfig {
	return HotReadsConfig{
		Memory:         64 << 20,
		MaxAnswerBytes: 256 << 10,
		MaxWait:        Duration(time.Second),
	}
}

// Rate returns the table's hot_rate, DefaultHotRate when unset.
func (t HotReadsTable) Rate() uint32 {
	if t.HotRate == nil {
		return DefaultHotRate
	}
	return uint32(*t.HotRate)
}

// validate checks the hot_reads section; hotPartitions is
// admin.hot_partitions, which finds the hot partitions.
func (c *HotReadsConfig) validate(ps *problems, hotPartitions int) {
	bad := func(err error, path ...string) { ps.add(err, append([]string{"hot_reads"}, path...)...) }
	if c.Memory < 0 {
		bad(fmt.Errorf("%d must not be negative", c.Memory), "memory")
	}
	if c.MaxAnswerBytes < 0 {
		bad(fmt.Errorf("%d must not be negative", c.MaxAnswerBytes), "max_answer_bytes")
	}
	if c.MaxWait <= 0 {
		bad(fmt.Errorf("%s must be positive", time.Duration(c.MaxWait)), "max_wait")
	}
	for _, ks := range slices.Sorted(maps.Keys(c.Keyspaces)) {
		if !isStoredName(ks) {
			bad(fmt.Errorf("%q is not a keyspace name as stored: letters, digits and underscores, case-sensitive, no quotes", ks), "keyspaces", ks)
		}
		tables := c.Keyspaces[ks].Tables
		for _, name := range slices.Sorted(maps.Keys(tables)) {
			t := tables[name]
			path := []string{"keyspaces", ks, "tables", name}
			if !isStoredName(name) {
				bad(fmt.Errorf("%q is not a table name as stored: letters, digits and underscores, case-sensitive, no quotes", name), path...)
			}
			if t.CacheTTL < 0 || time.Duration(t.CacheTTL) > maxCacheTTL {
				bad(fmt.Errorf("%s is outside 0 to %s", time.Duration(t.CacheTTL), maxCacheTTL), append(path, "cache_ttl")...)
			}
			if !t.Coalesce && t.CacheTTL == 0 {
				bad(errors.New("neither coalesce nor cache_ttl is set: the table's reads would be served as without it"), path...)
			}
			if t.Rate() > 0 && hotPartitions == 0 {
				bad(fmt.Errorf("hot_rate %d needs admin.hot_partitions above 0 to find hot partitions; set hot_rate: 0 to serve every read", t.Rate()), append(path, "hot_rate")...)
			}
		}
	}
}
