package proxy

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cqlguard/cqlguard/frame"
)

// Directions of frames, used as metric labels.
const (
	dirRequest  = 0 // client to upstream
	dirResponse = 1 // upstream to client
)

var dirNames = [2]string{"request", "response"}

// maxOpcode bounds the per-opcode counters; unknown opcodes count as 0x1f.
const maxOpcode = 0x20

// Metrics are the proxy's Prometheus metrics. Counters used per frame are
// resolved once, so counting costs an atomic add and no label lookup.
type Metrics struct {
	clientConns     prometheus.Gauge
	clientConnsTot  prometheus.Counter
	upstreamDialErr prometheus.Counter
	frames          [2][maxOpcode]prometheus.Counter
	bytes           [2][maxOpcode]prometheus.Counter
	upstreamLatency prometheus.Histogram
	protocolErrors  *prometheus.CounterVec
	// versionRefusals counts protocol versions refused while drivers
	// negotiate, which are not errors.
	versionRefusals prometheus.Counter
	// abandoned counts requests in flight when their client left.
	abandoned      prometheus.Counter
	filteredEvents prometheus.Counter
	// inFlightWaits and proxyInFlightWaits count waits at
	// max_in_flight_per_connection and at max_in_flight.
	inFlightWaits      prometheus.Counter
	proxyInFlightWaits prometheus.Counter
	bufferWaits        prometheus.Counter
	frameWaits         prometheus.Counter
	// rejections are by keyspace, table, op and outcome ("rejected" or
	// "dry_run"); resolved per rejection, which is off the forwarding path.
	rejections *prometheus.CounterVec
	// routed counts requests with a partition, by where they ran
	// (legs.go); legsOpened and legsFailed count the connections sessions
	// opened to other nodes, and those they could not; ringNodes is how
	// many nodes the ring routing reads has (ringsource.go).
	routed     [routedOutcomes]prometheus.Counter
	legsOpened prometheus.Counter
	legsFailed prometheus.Counter
	ringNodes  prometheus.Gauge
	// reprepares counts the requests routed to another node that it
	// answered Unprepared, whose statements were prepared there again
	// (reprepare.go).
	reprepares prometheus.Counter
	// hedges counts the reads hedged to another replica, hedgesWon those
	// of them it answered first, and hedgesRefused those the session's
	// budget did not allow (hedge.go).
	hedges, hedgesWon, hedgesRefused prometheus.Counter
}

