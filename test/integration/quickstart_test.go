package integration

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// block is a fenced code block of a Markdown document.
type block struct {
	lang string
	text string
}

// quickStartBlocks returns the fenced code blocks of README.md's
// "## Quick start" section, in order, each without the indentation of its
// fence.
func quickStartBlocks(t *testing.T) []block {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(repoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []block
	var cur *block
	var indent string
	in := false
	sc := bufio.NewScanner(strings.NewReader(string(readme)))
	for sc.Scan() {
		line := sc.Text()
		if !in {
			in = line == "## Quick start"
			continue
		}
		if cur == nil && strings.HasPrefix(line, "## ") {
			break
		}
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			indent = line[:len(line)-len(trimmed)]
			cur = &block{lang: strings.TrimPrefix(trimmed, "```")}
		case cur != nil && trimmed == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += strings.TrimPrefix(line, indent) + "\n"
		}
	}
	if !in || cur != nil {
		t.Fatal("README.md has no Quick start section, or an unclosed code block in it")
	}
	return blocks
}

// quickStartSetup is the Quick start's first block, which TestMain (the
// local Cassandra) and TestQuickStart (the binaries) do for it.
var quickStartSetup = []string{
	"bash test/cassandra/cassandra.sh start",
	"make build",
	"go build -o bin/cql ./examples/cql",
}

// TestQuickStart follows README.md's Quick start literally, against the
// local Cassandra: in a fresh directory holding bin/cqlguard and bin/cql
// built from this tree, it runs each shell block with bash, writes the
// YAML block to cqlguard.yaml, and checks each text block against what the
// shell block before it printed, a number standing for any number. So the
// test fails when the README's commands, configuration or the refusal it
// shows drift from what cqlguard does.
func TestQuickStart(t *testing.T) {
	skipUnlessEnabled(t)
	blocks := quickStartBlocks(t)
	if len(blocks) == 0 || blocks[0].lang != "sh" {
		t.Fatalf("the Quick start's first block should be the set-up, in sh; blocks: %+v", blocks)
	}
	var setup []string
	for _, line := range strings.Split(strings.TrimSpace(blocks[0].text), "\n") {
		cmd, _, _ := strings.Cut(line, "#")
		setup = append(setup, strings.TrimSpace(cmd))
	}
	if strings.Join(setup, "\n") != strings.Join(quickStartSetup, "\n") {
		t.Fatalf("the Quick start's set-up block is\n%s\nwhich this test does not do: it does\n%s",
			strings.Join(setup, "\n"), strings.Join(quickStartSetup, "\n"))
	}

	dir := t.TempDir()
	for bin, pkg := range map[string]string{"cqlguard": "./cmd/cqlguard", "cql": "./examples/cql"} {
		build := exec.Command("go", "build", "-o", filepath.Join(dir, "bin", bin), pkg)
		build.Dir = repoRoot()
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CQLGUARD_") {
			env = append(env, kv)
		}
	}

	var last string // what the last shell block printed
	var yamls, texts int
	refusalShown := false
	for i, b := range blocks[1:] {
		switch b.lang {
		case "sh":
			last = runQuickStartBlock(t, dir, env, i+1, b.text)
		case "yaml":
			yamls++
			if err := os.WriteFile(filepath.Join(dir, "cqlguard.yaml"), []byte(b.text), 0o600); err != nil {
				t.Fatal(err)
			}
		case "text":
			texts++
			refusalShown = refusalShown || strings.Contains(b.text, "Per-partition rate limit reached")
			for _, want := range strings.Split(strings.TrimSpace(b.text), "\n") {
				if !outputHas(last, want) {
					t.Errorf("block %d: the block before printed no line like %q; it printed:\n%s", i+1, want, last)
				}
			}
		default:
			t.Fatalf("block %d: a %q block, which this test does not know how to follow", i+1, b.lang)
		}
	}
	if yamls != 1 || texts == 0 || !refusalShown {
		t.Errorf("the Quick start should write one configuration file (%d yaml blocks) and show a refusal in its output (%d text blocks, a refusal: %v)",
			yamls, texts, refusalShown)
	}
}

// runQuickStartBlock runs script with bash in dir and returns what it
// printed. What it leaves running in the background (cqlguard) is stopped
// when the test ends, and waited for, so that its ports are free for the
// next test.
func runQuickStartBlock(t *testing.T, dir string, env []string, n int, script string) string {
	t.Helper()
	// A file rather than a pipe: a process the block leaves running holds
	// it open, and Wait would wait for that process too.
	out, err := os.CreateTemp(t.TempDir(), "block-*.out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", script)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	t.Cleanup(func() { stopGroup(t, pgid) })
	runErr := cmd.Wait()
	printed, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	if runErr != nil {
		t.Fatalf("block %d failed: %v\n%s\nit printed:\n%s", n, runErr, script, printed)
	}
	t.Logf("block %d:\n%s%s", n, script, printed)
	return string(printed)
}

// stopGroup sends SIGTERM to the process group pgid and waits up to 30 s
// for its processes to end, then kills what is left.
func stopGroup(t *testing.T, pgid int) {
	if err := syscall.Kill(-pgid, syscall.SIGTERM); errors.Is(err, syscall.ESRCH) {
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for groupRuns(pgid) {
		if time.Now().After(deadline) {
			t.Errorf("process group %d still runs 30 s after SIGTERM; killing it", pgid)
			syscall.Kill(-pgid, syscall.SIGKILL)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// groupRuns reports whether a process of group pgid runs, from /proc: a
// zombie no longer runs (its sockets are closed), and whether it is reaped
// soon depends on the machine's init.
func groupRuns(pgid int) bool {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		// After the command name in parentheses: state, ppid, pgrp.
		_, rest, ok := strings.Cut(string(b), ") ")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) >= 3 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			return true
		}
	}
	return false
}

// outputHas reports whether a line of out matches want, where a word of
// want made of digits alone stands for any such word.
func outputHas(out, want string) bool {
	words := strings.Split(strings.TrimSpace(want), " ")
	for i, w := range words {
		if w != "" && strings.Trim(w, "0123456789") == "" {
			words[i] = `\d+`
		} else {
			words[i] = regexp.QuoteMeta(w)
		}
	}
	re := regexp.MustCompile("^" + strings.Join(words, " ") + "$")
	for _, line := range strings.Split(out, "\n") {
		if re.MatchString(strings.TrimSpace(line)) {
			return true
		}
	}
	return false
}
