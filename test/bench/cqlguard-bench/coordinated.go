package main

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"

	"github.com/cqlguard/cqlguard/test/load"
)

// countedLimits limits bench.kv's reads far above what any run offers, so
// that every read is counted and none is refused.
const countedLimits = `limits:
  keyspaces:
    bench:
      tables:
        kv:
          max_reads_per_second: 1000000000
`

// coordinatedRows measures EXECUTE v4 through a cqlguard that counts every
// read against a limit, alone and coordinated through a Redis the suite
// starts with test/redis/redis.sh: what coordination costs the request
// path (its fleet table) and the proxy (its reports). floor, when set, is
// the Go relay's row of the same load, which the rows are compared with.
func (s *suite) coordinatedRows(ctx context.Context, floor *row) []*row {
	alone := &row{name: "EXECUTE v4 none, counted", path: "cqlguard", relay: floor, cost: &proxyCost{}}
	coord := &row{name: "EXECUTE v4 none, counted, coordinated", path: "cqlguard", relay: floor, cost: &proxyCost{}}
	rows := []*row{alone, coord}
	redisAddr, stop, err := startRedis(ctx, s.redisScript)
	if err != nil {
		for _, r := range rows {
			r.note = "TODO: " + firstLine(err.Error())
		}
		return rows
	}
	defer stop()
	for _, r := range rows {
		extra := countedLimits
		if r == coord {
			extra += "coordination:\n  addresses: [" + redisAddr + "]\n"
		}
		px, err := s.startProxy(ctx, strings.ReplaceAll(r.name, " ", "-"), extra)
		if err != nil {
			r.note = "TODO: " + firstLine(err.Error())
			continue
		}
		spec := load.DefaultSpec()
		spec.Addr, spec.Conns = px.addr, s.conns
		err = s.measure(ctx, spec, r, px)
		px.stop()
		if err != nil {
			r.note = "TODO: " + firstLine(err.Error())
		}
	}
	return rows
}

// startRedis starts a Redis on a free loopback port with script, and
// returns its address and a function that stops it.
func startRedis(ctx context.Context, script string) (string, func(), error) {
	run := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...).Output()
		if err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				return "", fmt.Errorf("%s %s: %w: %s", script, args[0], err, firstLine(string(ee.Stderr)))
			}
			return "", fmt.Errorf("%s %s: %w", script, args[0], err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	if _, err := run("install"); err != nil {
		return "", nil, err
	}
	ports, err := freePorts(1)
	if err != nil {
		return "", nil, err
	}
	port := strconv.Itoa(ports[0])
	if _, err := run("start", port); err != nil {
		return "", nil, err
	}
	return "127.0.0.1:" + port, func() { run("stop", "--wipe", port) }, nil
}
