package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// TestCLI runs the built binary as an operator would: version, help,
// check-config on good, bad and mended files, and command lines that
// cannot be run, each with its exit status and what it prints.
func TestCLI(t *testing.T) {
	t.Parallel()
	bin := buildCqlguard(t)
	dir := t.TempDir()
	write := func(name, text string) string { return writeFile(t, dir, name, text) }
	good := write("good.yaml", "listen: 127.0.0.1:19042\nupstreams: [127.0.0.2:9042]\n")
	bad := write("bad.yaml", "listen: 127.0.0.1:19042\nupstrems: [x:1]\n")
	mendable := write("mendable.yaml", "upstreams: [no-port]\n")
	claimable := write("claimable.yaml", "listen: 127.0.0.1:19042\nclients:\n  classes:\n    - name: checkout\n      tier: 0\n      match: {application_names: [checkout]}\n")
	many := write("many.yaml", "listen: 127.0.0.1:19042\nupstrems: [x:1]\nmode: mesh\ndial_timeout: soon\nlimits:\n  algorithm: leaky\n  memory: 1KiB\n")
	missing := filepath.Join(dir, "missing.pem")
	six := write("six.yaml", "listen: 127.0.0.1:99999\nupstreams: [10.0.0.1:9042, 'cass:abc']\nadmin:\n  listen: 127.0.0.1:70000\n  token_file: "+missing+
		"\ntls:\n  cert_file: "+missing+"\n  key_file: "+missing+"\ncoordination:\n  addresses: [redis]\n")
	sixErrors := []string{
		`six.yaml:1: listen: "127.0.0.1:99999": port 99999 is outside 0 to 65535`,
		`six.yaml:2: upstreams: "cass:abc": port "abc" is not a number`,
		`six.yaml:4: admin.listen: "127.0.0.1:70000": port 70000 is outside 0 to 65535`,
		`six.yaml:5: admin.token_file: open ` + missing,
		`six.yaml:7: tls.cert_file: open ` + missing,
		`six.yaml:8: tls.key_file: open ` + missing,
		`six.yaml:10: coordination.addresses: "redis": address redis: missing port`,
	}
	tests := []struct {
		name           string
		args, env      []string
		status         int
		stdout, stderr string   // substrings
		more           []string // further substrings of stderr
		lines          int      // lines of stderr, if not 0
	}{
		{name: "version", args: []string{"version"}, stdout: "cqlguard "},
		{name: "-version", args: []string{"-version"}, stdout: "cqlguard "},
		{name: "-h", args: []string{"-h"}, stdout: "-upstream"},
		{name: "help", args: []string{"help"}, stdout: "check-config"},
		{name: "serve -h", args: []string{"serve", "-h"}, stdout: "Usage: cqlguard [serve] [flags]"},
		{name: "a flag, then -h", args: []string{"-listen", "127.0.0.1:0", "-h"}, stdout: "Usage: cqlguard [serve] [flags]"},
		{name: "check-config -h", args: []string{"check-config", "-h"}, stdout: "Usage: cqlguard check-config [flags] FILE"},
		{name: "version -h", args: []string{"version", "-h"}, stdout: "Usage: cqlguard version"},
		{name: "help top", args: []string{"help", "top"}, stdout: "-token-file"},
		{name: "help of no command", args: []string{"help", "nope"}, status: 2, stderr: `help: unknown command "nope"`},
		{name: "help of two", args: []string{"help", "top", "version"}, status: 2, stderr: "help takes at most one COMMAND"},
		{name: "good file", args: []string{"check-config", good}, stdout: "good.yaml: ok"},
		{name: "bad file", args: []string{"check-config", bad}, status: 1, stderr: `bad.yaml:2: unknown key "upstrems"`},
		{name: "every problem at once", args: []string{"check-config", many}, status: 1, stderr: `many.yaml:2: unknown key "upstrems"`,
			more: []string{`many.yaml:4: "soon" is not a duration`, `many.yaml:3: mode: "mesh" is neither`, `many.yaml:6: limits.algorithm: "leaky"`, `many.yaml:7: limits.memory: 1024 bytes is outside`}},
		{name: "every mistake of a file", args: []string{"check-config", six}, status: 1, stderr: sixErrors[0], more: sixErrors[1:], lines: len(sixErrors)},
		{name: "serve refuses the same", args: []string{"-config", six}, status: 1, stderr: sixErrors[0], more: sixErrors[1:], lines: len(sixErrors)},
		{name: "a flag's address", args: []string{"check-config", "-admin", "127.0.0.1:65536", good}, status: 1, stderr: `admin.listen: "127.0.0.1:65536": port 65536 is outside 0 to 65535`},
		{name: "a class any client can claim: a warning, not an error", args: []string{"check-config", claimable}, stdout: "claimable.yaml: ok",
			stderr: "cqlguard: warning: " + claimable + ":6: clients.classes.0.match: class checkout is matched on application_names alone"},
		{name: "missing file", args: []string{"check-config", filepath.Join(dir, "none.yaml")}, status: 1, stderr: "none.yaml"},
		{name: "a flag mends the file", args: []string{"check-config", "-upstream", "127.0.0.3:9042", mendable}, stdout: "upstreams 127.0.0.3:9042"},
		{name: "the environment mends the file", args: []string{"check-config", mendable}, env: []string{"CQLGUARD_UPSTREAMS=127.0.0.4:9042"}, stdout: "upstreams 127.0.0.4:9042"},
		{name: "a flag over the environment", args: []string{"check-config", "-upstream", "127.0.0.3:9042", mendable}, env: []string{"CQLGUARD_UPSTREAMS=127.0.0.4:9042"}, stdout: "upstreams 127.0.0.3:9042"},
		{name: "not mended", args: []string{"check-config", mendable}, status: 1, stderr: `mendable.yaml:1: upstreams: "no-port"`},
		{name: "check-config without a file", args: []string{"check-config"}, status: 2, stderr: "check-config takes one FILE"},
		{name: "check-config with two", args: []string{"check-config", good, bad}, status: 2, stderr: "check-config takes one FILE"},
		{name: "a stray word", args: []string{"check-configs", good}, status: 2, stderr: `unknown command "check-configs"`, more: []string{"Usage: cqlguard [COMMAND]"}},
		{name: "a stray argument to serve", args: []string{"-listen", "127.0.0.1:0", "x.yaml"}, status: 2, stderr: `unexpected argument "x.yaml"`},
		{name: "version with arguments", args: []string{"version", "x"}, status: 2, stderr: "version takes no arguments"},
		{name: "an unknown flag", args: []string{"-nope"}, status: 2, stderr: "flag provided but not defined", more: []string{"Usage: cqlguard [serve] [flags]"}},
		{name: "an unknown flag of check-config", args: []string{"check-config", "-nope", good}, status: 2, stderr: "flag provided but not defined", more: []string{"Usage: cqlguard check-config"}},
		{name: "help names top", args: []string{"help"}, stdout: "\n  top "},
		{name: "top -h", args: []string{"top", "-h"}, stdout: "-token-file"},
		{name: "top with an argument", args: []string{"top", "x"}, status: 2, stderr: `top: unexpected argument "x"`},
		{name: "top -n 0", args: []string{"top", "-n", "0"}, status: 2, stderr: "top: -n 0"},
		{name: "top -once, no listener", args: []string{"top", "-once", "-admin", "127.0.0.1:1"}, status: 1,
			stdout: "error: cannot reach the admin listener: dial tcp 127.0.0.1:1", stderr: "cannot reach the admin listener"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(bin, tt.args...)
			cmd.Env = append(os.Environ(), tt.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			status := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				status = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(stderr.String(), "\n"); tt.lines != 0 && n != tt.lines {
				t.Errorf("cqlguard %q: %d lines of stderr, want %d:\n%s", tt.args, n, tt.lines, stderr.String())
			}
			for _, m := range tt.more {
				if !strings.Contains(stderr.String(), m) {
					t.Errorf("cqlguard %q: stderr %q, want it to hold %q too", tt.args, stderr.String(), m)
				}
			}
			if status != tt.status || !strings.Contains(stdout.String(), tt.stdout) || !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("cqlguard %q: status %d, stdout %q, stderr %q; want %d, %q, %q",
					tt.args, status, stdout.String(), stderr.String(), tt.status, tt.stdout, tt.stderr)
			}
		})
	}
}

