package proxy

import (
	"fmt"

	"github.com/cqlguard/cqlguard/classify"
	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/shed"
)

// A refusal is why a stage ends a request's path with an error. Every
// refusal is built, counted and logged here (refuse, count, appendTo),
// so that what the client is told and what the metrics say agree.
type refusal struct {
	kind refusalKind
	// clientClass is the client class over its budget (refusedBudget).
	clientClass *clientClass
	// tier and node are the tier shed and the slow node (refusedShed).
	tier int
	node *nodeSignals
	// rej is the partition over its limit, or the table with more
	// partitions than limits.max_partitions_per_request allows
	// (refusedLimit, refusedPartitions).
	rej rejection
}

// refusalKind is which stage refused, and so which error the client gets.
type refusalKind uint8

const (
	refusedBudget     refusalKind = iota // a client class over its budget: Config_error
	refusedShed                          // shed while its node is slow: Overloaded, or Config_error
	refusedLimit                         // a partition over its limit: the rate-limit error, or Config_error
	refusedPartitions                    // too many partitions of a limited table: Invalid
)

func (k refusalKind) String() string {
	switch k {
	case refusedBudget:
		return "client_budget"
	case refusedShed:
		return "shed"
	case refusedLimit:
		return "rate_limited"
	default:
		return "too_many_partitions"
	}
}

// refuse ends the path of the request of c with r, or, in a dry run, lets
// it pass, counted as what would have been refused. It returns the answer
// and true when it refused.
func (s *session) refuse(c *call, r refusal, dryRun bool) (outcome, bool) {
	s.countRefusal(r, dryRun)
	if dryRun {
		return outcome{}, false
	}
	s.log.Debug().Int16("stream", c.h.Stream).Stringer("refused", r.kind).Msg("request refused")
	v := c.h.Version
	if v < 3 || v > 5 {
		v = 4
	}
	s.reqScratch = s.appendRefusal(s.reqScratch[:0], v, c.h.Stream, r)
	return outcome{answer: s.reqScratch}, true
}

// countRefusal counts r: refused, or let through in a dry run.
func (s *session) countRefusal(r refusal, dryRun bool) {
	switch r.kind {
	case refusedBudget:
		if dryRun {
			r.clientClass.dryRefusals.Inc()
		} else {
			r.clientClass.refusals.Inc()
		}
	case refusedShed:
		sh, t := s.p.shedding, min(max(r.tier, 0), shed.MaxTier)
		if dryRun {
			sh.dryByTier[t].Inc()
		} else {
			sh.shedByTier[t].Inc()
		}
	case refusedLimit, refusedPartitions:
		outcome := "rejected"
		switch {
		case dryRun:
			outcome = "dry_run"
		case r.kind == refusedPartitions:
			outcome = "too_many_partitions"
		}
		t := r.rej.table
		s.p.metrics.rejections.WithLabelValues(t.Keyspace, t.Name, r.rej.op.String(), outcome).Inc()
	}
}

// appendRefusal appends to dst the ERROR frame of version that answers
// stream with r.
func (s *session) appendRefusal(dst []byte, version uint8, stream int16, r refusal) []byte {
	switch r.kind {
	case refusedBudget:
		return frame.AppendError(dst, version, stream, frame.ErrCodeConfig, r.clientClass.overBudgetMessage())
	case refusedShed:
		code := frame.ErrCodeOverloaded
		if s.p.shedding.cfg.Error == config.ShedConfigError {
			code = frame.ErrCodeConfig
		}
		return frame.AppendError(dst, version, stream, code,
			fmt.Sprintf("cqlguard: request shed, tier %d, while the node %s is slow (shedding); retry later", r.tier, r.node.addr))
	case refusedLimit:
		t := r.rej.table
		return frame.AppendRateLimited(dst, version, stream, s.rateLimitOptIn, r.rej.op == classify.OpWrite, t.Keyspace, t.Name)
	default:
		t := r.rej.table
		return frame.AppendError(dst, version, stream, frame.ErrCodeInvalid,
			fmt.Sprintf("cqlguard: the request touches more than %d partitions of %s.%s, which has a per-partition limit (limits.max_partitions_per_request); split it",
				r.rej.tooMany, t.Keyspace, t.Name))
	}
}
