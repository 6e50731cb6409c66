package proxy

// Hot reads (hot_reads in the configuration): a read of a hot partition of
// a table that takes part is answered from a short cache of answers to
// identical reads, or waits for the answer of an identical read in flight
// (coalescing), and reaches the upstream only when neither serves it.
//
// A read waiting on another connection's read must never wait on that
// connection's client, and what one connection is handed must count
// against its own bounds:
//
//   - The answer is handed to each waiting connection's writer without
//     waiting for room (Writer.Offer), but only while that writer is not
//     full; a waiting read whose client is not reading is forwarded on its
//     own connection instead (reissue), where its answer waits for room.
//   - A connection whose writer waits for room reads nothing from its
//     upstream meanwhile: the reads waiting on the flights it leads are
//     forwarded on their own connections at once (clientStall), and it
//     leads and joins no flight while it waits or its writer is full.
//   - A read that waited longer than hot_reads.max_wait, or whose leader's
//     connection ended first, is forwarded on its own connection.
//
// Reads are identical only if everything that shapes their answer is:
// among it the connection's protocol version, compression, login and the
// STARTUP options that can change answers (optionsDigest), such as its
// rate-limit error opt-in.
//
// Writes invalidate by generation (hotread.Generations): the answer to a
// write, or its failure, moves on the generation of what it wrote before
// the client sees it, and a read only takes an answer, cached or in
// flight, that started at the generation it starts at. So a read that
// starts after a write through this proxy was acknowledged is never served
// from before it.

import (
	"hash/maphash"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cqlguard/cqlguard/classify"
	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/hotread"
	"github.com/cqlguard/cqlguard/ratelimit"
	"github.com/cqlguard/cqlguard/schema"
)

// hotReads serves hot reads for the proxy.
// The tables it serves are part of the settings a reload changes
// (settings.hotReads).
type hotReads struct {
	gens    *hotread.Generations
	cache   *hotread.Cache
	flights *hotread.Flights[waiter]
	maxWait int64 // nanoseconds
	served  *prometheus.CounterVec
	// reissued counts reads forwarded on their own after waiting on an
	// identical one: past max_wait, or when its connection ended.
	reissued prometheus.Counter
}

// hotTables are the tables taking part, by keyspace and name as stored.
type hotTables struct {
	byName map[string]map[string]*hotTable
}

// hotTable is how one table's hot reads are served, with its counters.
type hotTable struct {
	ttl  int64   // nanoseconds; 0: no cache
	rate float64 // reads per second from which a partition is hot; 0: all
	// The outcomes of its hot reads, resolved once.
	cached, coalesced, forwarded, refused, uncoalesced prometheus.Counter
}

// waiter is a read waiting for the answer of an identical one: its
// connection, stream, and a number that tells it from a later request on
// the same stream.
type waiter struct {
	s      *session
	stream int16
	seq    uint32
}

// maxHotRequest is the largest request body served as a hot read: a
// point read's is tens of bytes, and a connection keeps a copy of one.
const maxHotRequest = 4 << 10

// Bounds of the flights table: a flight per hot read in flight, and a
// read waiting on each of a connection's requests in flight.
const (
	maxFlights = 16384
	maxWaiters = 4096
	// genSlots is the write generations' table: two partitions sharing a
	// slot only invalidate each other's answers more often.
	genSlots = 1 << 16
)

