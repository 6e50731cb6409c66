package proxy

import (
	"sync/atomic"

	"github.com/cqlguard/cqlguard/classify"
	"github.com/cqlguard/cqlguard/hotread"
)

// hotReadStage serves hot reads (hotreads.go): a read of a hot partition
// of a table under hot_reads is answered from the cache, or waits for an
// identical read in flight, or leads one whose answer the reads that join
// it share; what any request may change is invalidated once it is
// answered, before its client sees the answer.
type hotReadStage struct{}

// hotReadState is the connection's part of hot reads. principal is the
// digest of the credentials the client gave, 0 for none; hotRead the
// identity of the read being handled; joinSeq numbers the reads that
// joined another. Request path only. joined counts this connection's reads
// waiting on another's.
type hotReadState struct {
	principal uint64
	// options is the digest of the STARTUP options that can change
	// answers (optionsDigest). Request path only.
	options uint64
	hotRead hotread.Read
	hotBody []byte    // hotRead's body, when it differs from the request's
	leading *hotTable // the table of the flight the request being handled leads
	joinSeq uint32
	joined  atomic.Int32
}

func (hotReadStage) admit(s *session, c *call) (outcome, bool) {
	tables := c.req.set.hotReads
	if tables == nil {
		return outcome{}, false
	}
	c.req.wrote = s.writes(c.h, c.classified, c.req.use)
	if c.classified == nil || c.classified.Op != classify.OpRead {
		return outcome{}, false
	}
	return s.serveHot(c, tables)
}

// decided counts the read that leads a flight as forwarded, or, refused by
// its partition's limit, refuses with it the reads that joined it: their
// partition is over its limit too.
func (hotReadStage) decided(s *session, c *call, o outcome) {
	fl := c.req.flight
	if fl == nil {
		return
	}
	if o.answer == nil {
		s.leading.forwarded.Inc()
		return
	}
	s.leading.refused.Inc()
	s.p.hotReads.refuseFlight(fl, o.answer)
}

func (hotReadStage) answered(s *session, a *answer) {
	if a.req.wrote.kind != wroteNone {
		s.p.hotReads.wrote(a.req.wrote)
	}
	if a.req.flight != nil {
		s.land(a.req, a.f, a.h)
	}
}
