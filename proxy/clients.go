package proxy

// Client classes and request units (clients and request_units in the
// configuration): each connection is of a class, matched by what the proxy
// sees of it, and each request it sends is priced in request units and
// charged to its class, whose budget, when it has one, refuses the class's
// requests while it is in debt. What is known of the price when the
// request is forwarded (fixed, its bytes) is charged then, the rest once
// answered, or its time in flight when its connection ends first: a
// client's requests in flight count against its budget, and leaving
// before the answers escapes nothing.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/ratelimit"
)

// clientClasses are the classes in effect: tried in order, the default
// last. A reload puts new ones in place; a connection takes its class again
// on its next request.
type clientClasses struct {
	classes []*clientClass
	units   config.RequestUnitsConfig
}

// clientClass is one class, with what it matches and its counters.
type clientClass struct {
	name string
	tier int
	tag  uint16 // its place among the classes, from 1, for /hot
	// Each set is nil when its list is not set.
	users, apps, ids, drivers map[string]bool
	prefixes                  []netip.Prefix
	// budget is max_units_per_second; nil for none. A budget kept from the
	// classes a reload replaced takes perSecond and burst when the new
	// classes are applied.
	budget                *ratelimit.Budget
	perSecond, burst      float64
	requests, units       prometheus.Counter
	refusals, dryRefusals prometheus.Counter
	conns                 prometheus.Gauge
}

// clientIdentity is what the proxy knows of a connection's client.
type clientIdentity struct {
	user, app, id, driver string
	addr                  netip.Addr
}

// clientMetrics are the classes' metrics, which outlive reloads.
type clientMetrics struct {
	requests, units, refusals *prometheus.CounterVec
	conns, info               *prometheus.GaugeVec
}

func newClientMetrics(reg prometheus.Registerer) *clientMetrics {
	m := &clientMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cqlguard_client_requests_total",
			Help: "QUERY, EXECUTE and BATCH requests by client class (clients), refused or not.",
		}, []string{"class"}),
		units: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cqlguard_request_units_total",
			Help: "Request units charged, by client class: each forwarded request's price (request_units), counted once it is answered or its connection ends.",
		}, []string{"class"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cqlguard_client_budget_refusals_total",
			Help: "Requests of a client class in debt on its max_units_per_second, by outcome: rejected, or dry_run (limits.dry_run: let through).",
		}, []string{"class", "outcome"}),
		conns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cqlguard_client_class_connections",
			Help: "Client connections by the class they had at their last request.",
		}, []string{"class"}),
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cqlguard_client_class_info",
			Help: "The client classes configured, with their tier, and the budget in request units per second (0: none) as the value.",
		}, []string{"class", "tier"}),
	}
	reg.MustRegister(m.requests, m.units, m.refusals, m.conns, m.info)
	return m
}

// newClientClasses builds the classes of cfg, keeping the budgets of
// classes of old with the same name, so that a reload neither forgives a
// debt nor refills a budget. It changes nothing of old: apply sets the
// kept budgets' rates once the classes are in effect.
func newClientClasses(cfg config.ClientsConfig, units config.RequestUnitsConfig, old *clientClasses, m *clientMetrics, now int64) (*clientClasses, error) {
	kept := map[string]*ratelimit.Budget{}
	if old != nil {
		for _, c := range old.classes {
			if c.budget != nil {
				kept[c.name] = c.budget
			}
		}
	}
	cc := &clientClasses{units: units}
	for _, cl := range append(append([]config.ClientClass(nil), cfg.Classes...), cfg.Default) {
		c := &clientClass{
			name: cl.Name, tier: cl.TierOrDefault(), perSecond: cl.MaxUnitsPerSecond, burst: cl.Burst(),
			users: set(cl.Match.Users), apps: set(cl.Match.ApplicationNames),
			ids: set(cl.Match.ClientIDs), drivers: set(cl.Match.DriverNames),
			requests: m.requests.WithLabelValues(cl.Name), units: m.units.WithLabelValues(cl.Name),
			refusals: m.refusals.WithLabelValues(cl.Name, "rejected"), dryRefusals: m.refusals.WithLabelValues(cl.Name, "dry_run"),
			conns: m.conns.WithLabelValues(cl.Name),
		}
		var err error
		if c.prefixes, err = cl.Match.Prefixes(); err != nil {
			return nil, fmt.Errorf("clients: class %s: %w", cl.Name, err)
		}
		if cl.MaxUnitsPerSecond > 0 {
			if c.budget = kept[cl.Name]; c.budget == nil {
				c.budget = ratelimit.NewBudget(cl.MaxUnitsPerSecond, cl.Burst(), now)
			}
		}
		cc.classes = append(cc.classes, c)
		c.tag = uint16(len(cc.classes))
	}
	// The default class matches every connection, whatever its match says.
	def := cc.classes[len(cc.classes)-1]
	def.users, def.apps, def.ids, def.drivers, def.prefixes = nil, nil, nil, nil, nil
	return cc, nil
}

