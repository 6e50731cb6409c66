package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cqlguard.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoad(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		text    string
		wantErr string // substring; empty means success
		check   func(t *testing.T, c Config)
	}{
		{name: "empty file means defaults", text: "", check: func(t *testing.T, c Config) {
			if c.Listen != "127.0.0.1:9042" || c.Mode != ModeCluster || c.AdvertiseAddr() != c.Listen {
				t.Errorf("defaults: %+v", c)
			}
		}},
		{name: "example file loads", text: mustRead(t, "../config.example.yaml")},
		{name: "values", text: "listen: 127.0.0.9:9043\nupstreams: [10.0.0.1:9042, 10.0.0.2:9042]\ndrain_timeout: 2s\nlog: {format: console}\n",
			check: func(t *testing.T, c Config) {
				if c.Listen != "127.0.0.9:9043" || len(c.Upstreams) != 2 || time.Duration(c.DrainTimeout) != 2*time.Second || c.Log.Format != "console" {
					t.Errorf("got %+v", c)
				}
			}},
		{name: "second document ignored", text: "listen: 127.0.0.9:9043\n---\nbogus: 1\n", check: func(t *testing.T, c Config) {
			if c.Listen != "127.0.0.9:9043" || c.File() == "" {
				t.Errorf("listen %q from %q", c.Listen, c.File())
			}
		}},
		{name: "unknown key names file and line", text: "listen: 127.0.0.1:9042\n\nupstream: [a:1]\n", wantErr: `cqlguard.yaml:3: unknown key "upstream"`},
		{name: "nested unknown key", text: "admin:\n  port: 9\n", wantErr: `cqlguard.yaml:2: unknown key "port"`},
		{name: "bad duration", text: "dial_timeout: soon\n", wantErr: `cqlguard.yaml:1: "soon" is not a duration`},
		{name: "bad mode", text: "mode: mesh\n", wantErr: `mode: "mesh"`},
		{name: "node mode needs one upstream", text: "mode: node\nupstreams: [a:1, b:2]\n", wantErr: "exactly one upstream"},
		{name: "peers only in node mode", text: "peers: {10.0.0.3: 10.0.1.3:9042}\n", wantErr: "only used in mode node"},
		{name: "bad peer address", text: "mode: node\npeers: {10.0.0.3: nowhere}\n", wantErr: "want ip:port"},
		{name: "unspecified listen needs advertise", text: "listen: 0.0.0.0:9042\n", wantErr: "must be one IP address"},
		{name: "listen 0.0.0.0 with advertise", text: "listen: 0.0.0.0:9042\nadvertise: 10.0.0.5:9042\n"},
		{name: "tiny frame limit", text: "max_frame_bytes: 10\n", wantErr: "max_frame_bytes"},
		{name: "not yaml", text: "listen: [\n", wantErr: "cqlguard.yaml"},
		{name: "tls cert without key", text: "tls: {cert_file: a.pem}\n", wantErr: "cert_file and key_file go together"},
		{name: "tls client CA without cert", text: "tls: {client_ca_file: ca.pem}\n", wantErr: "client_ca_file needs cert_file"},
		{name: "negative in-flight bound", text: "max_in_flight_per_connection: -1\n", wantErr: "max_in_flight_per_connection"},
		{name: "negative proxy in-flight bound", text: "max_in_flight: -1\n", wantErr: "max_in_flight:"},
		{name: "tiny buffered total", text: "max_buffered_bytes_total: 1KiB\n", wantErr: "max_buffered_bytes_total"},
		{name: "negative frame total", text: "max_frame_bytes_total: -1\n", wantErr: `cqlguard.yaml:1: "-1" is not a size`},
		{name: "frame total", text: "max_frame_bytes_total: 1GiB\n",
			check: func(t *testing.T, c Config) {
				if c.MaxFrameBytesTotal != 1<<30 {
					t.Errorf("got max_frame_bytes_total %d", c.MaxFrameBytesTotal)
				}
			}},
		{name: "negative upstream timeout", text: "upstream_timeout: -1s\n", wantErr: "upstream_timeout"},
		{name: "load bounds", text: "max_in_flight: 0\nmax_buffered_bytes_total: 64MiB\nupstream_timeout: 2m\n",
			check: func(t *testing.T, c Config) {
				if c.MaxInFlight != 0 || c.MaxBufferedBytesTotal != 64<<20 || time.Duration(c.UpstreamTimeout) != 2*time.Minute {
					t.Errorf("got max_in_flight %d, max_buffered_bytes_total %d, upstream_timeout %v", c.MaxInFlight, c.MaxBufferedBytesTotal, time.Duration(c.UpstreamTimeout))
				}
			}},
		{name: "load bound defaults", text: "", check: func(t *testing.T, c Config) {
			if c.MaxInFlight != 65536 || c.MaxBufferedBytesTotal != 256<<20 || time.Duration(c.UpstreamTimeout) != 90*time.Second {
				t.Errorf("got max_in_flight %d, max_buffered_bytes_total %d, upstream_timeout %v", c.MaxInFlight, c.MaxBufferedBytesTotal, time.Duration(c.UpstreamTimeout))
			}
		}},
		{name: "admin bounds default", text: "", check: func(t *testing.T, c Config) {
			a := c.Admin
			if a.MaxConnections != 64 || time.Duration(a.ReadTimeout) != 10*time.Second || time.Duration(a.WriteTimeout) != time.Minute || time.Duration(a.IdleTimeout) != time.Minute {
				t.Errorf("got admin %+v", a)
			}
		}},
		{name: "admin bounds", text: "admin:\n  max_connections: 8\n  read_timeout: 2s\n  write_timeout: 3s\n  idle_timeout: 4s\n",
			check: func(t *testing.T, c Config) {
				a := c.Admin
				if a.MaxConnections != 8 || time.Duration(a.ReadTimeout) != 2*time.Second || time.Duration(a.WriteTimeout) != 3*time.Second || time.Duration(a.IdleTimeout) != 4*time.Second {
					t.Errorf("got admin %+v", a)
				}
			}},
		{name: "admin without connections", text: "admin:\n  max_connections: 0\n", wantErr: "cqlguard.yaml:2: admin.max_connections: 0 must be at least 1"},
		{name: "admin read timeout", text: "admin:\n  read_timeout: 0s\n", wantErr: "cqlguard.yaml:2: admin.read_timeout: 0s must be positive"},
		{name: "admin write timeout", text: "admin:\n  write_timeout: -1s\n", wantErr: "cqlguard.yaml:2: admin.write_timeout: -1s must be positive"},
		{name: "admin idle timeout", text: "admin:\n  listen: 127.0.0.1:0\n  idle_timeout: 0s\n", wantErr: "cqlguard.yaml:3: admin.idle_timeout: 0s must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if c, ok := loadCase(t, tt.text, tt.wantErr); ok && tt.check != nil {
				tt.check(t, c)
			}
		})
	}
}

