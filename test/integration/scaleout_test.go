package integration

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/cqlguard/cqlguard/ratelimit"
	"github.com/cqlguard/cqlguard/test/bench/load"
	"github.com/cqlguard/cqlguard/test/fakenode"
	"github.com/cqlguard/cqlguard/test/redistest"
)

// TestScaleOut prints docs/scale-out.md's accuracy table from separate
// cqlguard processes: 2, 4 and 8 of them in front of a fake node,
// coordinated through one real Redis, each offered its part of one hot
// partition's load by a load generator:
// CQLGUARD_SCALEOUT=1 go test ./test/integration -run ScaleOut -v.
func TestScaleOut(t *testing.T) {
	if os.Getenv("CQLGUARD_SCALEOUT") == "" {
		t.Skip("set CQLGUARD_SCALEOUT=1 to print the table")
	}
	redisAddr := redistest.Start(t)
	bin := buildCqlguard(t)
	node := startFakeNode(t)
	const limit, seconds = 1000, 10
	t.Log("| algorithm | proxies | split | V/L | admitted/s, seconds 2-9 | of the curve | worst second | seconds to hold |")
	t.Log("| --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, alg := range []string{ratelimit.AlgorithmTokenBucket, ratelimit.AlgorithmScylla} {
		for _, n := range []int{2, 4, 8} {
			for _, skewed := range []bool{false, true} {
				split := make([]float64, n)
				for i := range split {
					split[i] = 1 / float64(n)
					if skewed {
						split[i] = 0.2 / float64(n-1)
					}
				}
				name := "even"
				if skewed {
					split[0], name = 0.8, "80% on one"
				}
				for _, vl := range []float64{0.5, 2, 10} {
					prefix := fmt.Sprintf("scaleout:%d:", time.Now().UnixNano())
					var specs []load.Spec
					var procs []cqlguardProcess
					for i := range n {
						p := startScaleOutProxy(t, bin, node.Addr(), alg, limit, redisAddr, prefix)
						procs = append(procs, p)
						spec := load.DefaultSpec()
						spec.Name = fmt.Sprintf("proxy%d", i)
						spec.Addr, spec.Conns, spec.Concurrency = p.addr, 1, 16
						spec.Rate = vl * limit * split[i]
						spec.Dist, spec.HotKeys, spec.HotFraction, spec.OptIn = load.Hot, 1, 1, true
						specs = append(specs, spec)
					}
					var admitted []float64
					_, err := load.Run(context.Background(), specs, load.Options{
						Duration: seconds * time.Second,
						Report: func(s load.Second) {
							ok := 0.0
							for _, l := range s.Loaders {
								ok += float64(l.Succeeded)
							}
							admitted = append(admitted, ok/s.Length.Seconds())
						},
					})
					if err != nil {
						t.Fatal(err)
					}
					want := min(vl, 1) * limit
					worst, hold, mean := 0.0, -1, 0.0
					for i, x := range admitted {
						dev := math.Abs(x-want) / want
						if i >= 2 {
							worst = max(worst, dev)
							mean += x / float64(len(admitted)-2)
						}
						if dev > 0.1 {
							hold = -1
						} else if hold < 0 {
							hold = i
						}
					}
					t.Logf("| %s | %d | %s | %g | %.0f | %+.1f%% | %+.1f%% | %d |", alg, n, name, vl, mean, 100*(mean-want)/want, 100*worst, hold)
					for _, p := range procs {
						p.stop()
					}
				}
			}
		}
	}
}

// startScaleOutProxy starts a cqlguard process, bin, in front of upstream,
// limiting bench.kv's reads to limit per partition with algorithm,
// coordinated through Redis at redisAddr under prefix, and waits until it
// is ready.
func startScaleOutProxy(t *testing.T, bin, upstream, algorithm string, limit int, redisAddr, prefix string) cqlguardProcess {
	t.Helper()
	p := startCqlguard(t, bin, func(addr, admin string) string {
		return fmt.Sprintf(`listen: %s
upstreams: [%s]
admin: {listen: "%s"}
log: {level: warn}
limits:
  algorithm: %s
  keyspaces: {bench: {tables: {kv: {max_reads_per_second: %d}}}}
coordination: {addresses: [%s], key_prefix: %q}
`, addr, upstream, admin, algorithm, limit, redisAddr, prefix)
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get("http://" + p.admin + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("cqlguard at %s not ready after 20 s", p.addr)
		}
	}
}

// startFakeNode starts a fake node on a loopback port until the test ends.
func startFakeNode(t *testing.T) *fakenode.Node {
	t.Helper()
	node, err := fakenode.Start("127.0.0.1:0", fakenode.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Close)
	return node
}