func newHotReads(cfg config.HotReadsConfig, reg prometheus.Registerer) *hotReads {
	hr := &hotReads{
		gens:    hotread.NewGenerations(genSlots),
		cache:   hotread.NewCache(int64(cfg.Memory), int(cfg.MaxAnswerBytes)),
		flights: hotread.NewFlights[waiter](maxFlights, maxWaiters),
		maxWait: int64(cfg.MaxWait),
		served: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cqlguard_hot_reads_total",
			Help: "Reads of hot partitions of tables under hot_reads, by outcome: cached (answered from the cache), coalesced (waited for an identical read's answer), forwarded (sent upstream, its answer shared), refused (would have been forwarded, but the partition's limit refused it, and the reads that waited for it), uncoalesced (sent upstream alone: a bound was reached).",
		}, []string{"keyspace", "table", "outcome"}),
		reissued: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cqlguard_hot_reads_reissued_total",
			Help: "Reads that waited for an identical read's answer and were then forwarded on their own: past hot_reads.max_wait, or when the other read's connection ended.",
		}),
	}
	reg.MustRegister(hr.served, hr.reissued, &hotReadsCollector{hr: hr,
		bytes: prometheus.NewDesc("cqlguard_hot_reads_cache_bytes",
			"Bytes the hot reads cache holds: answers and the requests they answer.", nil, nil),
		entries: prometheus.NewDesc("cqlguard_hot_reads_cache_entries",
			"Answers the hot reads cache holds.", nil, nil),
		evictions: prometheus.NewDesc("cqlguard_hot_reads_cache_evictions_total",
			"Answers dropped from the hot reads cache to stay within hot_reads.memory.", nil, nil),
		flights: prometheus.NewDesc("cqlguard_hot_reads_in_flight",
			"Hot reads in flight that identical reads may join.", nil, nil),
	})
	return hr
}

// tablesOf returns the tables of cfg, nil when it has none.
func (hr *hotReads) tablesOf(cfg config.HotReadsConfig) *hotTables {
	t := &hotTables{byName: map[string]map[string]*hotTable{}}
	for ks, k := range cfg.Keyspaces {
		for name, c := range k.Tables {
			if t.byName[ks] == nil {
				t.byName[ks] = map[string]*hotTable{}
			}
			ht := &hotTable{ttl: int64(c.CacheTTL), rate: float64(c.Rate())}
			for outcome, p := range map[string]*prometheus.Counter{
				"cached": &ht.cached, "coalesced": &ht.coalesced, "forwarded": &ht.forwarded,
				"refused": &ht.refused, "uncoalesced": &ht.uncoalesced,
			} {
				*p = hr.served.WithLabelValues(ks, name, outcome)
			}
			t.byName[ks][name] = ht
		}
	}
	if len(t.byName) == 0 {
		return nil
	}
	return t
}

// table returns how t's hot reads are served, nil when it takes no part
// or ht is nil (no table does).
func (ht *hotTables) table(t *schema.Table) *hotTable {
	if ht == nil {
		return nil
	}
	return ht.byName[t.Keyspace][t.Name]
}

// The kinds of what an answer invalidates: nothing, one partition, a
// table, or everything.
const (
	wroteNone uint8 = iota
	wrotePartition
	wroteTable
	wroteAll
)

// wrote is what a request may change, so that its answer invalidates it.
type wrote struct {
	kind  uint8
	table uint32
	token int64
}

// writes says what the forwarded request h, classified as c (nil when it
// was not), may change. Anything the proxy cannot pin is taken to change
// everything: a stale answer is worse than a miss.
func (s *session) writes(h frame.Header, c *classify.Classification, use bool) wrote {
	if c == nil {
		switch h.Opcode {
		case frame.OpStartup, frame.OpOptions, frame.OpAuthResponse, frame.OpRegister, frame.OpPrepare:
			return wrote{}
		}
		return wrote{kind: wroteAll}
	}
	switch {
	case c.Op == classify.OpRead && !serial(c.Consistency):
		return wrote{}
	case c.Op == classify.OpNone && (c.Internal || use):
		return wrote{}
	case c.Op == classify.OpNone:
		return wrote{kind: wroteAll}
	case c.Overflow != nil:
		return wrote{kind: wroteTable, table: uint32(labelOf(c.Overflow, classify.OpRead))}
	case !c.Pinned || len(c.Partitions) == 0:
		return wrote{kind: wroteAll}
	}
	// A write, or a read at SERIAL, which may commit a pending
	// transaction: the partitions it touches.
	first := c.Partitions[0].Table
	if first == nil {
		return wrote{kind: wroteAll}
	}
	w := wrote{kind: wrotePartition, table: uint32(labelOf(first, classify.OpRead)), token: c.Partitions[0].Token}
	for _, p := range c.Partitions[1:] {
		if p.Table != first {
			return wrote{kind: wroteAll}
		}
		w.kind = wroteTable
	}
	return w
}