// TestUsage checks cqlguard's usage, asked for with -h, --help or help:
// on stdout with status 0, it lists every command with what it does, then
// serve's flags, since serve is the default.
func TestUsage(t *testing.T) {
	t.Parallel()
	want := []string{
		"Usage: cqlguard [COMMAND] [flags]",
		"\n  serve         run the proxy (the default)\n",
		"\n  check-config  check a configuration file",
		"\n  top           watch a running proxy",
		"\n  version       print the version",
		"\n  help          print this, or a command's usage\n",
		`Run "cqlguard COMMAND -h"`,
		"CQLGUARD_UPSTREAMS",
	}
	serve, _ := newServeFlags()
	serve.VisitAll(func(f *flag.Flag) { want = append(want, "\n  -"+f.Name+" ") })
	for _, args := range [][]string{{"-h"}, {"--help"}, {"-help"}, {"help"}} {
		var stdout, stderr bytes.Buffer
		if status := cli(args, &stdout, &stderr); status != 0 || stderr.Len() > 0 {
			t.Errorf("cqlguard %q: status %d, stderr %q; want 0 and nothing", args, status, stderr.String())
		}
		out := stdout.String()
		for _, w := range want {
			// A flag without a value's type ends its line.
			if !strings.Contains(out, w) && !strings.Contains(out, strings.TrimSuffix(w, " ")+"\n") {
				t.Errorf("cqlguard %q printed\n%s\nwant it to hold %q", args, out, w)
			}
		}
		if i, j := strings.Index(out, "  help "), strings.Index(out, "  -upstream"); i < 0 || j < i {
			t.Errorf("cqlguard %q: the commands come before serve's flags:\n%s", args, out)
		}
	}
}

