package proxy

// The request pipeline: what each feature does with a request on its way
// upstream, and with its answer on the way back. Each feature is a stage,
// a small type in a stage_*.go file; stages lists them in the order they
// run. handle runs their admit hooks once a frame is classified, and the
// response path their answered hooks.

import (
	"github.com/cqlguard/cqlguard/classify"
	"github.com/cqlguard/cqlguard/frame"
)

// A stage is one feature's part in the path of a request. It may also be
// a decider, an answerer, or both: it has the hooks it needs.
type stage interface {
	// admit runs on the request path, in the order of stages, for every
	// request frame past the handshake's own. It ends the request's path
	// by returning its outcome and true: a refusal (refuse), or a request
	// served without the upstream.
	admit(s *session, c *call) (outcome, bool)
}

// A decider is a stage that learns how the path of a request it let pass
// was decided.
type decider interface {
	// decided runs, in reverse order, for each decider whose admit let c
	// pass, once its path is decided: o is how a later stage ended it,
	// zero when it is forwarded.
	decided(s *session, c *call, o outcome)
}

// An answerer is a stage with something to do with the upstream's answers.
type answerer interface {
	// answered runs on the response path, in the order of stages, when
	// the upstream answers a request the pipeline forwarded.
	answered(s *session, a *answer)
}

// stages are the features a request passes through, in order. A stage
// that refuses spends less of the proxy than the stages after it: a class
// over its budget is refused before the partition's counters are touched,
// and a hot read served from the cache is never counted against its
// partition's limit, as it costs the upstream nothing.
var stages = [...]stage{
	classStage{},   // stage_classes.go: client classes and their budgets
	shedStage{},    // stage_shed.go: shedding tiers while a node is slow
	hotReadStage{}, // stage_hotreads.go: hot reads served and invalidated
	limitStage{},   // stage_limits.go: per-partition limits and units
	unitStage{},    // stage_units.go: what requests are charged
	schemaStage{},  // stage_schema.go: the schema reloaded after DDL
}

// deciders and answerers are the stages with those hooks, in the order of
// stages, found once: a request pays only for the hooks there are.
var (
	deciders  = stagesWith[decider]()
	answerers = stagesWith[answerer]()
)

// hook is a stage's hook of kind H, and the stage's place in stages.
type hook[H any] struct {
	at int
	h  H
}

// stagesWith returns the stages that have hooks of kind H.
func stagesWith[H any]() []hook[H] {
	var hs []hook[H]
	for i, st := range stages {
		if h, ok := st.(H); ok {
			hs = append(hs, hook[H]{i, h})
		}
	}
	return hs
}

// outcome is how a stage ends a request's path: answered (a refusal, or a
// read served from the cache), or joined to an identical read in flight
// (hot reads). The zero outcome is a request forwarded. Small, unlike
// action, since each stage hook passes one.
type outcome struct {
	answer []byte // in the session's scratch space
	joined bool
}

// call is a request frame as the stages see it. The request path keeps
// one in its session (session.call), which the stages are handed: a call
// made for each frame would escape to the heap through them.
type call struct {
	h frame.Header
	f []byte // the frame, as it will be forwarded
	// classified is what the frame runs, nil for a frame that was not
	// classified and for a PREPARE.
	classified *classify.Classification
	req        request // what its answer will need; stages note theirs
	now        int64   // when it arrived, on the proxy's clock
	// observed is set once /hot's sketch counted the request's partition
	// (serveHot), so that decide does not count it again.
	observed bool
	// route is where the request would best run (legs.go): the stages
	// that judge a node judge that one.
	route route
}

// answer is the upstream's answer to a request, as the stages see it. The
// response path keeps one in its session (session.answering), as the request
// path does its call.
type answer struct {
	f   []byte
	h   frame.Header
	req request
	now int64
	// timed is set when the time the request took is the node's: no write
	// to the client held the answer back.
	timed bool
}

// admit runs c through the stages: the first that ends its path decides
// it; otherwise it is forwarded. Either way, the deciders that let it pass
// are told.
func (s *session) admit(c *call) action {
	var o outcome
	n := len(stages)
	for i := range stages {
		if out, done := stages[i].admit(s, c); done {
			o, n = out, i
			break
		}
	}
	for i := len(deciders) - 1; i >= 0; i-- {
		if d := deciders[i]; d.at < n {
			d.h.decided(s, c, o)
		}
	}
	if o.answer != nil || o.joined {
		return action{answer: o.answer, joined: o.joined}
	}
	return action{forward: c.f, req: c.req}
}

// stagesAnswered runs the answerers' hooks for a.
func (s *session) stagesAnswered(a *answer) {
	for _, st := range answerers {
		st.h.answered(s, a)
	}
}
