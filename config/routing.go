package config

import (
	"fmt"
	"time"
)

// RoutingConfig configures where cluster mode runs each request.
type RoutingConfig struct {
	// Replicas, in cluster mode, runs each request with a partition on a
	// node that holds it: the proxy reads the cluster's ring and each
	// client connection opens a connection of its own to each replica its
	// requests go to, logged in as the client. Off, every request of a
	// connection runs on the one node it was opened to.
	Replicas bool `yaml:"replicas"`
	// LocalDatacenter is the datacenter whose replicas are preferred; the
	// others serve a partition only when it has no replica there. Empty
	// means the datacenter of the upstreams.
	LocalDatacenter string `yaml:"local_datacenter"`
	// Refresh is how often the ring is read again; a node the proxy
	// cannot reach also makes it read the ring soon.
	Refresh Duration `yaml:"refresh"`
	// ShardAware, with Replicas, runs each routed request on the shard of
	// its replica that owns its token, when the node advertises its
	// shards and a shard-aware port (ScyllaDB): each client connection
	// opens its connections to a node per shard. Off, one per node.
	ShardAware bool `yaml:"shard_aware"`
	// HedgeAfter, with Replicas, sends a routed read that its replica has
	// not answered within it again, as it was, to another replica of its
	// partition the connection is ready on; the client gets the first
	// answer. 0, the default, hedges nothing, as drivers' speculative
	// execution is off unless asked for.
	HedgeAfter Duration `yaml:"hedge_after"`
	// HedgeBudget bounds the reads a client connection hedges to this
	// share of those it could, plus a few at once.
	HedgeBudget float64 `yaml:"hedge_budget"`
}

// defaultRouting is the routing section's default: replicas in cluster
// mode, the ring read again every 10 seconds, a few queries each time,
// and requests to the shard that owns them where nodes say which; no
// hedging, and a tenth of the reads when it is on.
func defaultRouting() RoutingConfig {
	return RoutingConfig{Replicas: true, Refresh: Duration(10 * time.Second), ShardAware: true, HedgeBudget: 0.1}
}

func (r *RoutingConfig) validate(ps *problems) {
	if r.Refresh < Duration(time.Second) {
		ps.add(fmt.Errorf("%s is under 1s", time.Duration(r.Refresh)), "routing", "refresh")
	}
	if r.HedgeAfter < 0 {
		ps.add(fmt.Errorf("%s is negative", time.Duration(r.HedgeAfter)), "routing", "hedge_after")
	}
	if !(r.HedgeBudget > 0 && r.HedgeBudget <= 1) {
		ps.add(fmt.Errorf("%g is not in (0, 1]", r.HedgeBudget), "routing", "hedge_budget")
	}
}
