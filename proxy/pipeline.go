package proxy

// The request pipeline: what each feature does with a request on its way
// upstream, and with its answer on the way back. Each feature is a stage,
// a small type in a stage_*.go file; stages lists them in the order they
// run. handle runs their admit hooks once a frame is classified, and the
// response path their answered hooks.

import (
	"github.com/cqlguard/cqlguard/frame"
)

// A stage is one feature's part in the path of a request.
type stage interface {
	// admit runs on the request path, in the order of stages, for every
	// request frame past the handshake's own. It ends the request's path
	// by returning an action and true: a refusal (refuse), or a request
	// served without the upstream.
	admit(s *session, c *call) (action, bool)
	// decided runs, in reverse order, for each stage whose admit let c
	// pass, once its path is decided: act is the answer a later stage
	// ended it with, or the frame forwarded.
	decided(s *session, c *call, act action)
	// answered runs on the response path, in order, when the upstream
	// answers a request the pipeline forwarded.
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

// call is a request frame as the stages see it. The request path keeps
// one in its session (session.call), which the stages are handed: a call
// made for each frame would escape to the heap through them.
type call struct {
	h          frame.Header
	f          []byte          // the frame, as it will be forwarded
	classified *Classification // nil for a frame that was not classified
	req        request         // what its answer will need; stages note theirs
	now        int64           // when it arrived, on the proxy's clock
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
// it; otherwise it is forwarded. Either way, the stages that let it pass
// are told.
func (s *session) admit(c *call) action {
	act := action{forward: c.f}
	n := len(stages)
	for i, st := range stages {
		if a, done := st.admit(s, c); done {
			act, n = a, i
			break
		}
	}
	for i := n - 1; i >= 0; i-- {
		stages[i].decided(s, c, act)
	}
	if act.forward != nil {
		act.req = c.req
	}
	return act
}

// stagesAnswered runs the stages' answered hooks for a.
func (s *session) stagesAnswered(a *answer) {
	for _, st := range stages {
		st.answered(s, a)
	}
}

// noAnswer and noDecision are the hooks of a stage that has nothing to do
// once its request is decided or answered.
type (
	noAnswer   struct{}
	noDecision struct{}
)

func (noAnswer) answered(*session, *answer)        {}
func (noDecision) decided(*session, *call, action) {}