// loadCase loads text as a configuration file. With wantErr it checks that
// loading fails with an error containing it; without, that loading works,
// and it returns the configuration to check.
func loadCase(t *testing.T, text, wantErr string) (Config, bool) {
	t.Helper()
	c, err := Load(writeConfig(t, text))
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("error %v, want one containing %q", err, wantErr)
		}
		return Config{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return c, true
}

func TestLoadMissingFile(t *testing.T) {
	t.Parallel()
	if _, err := Load(filepath.Join(t.TempDir(), "nope.yaml")); err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Fatalf("want an error naming the file, got %v", err)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAdminToken(t *testing.T) {
	t.Setenv("CQLGUARD_TEST_TOKEN", "from-env")
	dir := t.TempDir()
	file := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	tests := []struct {
		name    string
		c       AdminConfig
		want    string // the token; empty means none
		wantErr string
	}{
		{name: "none", c: AdminConfig{}},
		{name: "file, line end trimmed", c: AdminConfig{TokenFile: file("token", "s3cret\r\n")}, want: "s3cret"},
		{name: "environment", c: AdminConfig{TokenEnv: "CQLGUARD_TEST_TOKEN"}, want: "from-env"},
		{name: "missing file", c: AdminConfig{TokenFile: filepath.Join(dir, "nope")}, wantErr: "admin.token_file"},
		{name: "empty file", c: AdminConfig{TokenFile: file("empty", "\n")}, wantErr: "is empty"},
		{name: "unset variable", c: AdminConfig{TokenEnv: "CQLGUARD_TEST_UNSET_TOKEN"}, wantErr: "admin.token_env"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.c.Token()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || string(got) != tt.want || (tt.want == "") != (got == nil) {
				t.Errorf("token %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestSchemaPassword(t *testing.T) {
	t.Setenv("CQLGUARD_TEST_PASSWORD", "from-env")
	path := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(path, []byte("pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		c       SchemaConfig
		want    string
		wantErr string
	}{
		{name: "none", c: SchemaConfig{}},
		{name: "file, line end trimmed", c: SchemaConfig{PasswordFile: path}, want: "pw"},
		{name: "environment", c: SchemaConfig{PasswordEnv: "CQLGUARD_TEST_PASSWORD"}, want: "from-env"},
		{name: "missing file", c: SchemaConfig{PasswordFile: path + ".gone"}, wantErr: "schema.password_file"},
		{name: "unset variable", c: SchemaConfig{PasswordEnv: "CQLGUARD_TEST_UNSET_PASSWORD"}, wantErr: "schema.password_env"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.c.Password()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("password %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// TestParseReportsEveryProblem checks that one attempt shows every mistake
// of a file, each with its line: values of the wrong type, unknown keys
// and failed checks together.
func TestParseReportsEveryProblem(t *testing.T) {
	t.Parallel()
	text := "listen: nowhere\nmode: mesh\nframe_timeout: soon\nlimits:\n  burst: 0\n  keyspaces:\n    app:\n      tables:\n        t:\n          max_reads_per_second: -1\n          max_writes: 3\n"
	_, err := Parse("cqlguard.yaml", []byte(text))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		`cqlguard.yaml:1: listen: "nowhere"`,
		`cqlguard.yaml:2: mode: "mesh"`,
		`cqlguard.yaml:3: "soon" is not a duration`,
		`cqlguard.yaml:5: limits.burst: 0`,
		`cqlguard.yaml:10: "-1" is not a whole number`,
		`cqlguard.yaml:11: unknown key "max_writes"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not hold %q", err, want)
		}
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != 6 {
		t.Errorf("%d lines, want 6:\n%s", n, err)
	}
}