// apply is the part of putting cc in effect that changes what it shares
// with the classes before it: the budgets it kept take their new rates, and
// the classes' info metric describes cc.
func (cc *clientClasses) apply(m *clientMetrics, now int64) {
	m.info.Reset()
	for _, c := range cc.classes {
		if c.budget != nil {
			c.budget.Set(c.perSecond, c.burst, now)
		}
		m.info.WithLabelValues(c.name, strconv.Itoa(c.tier)).Set(c.perSecond)
	}
}

func set(values []string) map[string]bool {
	if len(values) == 0 {
		return nil
	}
	m := make(map[string]bool, len(values))
	for _, v := range values {
		m[v] = true
	}
	return m
}

// match returns the class of a connection with identity id: the first
// whose every list that is set holds id's value.
func (cc *clientClasses) match(id *clientIdentity) *clientClass {
	for _, c := range cc.classes {
		if c.matches(id) {
			return c
		}
	}
	return cc.classes[len(cc.classes)-1]
}

func (c *clientClass) matches(id *clientIdentity) bool {
	if c.users != nil && !c.users[id.user] || c.apps != nil && !c.apps[id.app] ||
		c.ids != nil && !c.ids[id.id] || c.drivers != nil && !c.drivers[id.driver] {
		return false
	}
	if c.prefixes == nil {
		return true
	}
	for _, p := range c.prefixes {
		if p.Contains(id.addr) {
			return true
		}
	}
	return false
}

// clientOf returns the class of s's connection now, matching it again
// after a reload or once the proxy learned more of the client.
func (s *session) clientOf(cc *clientClasses) *clientClass {
	if cc != s.classesSeen || s.identityChanged {
		c := cc.match(&s.identity)
		if c != s.clientClass {
			if s.clientClass != nil {
				s.clientClass.conns.Dec()
			}
			c.conns.Inc()
			s.clientClass = c
		}
		s.classesSeen, s.identityChanged = cc, false
	}
	return s.clientClass
}

// clientClassTag is the tag of the connection's class for /hot's sketch, 0
// before it has one.
func (s *session) clientClassTag() uint16 {
	if s.clientClass == nil {
		return 0
	}
	return s.clientClass.tag
}

// className returns the name of the class with tag, "" if none has it now.
func (cc *clientClasses) className(tag uint16) string {
	if tag == 0 || int(tag) > len(cc.classes) {
		return ""
	}
	return cc.classes[tag-1].name
}

// leaveClass takes the closing connection out of its class's count.
func (s *session) leaveClass() {
	if s.clientClass != nil {
		s.clientClass.conns.Dec()
	}
}

// learnStartup notes the STARTUP options that classes match on, which the
// client asserts: they take effect once the upstream accepts the STARTUP.
func (s *session) learnStartup(body []byte) {
	p := &s.pending
	p.app, p.id, p.driver = "", "", ""
	for key, dst := range map[string]*string{"APPLICATION_NAME": &p.app, "CLIENT_ID": &p.id, "DRIVER_NAME": &p.driver} {
		if v, ok, _ := frame.StartupOption(body, key); ok {
			*dst = string(v)
		}
	}
}

// learnUser notes the user a SASL PLAIN AUTH_RESPONSE names, which takes
// effect once the upstream accepts the login. Its token is an
// authorization identity, the user and the password, each ended by a zero
// byte but the last; the user is read as the nodes read it, from the end:
// the field between the last two zero bytes, whatever comes before them
// (Cassandra refuses a token with more than two, ScyllaDB takes the last
// two fields). Other mechanisms name no user the proxy can read.
func (s *session) learnUser(body []byte) {
	if len(body) < 4 {
		return
	}
	n := int32(binary.BigEndian.Uint32(body))
	token := body[4:]
	if n < 0 || int(n) > len(token) {
		return
	}
	token = token[:n]
	last := bytes.LastIndexByte(token, 0)
	if last < 0 {
		return
	}
	before := bytes.LastIndexByte(token[:last], 0)
	if before < 0 {
		return
	}
	s.pending.user, s.pending.hasUser = string(token[before+1:last]), true
}

