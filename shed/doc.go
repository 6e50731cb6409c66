// Package shed decides which requests to refuse when the cluster behind the
// proxy slows down, so that the important ones stay fast.
//
// It keeps two signals per upstream node, each in constant memory and
// recorded without a lock or an allocation: a [Latency], the node's answer
// times over a short and a long window, whose ratio of quantiles (long over
// short, about 1 when healthy, falling as latency rises) says that the node
// is slower now than it usually is; and a [Queue], the time requests wait
// inside the proxy before they are sent, which, like CoDel, says that a
// queue is standing when even the shortest wait of a whole interval is over
// a target. A [Controller] turns the two into a fraction of requests to shed
// for each tier: the least important tier in use first, the next only once
// that one is shed entirely, rising while a signal is unhealthy and falling
// back when it recovers, and never tier 0. A slowdown counts only over an
// absolute floor of the short-term quantile, and shedding that the signals
// do not confirm for a while was a false start, which ends at once
// instead of recovering as slowly as after an overload. A controller's
// updates can be kept as a trace ([Tick], [WriteTrace], [ReadTrace]) and
// replayed into another, to the same decisions.
//
// The package knows durations, nanosecond clock readings and tiers only:
// the caller times requests, picks the node, feeds the signals, calls
// [Controller.Update] on a ticker and answers a shed request however the
// protocol wants.
package shed