// wrote moves on the generation of what w names.
func (hr *hotReads) wrote(w wrote) {
	switch w.kind {
	case wrotePartition:
		hr.gens.Wrote(w.table, w.token)
	case wroteTable:
		hr.gens.WroteTable(w.table)
	case wroteAll:
		hr.gens.WroteAll()
	}
}

// serial reports whether a consistency level is SERIAL or LOCAL_SERIAL.
func serial(cl uint16) bool { return cl == 0x0008 || cl == 0x0009 }

// serveHot serves the read of call k from the cache or by joining an
// identical read in flight, when its partition is hot and its table takes
// part. It returns the action and true when it served it; otherwise the
// read is forwarded, and k.req says whether it leads a flight.
func (s *session) serveHot(k *call, tables *hotTables) (outcome, bool) {
	h, c, req, now := k.h, k.classified, &k.req, k.now
	if !c.Pinned || len(c.Partitions) != 1 || c.LWT || c.Internal || c.Partitions[0].Table == nil ||
		h.Opcode != frame.OpQuery && h.Opcode != frame.OpExecute ||
		h.Flags&(frame.FlagTracing|frame.FlagCustomPayload) != 0 ||
		serial(c.Consistency) || c.Body == nil || len(c.Body) > maxHotRequest {
		return outcome{}, false
	}
	p := &c.Partitions[0]
	t := tables.table(p.Table)
	if t == nil {
		return outcome{}, false
	}
	// Counted by /hot's sketch here, served or not, as decide would.
	label := labelOf(p.Table, classify.OpRead)
	if s.p.hotSketch != nil {
		k.observed = true
		if s.p.hotSketch.ObserveTaggedAt(s.p.epochUnix+now, p.Token, label, p.Key, s.clientClassTag()) < t.rate {
			return outcome{}, false
		}
	} else if t.rate > 0 {
		return outcome{}, false
	}
	hr := s.p.hotReads
	r := s.identify(k, p, label)
	gen := hr.gens.At(r.Table, r.Token)
	if t.ttl > 0 {
		if ans, ok := hr.cache.Get(s.reqScratch[:0], r, gen, now); ok {
			frame.SetStream(ans, h.Stream)
			s.reqScratch = ans
			t.cached.Inc()
			return outcome{answer: ans}, true
		}
	}
	return s.joinOrLead(h, p, t, r, gen, req, now)
}

// identify makes s.hotRead the identity of the read of call k, of
// partition p, whose table is label.
func (s *session) identify(k *call, p *classify.Partition, label ratelimit.Label) *hotread.Read {
	// The default timestamp that drivers put on every request times
	// writes; Cassandra does not use it for a read (but for one at SERIAL,
	// never served here). Left in, no two reads would be alike.
	h, body := k.h, k.classified.Body
	if at := k.classified.TimestampAt; at > 0 {
		s.hotBody = append(s.hotBody[:0], body...)
		clear(s.hotBody[at : at+8])
		body = s.hotBody
	}
	r := &s.hotRead
	*r = hotread.Read{
		Version: h.Version, Flags: h.Flags &^ frame.FlagCompression, Opcode: uint8(h.Opcode),
		Compression: uint8(s.reqCompression), Options: s.options, Principal: s.principal,
		Keyspace: s.classifiedIn.Keyspace, Body: body,
		Table: uint32(label), Token: p.Token,
	}
	return r
}