// addrOf returns the IP of a connection's remote address.
func addrOf(c net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// price is what the answered request cost in request units: fixed, per
// row of a RESULT (uncompressed: a compressed answer's rows are not
// counted), per KiB both ways, per millisecond upstream. It is charged in
// two parts: sent, once the request is forwarded, and answered.
func (cc *clientClasses) price(req *request, f []byte, h frame.Header, latency int64) float64 {
	return cc.sent(req) + cc.answered(f, h, latency)
}

// sent is the part of a request's price known once it is forwarded: fixed
// and per KiB of the request.
func (cc *clientClasses) sent(req *request) float64 {
	u := &cc.units
	return u.Fixed + u.PerKiB*float64(req.size)/1024
}

// answered is the rest of a request's price, once answered by f after
// latency: per KiB of the answer, per row, per millisecond upstream.
func (cc *clientClasses) answered(f []byte, h frame.Header, latency int64) float64 {
	u := &cc.units
	units := u.PerKiB*float64(len(f))/1024 + u.PerMs*float64(latency)/1e6
	if u.PerRow != 0 && h.Opcode == frame.OpResult && !h.Compressed() {
		if msg, ok := frame.ResponseMessage(f[frame.HeaderSize:], h); ok {
			if n, ok := frame.RowCount(msg); ok {
				units += u.PerRow * float64(n)
			}
		}
	}
	return units
}

// chargeSent charges the budgets of the forwarded request req what its
// price is known to be: before its answer, so that a class's requests in
// flight count against its budget, and a client that leaves before its
// answers still pays for what it sent. Only a request with a budget to
// charge needs it (sentCharged); the class's units are counted once, when
// the request ends.
func (s *session) chargeSent(req *request, now int64) {
	s.chargeBudgets(req, req.set.clients.sent(req), now)
}

// sentCharged reports whether req has budgets that chargeSent charges.
func sentCharged(req *request) bool {
	return req.client != nil && req.client.budget != nil || req.nCharges > 0
}

// charge charges the answered request req the rest of its price, and
// counts its whole price in its class's units.
func (s *session) charge(req *request, f []byte, h frame.Header, now int64) {
	cc := req.set.clients
	s.chargeEnded(req, cc.sent(req), cc.answered(f, h, now-req.start), now)
}

// chargedUnanswered reports whether req, ending without an answer, has a
// price to charge: a class or partitions, and it reached a node. A read
// waiting on another connection's identical read (hot reads) reached none:
// the time it waited is the other's, and it costs nothing unless it is
// forwarded on its own.
func chargedUnanswered(req *request) bool {
	return req.joined == nil && (req.client != nil || req.nCharges > 0)
}

// chargeUnanswered charges requests that will get no answer from the
// upstream (their connection ended) their time in flight until now.
func (s *session) chargeUnanswered(reqs []request, now int64) {
	for i := range reqs {
		if r := &reqs[i]; chargedUnanswered(r) {
			cc := r.set.clients
			s.chargeEnded(r, cc.sent(r), cc.units.PerMs*float64(now-r.start)/1e6, now)
		}
	}
}

// chargeEnded charges the request req, whose budgets were charged sent as
// it was forwarded, the rest of its price, and counts the whole in its
// class's units.
func (s *session) chargeEnded(req *request, sent, rest float64, now int64) {
	if c := req.client; c != nil && sent+rest > 0 {
		c.units.Add(sent + rest)
	}
	s.chargeBudgets(req, rest, now)
}

// chargeBudgets charges req's class's budget, and the partitions with
// budgets in request units it touched, units.
func (s *session) chargeBudgets(req *request, units float64, now int64) {
	if !(units > 0) {
		return
	}
	if c := req.client; c != nil && c.budget != nil {
		// A tier priced up by shedding pays more of its budget for the
		// same work; the partitions are charged what it cost.
		paid := units
		if req.price > 1 {
			paid *= float64(req.price)
		}
		c.budget.Charge(now, paid)
	}
	if req.nCharges > 0 {
		if u := req.set.units; u != nil {
			share := units / float64(req.nCharges)
			for _, c := range req.charges[:req.nCharges] {
				u.Charge(s.p.epochUnix+now, c.token, c.label, float64(c.budget), share)
			}
		}
	}
}

// inDebt reports whether c has a budget and is in debt on it at now: its
// requests are refused (the class and reissue paths ask the same).
func (c *clientClass) inDebt(now int64) bool {
	return c.budget != nil && !c.budget.Allow(now)
}

// overBudgetMessage is the message of a refusal for c's budget.
func (c *clientClass) overBudgetMessage() string {
	return fmt.Sprintf("cqlguard: client class %s is over its budget of %g request units per second (clients: max_units_per_second); retry later",
		c.name, c.perSecond)
}