// Where a request with a partition ran, as cqlguard_routed_requests_total
// counts it.
const (
	routedReplica  = iota // on a node that holds the partition
	routedFallback        // on the connection's node, which does not, or may not
	routedOutcomes
)

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		clientConns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cqlguard_client_connections", Help: "Client connections open now."}),
		clientConnsTot: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cqlguard_client_connections_total", Help: "Client connections accepted."}),
		upstreamDialErr: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cqlguard_upstream_dial_errors_total", Help: "Failed attempts to connect to an upstream node."}),
		upstreamLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "cqlguard_upstream_request_duration_seconds",
			Help:    "Time from forwarding a request upstream to forwarding its response to the client.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18),
		}),
		protocolErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cqlguard_protocol_errors_total", Help: "Malformed or refused frames, by reason."}, []string{"reason"}),
		versionRefusals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cqlguard_protocol_version_refusals_total",
			Help: "Connections told the protocol version they asked for is not spoken, as drivers negotiating a version expect; not an error."}),
		abandoned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cqlguard_client_abandoned_requests_total",
			Help: "Requests in flight when their client closed or reset its connection; the upstream's answers to them are dropped."}),
		filteredEvents: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cqlguard_events_filtered_total", Help: "Topology and status events withheld from drivers."}),
		bufferWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cqlguard_buffered_bytes_waits_total",
			Help: "Times a write to a socket waited because max_buffered_bytes_total bytes were queued over all sockets; the proxy reads nothing more from the other side meanwhile."}),
		frameWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cqlguard_frame_bytes_waits_total",
			Help: "Times a frame over 64 KiB waited to be read because max_frame_bytes_total bytes of such frames were held over all connections; its connection is not read meanwhile."}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cqlguard_rate_limit_rejections_total",
			Help: "Requests over a partition's limit, by keyspace, table, op and outcome (rejected, or dry_run: counted but forwarded)."},
			[]string{"keyspace", "table", "op", "outcome"}),
	}
	waits := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cqlguard_client_in_flight_waits_total",
		Help: "Times a client connection's request path waited for a bound on requests in flight (limit: max_in_flight_per_connection, or max_in_flight over all connections); the proxy reads nothing more from that client until a request is answered."},
		[]string{"limit"})
	routed := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cqlguard_routed_requests_total",
		Help: "Requests with a partition, in front of a cluster whose ring the proxy knows, by where they ran: replica (a node that holds the partition), or fallback (the connection's first node: no replica could be reached or brought ready)."},
		[]string{"to"})
	m.routed[routedReplica] = routed.WithLabelValues("replica")
	m.routed[routedFallback] = routed.WithLabelValues("fallback")
	m.legsOpened = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cqlguard_upstream_routed_connections_total",
		Help: "Connections client sessions opened to nodes other than their first, to run requests routed there."})
	m.ringNodes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "cqlguard_ring_nodes",
		Help: "Nodes of the cluster's ring as routing last read it; 0 until it is read, and without routing."})
	m.legsFailed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cqlguard_upstream_routed_connection_errors_total",
		Help: "Connections to a replica a session could not open, or log in on; its requests ran on the session's first node."})
	m.reprepares = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cqlguard_routed_reprepares_total",
		Help: "Requests routed to a node other than their connection's first that it answered Unprepared, as a node that forgot their statements does: the statements were prepared there again and the request sent again, its client seeing only the answer to that."})
	hedges := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cqlguard_routed_hedges_total",
		Help: "Routed reads unanswered after routing.hedge_after, by outcome: sent again to another replica (sent), whose answer came first (won), or not sent for the connection's routing.hedge_budget (refused)."},
		[]string{"outcome"})
	m.hedges = hedges.WithLabelValues("sent")
	m.hedgesWon = hedges.WithLabelValues("won")
	m.hedgesRefused = hedges.WithLabelValues("refused")
	m.inFlightWaits = waits.WithLabelValues("max_in_flight_per_connection")
	m.proxyInFlightWaits = waits.WithLabelValues("max_in_flight")
	frames := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cqlguard_frames_total", Help: "Frames forwarded or answered, by direction and opcode."},
		[]string{"direction", "opcode"})
	bytes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cqlguard_frame_bytes_total", Help: "Frame bytes forwarded or answered, by direction and opcode."},
		[]string{"direction", "opcode"})
	for d := range 2 {
		for op := range maxOpcode {
			name := frame.Opcode(op).String()
			if name == "UNKNOWN" && op != maxOpcode-1 {
				continue
			}
			m.frames[d][op] = frames.WithLabelValues(dirNames[d], name)
			m.bytes[d][op] = bytes.WithLabelValues(dirNames[d], name)
		}
	}
	reg.MustRegister(m.clientConns, m.clientConnsTot, m.upstreamDialErr, m.upstreamLatency,
		m.protocolErrors, m.versionRefusals, m.abandoned, m.filteredEvents, waits, m.bufferWaits, m.frameWaits, m.rejections, frames, bytes,
		routed, m.legsOpened, m.legsFailed, m.ringNodes, m.reprepares, hedges)
	return m
}

// frame counts one frame of n bytes.
func (m *Metrics) frame(dir int, op frame.Opcode, n int) {
	i := int(op)
	if i >= maxOpcode || m.frames[dir][i] == nil {
		i = maxOpcode - 1
	}
	m.frames[dir][i].Inc()
	m.bytes[dir][i].Add(float64(n))
}

// registerLoadGauges registers gauges that read p's bounds when scraped, so
// that the request path updates nothing for them.
func registerLoadGauges(reg prometheus.Registerer, p *Proxy) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cqlguard_requests_in_flight",
			Help: "Requests forwarded upstream and not answered yet, over all client connections (bounded by max_in_flight)."},
			func() float64 { return float64(p.inflight.Taken()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cqlguard_frame_bytes",
			Help: "Bytes of frames over 64 KiB being read or handled, over all connections (bounded by max_frame_bytes_total)."},
			func() float64 { return float64(p.requestFrames.Taken() + p.responseFrames.Taken()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cqlguard_buffered_bytes",
			Help: "Bytes queued or being written to sockets, over all connections (bounded by max_buffered_bytes_total); 0 when that is 0."},
			func() float64 {
				if p.buffered == nil {
					return 0
				}
				return float64(p.buffered.Taken())
			}),
	)
}