// Every command's -h prints its own usage, on stdout with status 0.
func TestCommandUsage(t *testing.T) {
	t.Parallel()
	for _, c := range commands {
		for _, args := range [][]string{{c.name, "-h"}, {"help", c.name}} {
			var stdout, stderr bytes.Buffer
			status := cli(args, &stdout, &stderr)
			if status != 0 || stderr.Len() > 0 || !strings.HasPrefix(stdout.String(), "Usage: "+c.synopsis+"\n") {
				t.Errorf("cqlguard %q: status %d, stdout %q, stderr %q; want 0 and its usage", args, status, stdout.String(), stderr.String())
			}
			c.flags().VisitAll(func(f *flag.Flag) {
				if !strings.Contains(stdout.String(), "  -"+f.Name) {
					t.Errorf("cqlguard %q: usage without -%s", args, f.Name)
				}
			})
		}
	}
}

// buildCqlguard builds the command into a temporary directory and returns
// the binary's path.
func buildCqlguard(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "cqlguard")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building: %v\n%s", err, out)
	}
	return bin
}

// writeFile writes text to the file name in dir and returns its path.
func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestVersionAfterMakeBuild builds the binary with make build, as an
// operator does, with Go's own stamp off as GOFLAGS=-buildvcs=false turns
// it off: version names the revision git describe does, and, where Git
// cannot read the checkout, the build still succeeds and names none.
func TestVersionAfterMakeBuild(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"make", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	describe := exec.Command("git", "describe", "--always", "--dirty")
	describe.Dir = root
	out, err := describe.Output()
	if err != nil {
		t.Skipf("not a Git checkout: git describe: %v", err)
	}
	rev := strings.TrimSpace(string(out))
	tests := []struct {
		name, env, want string
	}{
		{name: "in the checkout", want: " revision " + rev + " "},
		{name: "Git cannot read it", env: "GIT_DIR=" + filepath.Join(t.TempDir(), "none")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bin := filepath.Join(t.TempDir(), "cqlguard")
			mk := exec.Command("make", "-s", "-C", root, "build", "CQLGUARD="+bin)
			mk.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
			if tt.env != "" {
				mk.Env = append(mk.Env, tt.env)
			}
			if out, err := mk.CombinedOutput(); err != nil {
				t.Fatalf("make build: %v\n%s", err, out)
			}
			out, err := exec.Command(bin, "version").Output()
			if err != nil {
				t.Fatal(err)
			}
			v := string(out)
			if tt.want == "" {
				if !strings.HasPrefix(v, "cqlguard ") || strings.Contains(v, "revision") {
					t.Errorf("version printed %q, want no revision", v)
				}
			} else if !strings.Contains(v, tt.want) {
				t.Errorf("version printed %q, want it to hold %q", v, tt.want)
			}
		})
	}
}

// describeBuild prefers the stamped revision to Go's, and names Go's when
// there is no stamp.
func TestDescribeBuild(t *testing.T) {
	t.Parallel()
	vcs := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.modified", Value: "true"}}
	tests := []struct {
		name     string
		settings []debug.BuildSetting
		stamp    string
		want     string
	}{
		{name: "neither", want: "cqlguard (devel) go1.26"},
		{name: "Go's", settings: vcs, want: "cqlguard (devel) revision 0123abcd (modified) go1.26"},
		{name: "the stamp", stamp: "v1.2-3-g0123abc-dirty", want: "cqlguard (devel) revision v1.2-3-g0123abc-dirty go1.26"},
		{name: "the stamp over Go's", settings: vcs, stamp: "0123abc", want: "cqlguard (devel) revision 0123abc go1.26"},
	}
	for _, tt := range tests {
		bi := &debug.BuildInfo{GoVersion: "go1.26", Main: debug.Module{Version: "(devel)"}, Settings: tt.settings}
		if got := describeBuild(bi, tt.stamp); got != tt.want {
			t.Errorf("%s: describeBuild = %q, want %q", tt.name, got, tt.want)
		}
	}
}