// joinOrLead has the read r, at gen, of partition p of table t join an
// identical read in flight, or lead one. A read that joins is in flight on
// its connection like any other, holding a slot of max_in_flight, but not
// one of max_in_flight_per_connection's last: at that bound it is
// forwarded, and waits there. It returns the action and true when r
// joined; a read that leads is forwarded, noted in req.
func (s *session) joinOrLead(h frame.Header, p *classify.Partition, t *hotTable, r *hotread.Read, gen hotread.Gen, req *request, now int64) (outcome, bool) {
	hr := s.p.hotReads
	if !s.p.inflight.TakeNow(1) {
		t.uncoalesced.Inc()
		return outcome{}, false
	}
	max := s.p.cfg.MaxInFlightPerConnection
	s.mu.Lock()
	// A connection whose client is not keeping up neither waits on others
	// (what it would be handed counts against its own bounds) nor leads
	// (its answers would wait on its client).
	// Nor does one whose stream a hedged read's copy still holds on up
	// (hedge.go), where it would be forwarded if handed on.
	if max > 0 && s.streams.inflight+1 >= max || s.clientBehind() || s.up.awaitsLeftover(h.Stream) {
		s.mu.Unlock()
		s.p.inflight.Give(1)
		t.uncoalesced.Inc()
		return outcome{}, false
	}
	s.joinSeq++
	fl, joined := hr.flights.Join(r, gen, waiter{s, h.Stream, s.joinSeq})
	if joined {
		if s.streams.inflight == 0 {
			s.up.activity++ // the node's silence counts from now
		}
		// Recorded under s.mu, which the flight's landing takes to answer
		// it: the answer cannot come before the stream is in the table.
		// With what it would be charged and decided by if it is
		// forwarded after all (reissue).
		s.streams.begin(h.Stream, request{start: now, set: req.set, version: h.Version, joined: fl, seq: s.joinSeq,
			joinedTable: p.Table, client: req.client, size: req.size, price: req.price})
		s.joined.Add(1)
		s.mu.Unlock()
		t.coalesced.Inc()
		return outcome{joined: true}, true
	}
	s.mu.Unlock()
	s.p.inflight.Give(1)
	if fl == nil {
		t.uncoalesced.Inc()
		return outcome{}, false
	}
	// Counted as forwarded or refused once its limit decided.
	s.leading = t
	req.flight, req.gen, req.ttl = fl, gen, t.ttl
	return outcome{}, false
}

// land hands the answer f to the reads that waited on the flight req led,
// and caches it if its table asks for that. The answer's generation is the
// one the read started at, so that an answer that may predate a write
// acknowledged meanwhile serves no read that starts after it.
func (s *session) land(req request, f []byte, h frame.Header) {
	hr := s.p.hotReads
	// Cached first: until the flight lands, identical reads join it, and
	// from then on they find the answer in the cache, rather than each
	// leading a flight of its own while the waiters are answered.
	if req.ttl > 0 && h.Opcode == frame.OpResult {
		hr.cache.Put(req.flight.Read(), req.gen, f, s.now()+req.ttl)
	}
	for _, w := range hr.flights.Land(req.flight) {
		// This path pushes its client's writer after the read that gave f.
		w.s.deliver(w, f, req.flight.Read(), w.s != s)
	}
	hr.flights.Release(req.flight)
}

// refuseFlight answers the reads that joined fl, which its leader's limit
// refused, with the same refusal ans.
func (hr *hotReads) refuseFlight(fl *hotread.Flight[waiter], ans []byte) {
	for _, w := range hr.flights.Land(fl) {
		w.s.deliver(w, ans, nil, true)
	}
	hr.flights.Release(fl)
}

// ended does for a request that ended without an answer from the upstream
// what its answer would have: it may have written, and the reads that
// joined it are forwarded on their own.
func (s *session) ended(req request) {
	if req.wrote.kind != wroteNone {
		s.p.hotReads.wrote(wrote{kind: wroteAll})
	}
	if req.flight != nil {
		s.orphan(req)
	}
	if req.joined != nil {
		s.joined.Add(-1)
	}
}

// orphan forwards, each on its own connection, the reads that waited on
// the flight req led, which will not be answered: its connection ended or
// its answer could not be read.
func (s *session) orphan(req request) {
	s.p.hotReads.orphan(req.flight)
}

// orphan forwards, each on its own connection, the reads that waited on
// fl, and releases it.
func (hr *hotReads) orphan(fl *hotread.Flight[waiter]) {
	for _, w := range hr.flights.Land(fl) {
		w.s.reissue(w, fl.Read())
	}
	hr.flights.Release(fl)
}

