package proxy

// Schema agreement. A driver that changes the schema waits, before its
// next statement, until every node it knows of reports the same schema
// version: a node that has not applied the change yet refuses statements
// on the new table, or fails them as a replica. In cluster mode the proxy
// is the only node drivers know, so their wait ends at once; the proxy
// waits for them, holding each answer to a schema change until the
// cluster agrees.

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// schemaAgreementWait bounds how long an answer to a schema change is held
// for the nodes to agree: the drivers' own default. The answer is passed
// on once it has gone by, as drivers go on once theirs has.
const schemaAgreementWait = 10 * time.Second

// agreementPoll is how often a node is asked again while the versions it
// reports differ, as drivers ask.
const agreementPoll = 200 * time.Millisecond

// WithSchemaAgreement has the proxy, in cluster mode, hold each answer to a
// schema change from node (host:port) until check(ctx, node) returns:
// check waits until node and the peers it knows of report one schema
// version, or ctx ends. By default the proxy asks node with the schema's
// connection.
func WithSchemaAgreement(check func(ctx context.Context, node string) error) Option {
	return func(p *Proxy) { p.agreement = newSchemaAgreement(check) }
}

// schemaAgreement runs the checks of the client connections waiting for
// agreement one round at a time: a connection whose schema change was
// answered while a round ran waits for the next, which starts after its
// change, and shares it with every other connection that came meanwhile,
// the round asking each node that answered one of their changes once.
// However many connections change the schema, the upstreams are asked by
// one check at a time.
type schemaAgreement struct {
	check func(ctx context.Context, node string) error
	mu    sync.Mutex
	// running is whether a round runs; next is the round that starts when
	// it ends, nil while no connection waits for one.
	running bool
	next    *agreementRound
}

// agreementRound is one round: done is closed when it has ended, with
// the first of its checks' errors. nodes are the nodes to ask, and waiting
// how many connections wait for it, under schemaAgreement.mu.
type agreementRound struct {
	done    chan struct{}
	err     error
	nodes   []string
	waiting int
}

func newSchemaAgreement(check func(ctx context.Context, node string) error) *schemaAgreement {
	return &schemaAgreement{check: check}
}

// wait returns once a round that started after it was called has asked
// node, with that round's error, or when ctx ends, with ctx's.
func (a *schemaAgreement) wait(ctx context.Context, node string) error {
	a.mu.Lock()
	r := a.next
	if r == nil {
		r = &agreementRound{done: make(chan struct{})}
		a.next = r
	}
	r.waiting++
	if !slices.Contains(r.nodes, node) {
		r.nodes = append(r.nodes, node)
	}
	if !a.running {
		a.start()
	}
	a.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// start runs the next round, and the rounds after it while connections
// wait for them. a.mu is held.
func (a *schemaAgreement) start() {
	r := a.next
	a.next, a.running = nil, true
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), schemaAgreementWait)
		for _, node := range r.nodes {
			if err := a.check(ctx, node); err != nil && r.err == nil {
				r.err = fmt.Errorf("%s: %w", node, err)
			}
		}
		cancel()
		close(r.done)
		a.mu.Lock()
		defer a.mu.Unlock()
		a.running = false
		if a.next != nil {
			a.start()
		}
	}()
}

// agreementOf returns the check of the nodes' agreement on the schema with
// src's connection. It asks the node that answered the change, as drivers
// ask the node they sent it to: that node has applied it, while another
// node may report, for itself and every peer, the version from before.
// Each poll takes the connection for its two queries only: the schema and
// the ring are read in between.
func agreementOf(src *upstreamSchema) func(ctx context.Context, node string) error {
	return func(ctx context.Context, node string) error {
		for {
			var agreed bool
			var failed error
			err := src.withSession(ctx, func(s *gocql.Session) error {
				// A failed query leaves the session in place: the node
				// may be down, which the schema's reader sees for itself.
				agreed, failed = versionsAgree(ctx, s, node)
				return nil
			})
			switch {
			case err != nil:
				return err
			case agreed:
				return nil
			}
			select {
			case <-ctx.Done():
				if failed != nil {
					return failed
				}
				return fmt.Errorf("%w, the nodes' schema versions still differ", ctx.Err())
			case <-time.After(agreementPoll):
			}
		}
	}
}

// versionsAgree reports whether node, through s, and the peers it knows
// of report one schema version.
func versionsAgree(ctx context.Context, s *gocql.Session, node string) (bool, error) {
	id, err := hostID(s, node)
	if err != nil {
		return false, err
	}
	var local gocql.UUID
	if err := s.Query("SELECT schema_version FROM system.local WHERE key = 'local'").
		SetHostID(id).ScanContext(ctx, &local); err != nil {
		return false, fmt.Errorf("reading its schema version: %w", err)
	}
	iter := s.Query("SELECT schema_version FROM system.peers").SetHostID(id).IterContext(ctx)
	var peer gocql.UUID
	agreed := true
	for iter.Scan(&peer) {
		// A peer that has not said yet, as one joining, is not counted,
		// as drivers do not count it.
		if peer != (gocql.UUID{}) && peer != local {
			agreed = false
		}
	}
	if err := iter.Close(); err != nil {
		return false, fmt.Errorf("reading its peers' schema versions: %w", err)
	}
	return agreed, nil
}

// hostID returns the host id of node (host:port) among s's hosts.
func hostID(s *gocql.Session, node string) (string, error) {
	host, port, err := net.SplitHostPort(node)
	if err != nil {
		return "", err
	}
	ips := []string{host}
	if net.ParseIP(host) == nil {
		if ips, err = net.LookupHost(host); err != nil {
			return "", err
		}
	}
	for _, h := range s.GetHosts() {
		if strconv.Itoa(h.Port()) == port && slices.Contains(ips, h.ConnectAddress().String()) {
			return h.HostID(), nil
		}
	}
	return "", fmt.Errorf("not among the schema connection's nodes")
}
