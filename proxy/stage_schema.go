package proxy

import (
	"github.com/cqlguard/cqlguard/classify"
	"github.com/cqlguard/cqlguard/frame"
)

// schemaStage reloads the schema (schema.go's SchemaSource) once a
// statement that may change it has run: the partition keys the classifier
// reads come from it. Only a statement that ran can have changed it: an
// error (say, to garbage CQL sent in a loop) must not keep the schema
// loader reloading.
type schemaStage struct{}

func (schemaStage) admit(s *session, c *call) (outcome, bool) {
	if cl := c.classified; cl != nil {
		c.req.ddl = cl.Op == classify.OpNone && !cl.Internal
	}
	return outcome{}, false
}

func (schemaStage) answered(s *session, a *answer) {
	if a.req.ddl && a.h.Opcode == frame.OpResult {
		s.p.schema.Refresh()
		// The ring places a keyspace's replicas by its replication: one
		// just made, or changed, is routed once the ring is read again,
		// not at the next refresh.
		if s.p.ringStale != nil {
			s.p.ringStale()
		}
	}
}
