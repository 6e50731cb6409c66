package gocqlload

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/cqlguard/cqlguard/test/fakenode"
)

func TestRun(t *testing.T) {
	t.Parallel()
	node, err := fakenode.Start("127.0.0.1:0", fakenode.Options{PeersV2: true})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	for _, tc := range []struct {
		name       string
		rate       float64
		noCoalesce bool
	}{
		{name: "saturated"},
		{name: "fixed rate", rate: 1000},
		{name: "fixed rate, no coalescing", rate: 1000, noCoalesce: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := DefaultSpec()
			spec.Addr, spec.Conns, spec.Concurrency = node.Addr(), 2, 8
			spec.Rate, spec.NoCoalesce = tc.rate, tc.noCoalesce
			spec.Warmup, spec.Duration = 200*time.Millisecond, time.Second
			sum, err := Run(context.Background(), spec)
			if err != nil {
				t.Fatalf("%v (%+v)", err, sum)
			}
			if sum.Failed > 0 || len(sum.Errors) > 0 || sum.Succeeded == 0 || sum.P50 <= 0 || sum.P99 < sum.P50 {
				t.Errorf("summary %+v", sum)
			}
			if tc.rate > 0 && math.Abs(sum.Rate-tc.rate) > 0.1*tc.rate {
				t.Errorf("rate %.0f/s, want %.0f/s", sum.Rate, tc.rate)
			}
		})
	}
}

func TestRunErrors(t *testing.T) {
	t.Parallel()
	node, err := fakenode.Start("127.0.0.1:0", fakenode.Options{PeersV2: true, RejectEvery: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	spec := DefaultSpec()
	spec.Addr, spec.Conns, spec.Concurrency, spec.Rate = node.Addr(), 1, 4, 1000
	spec.Warmup, spec.Duration = 0, 500*time.Millisecond
	sum, err := Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Failed == 0 || sum.Succeeded == 0 || len(sum.Errors) == 0 {
		t.Errorf("every other request rejected, but summary %+v", sum)
	}

	spec.Concurrency = 0
	if _, err := Run(context.Background(), spec); err == nil {
		t.Error("no goroutines accepted")
	}
}
