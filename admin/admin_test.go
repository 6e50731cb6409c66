package admin

import (
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/config"
)

// stubSource is a proxy that is ready, has hot the busiest partitions,
// and sheds nothing.
type stubSource struct{ hot []HotPartition }

func (stubSource) Ready() error                        { return nil }
func (s stubSource) Hot() []HotPartition               { return s.hot }
func (stubSource) ShedTrace(string) (ShedTrace, error) { return ShedTrace{}, ErrShedOff }

// A token that cannot be read stops the admin listener from starting,
// naming the setting.
func TestAdminTokenErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		edit func(*config.AdminConfig)
		want string
	}{
		{"missing file", func(c *config.AdminConfig) { c.TokenFile = "/nonexistent/token" }, "admin.token_file"},
		{"empty file", func(c *config.AdminConfig) { c.TokenFile = os.DevNull }, "is empty"},
		{"unset variable", func(c *config.AdminConfig) { c.TokenEnv = "CQLGUARD_TEST_UNSET_TOKEN" }, "admin.token_env"},
	}
	for _, tc := range cases {
		cfg := config.Default().Admin
		tc.edit(&cfg)
		reg := prometheus.NewRegistry()
		_, err := NewServer(cfg, stubSource{}, reg, reg, zerolog.Nop())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}
