package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/schema"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

// loadingSchema is a schema source that has not loaded until load is
// called, as the upstream's schema before the first load.
type loadingSchema struct {
	snap     atomic.Pointer[schema.Snapshot]
	loadedAt atomic.Int64
}

func (s *loadingSchema) Current() *schema.Snapshot {
	if snap := s.snap.Load(); snap != nil {
		return snap
	}
	return schema.NewSnapshot(nil)
}
func (s *loadingSchema) Refresh() {}
func (s *loadingSchema) LoadedAt() time.Time {
	if ns := s.loadedAt.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}
func (s *loadingSchema) Failures() uint64 { return 0 }

func (s *loadingSchema) load(tables ...*schema.Table) {
	s.snap.Store(schema.NewSnapshot(tables))
	s.loadedAt.Store(time.Now().UnixNano())
}

// TestGuardFollowsTheSchema checks that the guard-armed metrics and
// /readyz say whether the limits can be enforced: not while the schema is
// unknown, and once it has loaded; and that a limit naming a table the
// schema lacks is counted and logged.
func TestGuardFollowsTheSchema(t *testing.T) {
	t.Parallel()
	rows := []struct {
		name             string
		readyNeedsSchema bool
		wantUnloaded     int // /readyz's status before the schema loads
	}{
		{name: "ready needs the schema", readyNeedsSchema: true, wantUnloaded: http.StatusServiceUnavailable},
		{name: "ready without the schema", readyNeedsSchema: false, wantUnloaded: http.StatusOK},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			node := fakeNode(t, "127.0.0.1:0", fakenode.Options{})
			src := &loadingSchema{}
			cfg := config.Default()
			cfg.Listen, cfg.Upstreams, cfg.Admin.Listen = "127.0.0.1:0", []string{node.Addr()}, ""
			cfg.Admin.ReadyNeedsSchema = row.readyNeedsSchema
			hundred := config.OpsPerSecond(100)
			cfg.Limits.Keyspaces = map[string]config.KeyspaceLimits{
				"ks": {Tables: map[string]config.RateLimits{
					"kv":   {MaxReadsPerSecond: &hundred},
					"gone": {MaxWritesPerSecond: &hundred},
				}},
				"nowhere": {Default: config.RateLimits{MaxReadsPerSecond: &hundred}},
			}
			var log logLines
			reg := prometheus.NewRegistry()
			p, _ := serveProxy(t, cfg, zerolog.New(&log), reg, WithSchema(src))
			srv := httptest.NewServer(adminHandler(t, p, reg))
			t.Cleanup(srv.Close)
			get := func(path string) (int, string) {
				resp, err := http.Get(srv.URL + path)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			metrics := func(want ...string) {
				t.Helper()
				_, body := get("/metrics")
				for _, w := range want {
					if !strings.Contains(body, w+"\n") {
						t.Errorf("/metrics lacks %q", w)
					}
				}
			}

			if code, body := get("/readyz"); code != row.wantUnloaded || code != 200 && !strings.Contains(body, "schema") {
				t.Errorf("/readyz before the schema loads: %d %q, want %d", code, body, row.wantUnloaded)
			}
			metrics("cqlguard_guard_armed 0", "cqlguard_schema_loaded 0", "cqlguard_upstream_up 1", "cqlguard_schema_unknown_limits 0")
			if _, body := get("/metrics"); strings.Contains(body, "cqlguard_schema_age_seconds ") {
				t.Error("cqlguard_schema_age_seconds before the schema loads")
			}

			src.load(&schema.Table{Keyspace: "ks", Name: "kv", PartitionKey: []schema.Column{{Name: "k", Type: schema.Type{Kind: schema.Int}}}})
			if code, body := get("/readyz"); code != http.StatusOK {
				t.Errorf("/readyz once the schema loaded: %d %q", code, body)
			}
			metrics("cqlguard_guard_armed 1", "cqlguard_schema_loaded 1", "cqlguard_schema_tables 1", "cqlguard_schema_unknown_limits 2")
			if _, body := get("/metrics"); !strings.Contains(body, "cqlguard_schema_age_seconds ") {
				t.Error("no cqlguard_schema_age_seconds once the schema loaded")
			}
			// watchGuard names each limit the schema cannot enforce.
			deadline := time.Now().Add(5 * time.Second)
			for !strings.Contains(log.String(), `"name":"ks.gone"`) || !strings.Contains(log.String(), `"name":"nowhere"`) {
				if time.Now().After(deadline) {
					t.Fatalf("no warning naming ks.gone and nowhere in the log:\n%s", log.String())
				}
				time.Sleep(10 * time.Millisecond)
			}
			if strings.Contains(log.String(), `"name":"ks.kv"`) {
				t.Errorf("a warning names ks.kv, which the schema has:\n%s", log.String())
			}
		})
	}
}