// clientStall is the client writer's stall hook: while a write to the
// client waits for room, the response path reads nothing from the
// upstream, so the answers of the flights s leads would reach nobody. The
// reads waiting on them are forwarded on their own connections at once,
// and s leads and joins no flight until no write waits (serveHot).
func (s *session) clientStall(waiting bool) {
	if !waiting {
		s.clientWaits.Add(^uint64(0)) // one fewer under way
		return
	}
	// Counted before the table is looked at under s.mu: a flight begun
	// after that look sees the count (serveRequests), as a request sent
	// after it is not counted in its node's load (sentOn).
	s.clientWaits.Add(1<<32 + 1)
	s.mu.Lock()
	s.uncount(s.up)
	for _, u := range s.legs {
		s.uncount(u)
	}
	s.mu.Unlock()
	hr := s.p.hotReads
	if hr == nil {
		return
	}
	var led []*hotread.Flight[waiter]
	s.mu.Lock()
	if s.halted {
		// Closing: what it led was released as it ended.
		s.mu.Unlock()
		return
	}
	s.streams.update(func(r *request) {
		if r.flight != nil {
			led = append(led, r.flight)
			r.flight = nil
		}
	})
	s.mu.Unlock()
	for _, fl := range led {
		hr.orphan(fl)
	}
}

// clientWaiting reports whether a write to s's client waits for room now.
func (s *session) clientWaiting() bool { return uint32(s.clientWaits.Load()) > 0 }

// clientBehind reports whether the client is not reading its answers, or
// its writer is full and the next answer would wait for it: a read that
// would only add to what waits (a joined hot read, a hedge) is not made.
func (s *session) clientBehind() bool { return s.clientWaiting() || s.toClient.Full() }

// deliver answers w, a read of s that waited on an identical one (r, nil
// for a refusal), with f, the other's answer. It never waits on s's
// client, and queues nothing past its bounds: with s's client writer full,
// the read is forwarded on s's own connection instead, whose answer waits
// for room there. Without kick the caller is s's response path, which
// pushes what it queued.
func (s *session) deliver(w waiter, f []byte, read *hotread.Read, kick bool) {
	if read != nil && s.toClient.Full() {
		s.reissue(w, read)
		return
	}
	s.mu.Lock()
	r := s.streams.lookup(w.stream)
	if s.halted || r == nil || r.joined == nil || r.seq != w.seq {
		// Answered already: forwarded on its own, or its connection ended.
		s.mu.Unlock()
		return
	}
	s.endStream(w.stream)
	s.joined.Add(-1)
	s.wakeRequests()
	idle := s.drained()
	s.mu.Unlock()
	s.offerAnswer(f, w.stream, kick, idle)
}

// offerAnswer hands the client, without waiting for room, the answer f to
// a hot read on stream that the upstream will not answer and that left
// the stream table, leaving it idle if idle is set.
func (s *session) offerAnswer(f []byte, stream int16, kick, idle bool) {
	s.p.inflight.Give(1)
	s.p.metrics.frame(dirResponse, frame.Opcode(f[4]), len(f))
	s.toClient.Offer(f, stream, kick)
	if idle {
		// Draining, and this was the last request: the response path ends
		// on the closed upstream and closes the session once the answer
		// is written.
		s.up.conn.Close()
	}
}

// reissue forwards w, a read of s that waited on an identical one (r), on
// s's own upstream connection, or answers it with a refusal if its
// partition is now over its limit. r is valid while w waits: the flight is
// released only after each of its waiters was answered or reissued.
func (s *session) reissue(w waiter, r *hotread.Read) {
	s.mu.Lock()
	f, refused := s.reissueLocked(w.stream, w.seq, r)
	s.mu.Unlock()
	s.handOn(f, w.stream, refused)
}

// handOn sends what reissueLocked made of the read waiting on stream: the
// request upstream, or the refusal to the client, neither waiting for room.
func (s *session) handOn(f []byte, stream int16, refused bool) {
	switch {
	case f == nil:
	case refused:
		s.mu.Lock()
		idle := s.drained()
		s.mu.Unlock()
		s.offerAnswer(f, stream, true, idle)
	default:
		s.up.to.Offer(f, stream, true)
	}
}

// reissueLocked returns the frame that forwards the read waiting on
// stream, or nil if it is no longer waiting. Forwarded, it reaches the
// upstream like any read: it is decided by its partition's limits and
// charged to its class (decideHandedOn), and if refused, ended here and
// the refusal returned instead, with refused set. s.mu is held.
func (s *session) reissueLocked(stream int16, seq uint32, r *hotread.Read) (f []byte, refused bool) {
	e := s.streams.lookup(stream)
	if s.halted || e == nil || e.joined == nil || e.seq != seq {
		return nil, false
	}
	e.joined = nil
	s.joined.Add(-1)
	now := s.now()
	e.start = now
	// Its class was admitted when it joined, for nothing: now it costs,
	// and is decided as the class and limit stages would.
	dryRun := e.set.limits.dryRun
	var why refusal
	if c := e.client; c != nil && c.inDebt(now) {
		why = refusal{kind: refusedBudget, clientClass: c}
		s.countRefusal(why, dryRun)
		refused = !dryRun
	}
	if !refused {
		if rej, over := s.decideHandedOn(e, r.Token, now); over {
			why = refusal{kind: refusedLimit, rej: rej}
			s.countRefusal(why, dryRun)
			refused = !dryRun
		}
	}
	if refused {
		f = s.appendRefusal(nil, r.Version, stream, why)
		s.endStream(stream)
		s.wakeRequests()
		return f, true
	}
	if sentCharged(e) {
		s.chargeSent(e, now)
	}
	s.sentOn(e, s.up)
	s.p.hotReads.reissued.Inc()
	// The body is kept decompressed, and sent so: a frame without the
	// compression flag is taken on a compressed connection.
	f = frame.AppendHeader(nil, frame.Header{Version: r.Version, Flags: r.Flags, Stream: stream, Opcode: frame.Opcode(r.Opcode), Length: len(r.Body)})
	return append(f, r.Body...), false
}

// expireWaits forwards, every half of max_wait, the reads that waited on
// an identical one longer than max_wait: its leader's client may not be
// reading, and a client harms only itself.
func (p *Proxy) expireWaits(stop <-chan struct{}) {
	hr := p.hotReads
	t := time.NewTicker(time.Duration(max(hr.maxWait/2, int64(time.Millisecond))))
	defer t.Stop()
	var late []*session
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		for s := range p.sessions {
			if s.joined.Load() > 0 {
				late = append(late, s)
			}
		}
		p.mu.Unlock()
		for _, s := range late {
			s.expireWaits(hr.maxWait)
		}
		clear(late)
		late = late[:0]
	}
}

// expireWaits forwards s's reads that waited on an identical one longer
// than wait; all of them, with wait negative.
func (s *session) expireWaits(wait int64) {
	type late struct {
		stream int16
		seq    uint32
		read   *hotread.Read
		f      []byte
		refuse bool
	}
	var out []late
	now := s.now()
	s.mu.Lock()
	s.streams.each(func(id int16, r request) {
		if r.joined != nil && now-r.start > wait {
			out = append(out, late{stream: id, seq: r.seq, read: r.joined.Read()})
		}
	})
	// Not while walking the table: a refused read leaves it.
	for i := range out {
		out[i].f, out[i].refuse = s.reissueLocked(out[i].stream, out[i].seq, out[i].read)
	}
	s.mu.Unlock()
	for _, o := range out {
		s.handOn(o.f, o.stream, o.refuse)
	}
}

// principalOf folds an AUTH_RESPONSE body into the digest of who the
// connection authenticated as: reads are shared only between connections
// that gave the same credentials, which have the same permissions.
func (p *Proxy) principalOf(prev uint64, body []byte) uint64 {
	var h maphash.Hash
	h.SetSeed(p.principalSeed)
	var b [8]byte
	for i := range b {
		b[i] = byte(prev >> (8 * i))
	}
	h.Write(b[:])
	h.Write(body)
	return h.Sum64() | 1 // never 0, which is "no authentication"
}

// hotReadsCollector exports the cache's and the flights' sizes at scrape
// time.
type hotReadsCollector struct {
	hr                                 *hotReads
	bytes, entries, evictions, flights *prometheus.Desc
}

// Describe implements prometheus.Collector.
func (c *hotReadsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.bytes, c.entries, c.evictions, c.flights} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *hotReadsCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.hr.cache.Stats()
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(st.Bytes))
	ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(st.Entries))
	ch <- prometheus.MustNewConstMetric(c.evictions, prometheus.CounterValue, float64(st.Evictions))
	ch <- prometheus.MustNewConstMetric(c.flights, prometheus.GaugeValue, float64(c.hr.flights.Len()))
}
