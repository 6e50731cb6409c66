package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/gocql/gocql"
)

// runLimits floods one partition through a cqlguard that refuses some of
// its requests: LIMIT_N writes, then LIMIT_N reads, one at a time, of
// partition LIMIT_KEY of LIMIT_KEYSPACE.LIMIT_TABLE (k int, c int, PRIMARY
// KEY (k, c)), limited for reads and writes. Each refusal must be what the
// driver makes of cqlguard's answer: with the opt-in (CQL_OPT_IN=1) a
// *gocql.RequestErrRateLimitReached of the operation's type, rejected by
// the coordinator; without it the Config_error (0x2300) with ScyllaDB's
// message.
//
// LIMIT_RETRY chooses the retry policy: "default" sets none, as
// applications do, and the driver uses &gocql.SimpleRetryPolicy{NumRetries:
// 3}; "none" sets &gocql.SimpleRetryPolicy{NumRetries: 0} on the cluster,
// which stops every retry.
//
// Prints the first refusal of each operation, then one JSON line:
// {"write": {"accepted": n, "refused": n, "attempts": n}, "read": {...},
// "hosts": [...], "seconds": s}, where attempts counts every attempt the
// driver made (its query observer sees each) and hosts the addresses it
// sent them to.
func runLimits() error {
	ks := envOr("LIMIT_KEYSPACE", "cqlguard_limits")
	table := envOr("LIMIT_TABLE", "hot")
	key := envInt("LIMIT_KEY", 60)
	n := envInt("LIMIT_N", 50)
	d := &dialer{}
	c, err := newCluster(d)
	if err != nil {
		return err
	}
	obs := &attempts{n: map[string]int{}, hosts: map[string]bool{}}
	c.QueryObserver = obs
	switch retry := envOr("LIMIT_RETRY", "default"); retry {
	case "default":
	case "none":
		c.RetryPolicy = &gocql.SimpleRetryPolicy{NumRetries: 0}
	default:
		return fmt.Errorf("LIMIT_RETRY=%s: want default or none", retry)
	}
	optIn := !d.hideRateLimitError
	s, err := c.CreateSession()
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer s.Close()

	type counts struct {
		Accepted int `json:"accepted"`
		Refused  int `json:"refused"`
		Attempts int `json:"attempts"`
	}
	result := struct {
		Write   counts   `json:"write"`
		Read    counts   `json:"read"`
		Hosts   []string `json:"hosts"`
		Seconds float64  `json:"seconds"`
	}{}
	start := time.Now()
	for _, op := range []struct {
		name   string
		write  bool
		stmt   string
		counts *counts
	}{
		{"write", true, "INSERT INTO " + ks + "." + table + " (k, c) VALUES (?, ?)", &result.Write},
		{"read", false, "SELECT c FROM " + ks + "." + table + " WHERE k = ? AND c = ?", &result.Read},
	} {
		for i := range n {
			err := s.Query(op.stmt, key, i).Exec()
			if err == nil {
				op.counts.Accepted++
				continue
			}
			if err := checkRefusal(err, optIn, op.write, ks+"."+table); err != nil {
				return fmt.Errorf("%s %d: %w", op.name, i, err)
			}
			if op.counts.Refused == 0 {
				fmt.Printf("refused %s: %T: %v\n", op.name, err, err)
			}
			op.counts.Refused++
		}
		op.counts.Attempts = obs.count(op.stmt)
	}
	result.Seconds = time.Since(start).Seconds()
	result.Hosts = obs.hostList()
	out, err := json.Marshal(result)
	if err != nil {
		return err
	}
	fmt.Println(string(out))
	if result.Write.Refused == 0 || result.Read.Refused == 0 {
		return fmt.Errorf("%d writes and %d reads refused: want some of each", result.Write.Refused, result.Read.Refused)
	}
	return nil
}

// serverError is what the driver makes of an error frame it has no type
// for, such as Config_error.
type serverError interface {
	GetCode() int
	GetMessage() string
}

// checkRefusal returns an error unless err is the refusal of a write (or a
// read) of table that the driver should raise, with or without the opt-in.
func checkRefusal(err error, optIn, write bool, table string) error {
	op, opType := "read", gocql.OpTypeRead
	if write {
		op, opType = "write", gocql.OpTypeWrite
	}
	msg := "Per-partition rate limit reached for " + op + " in table " + table + ", rejected by coordinator"
	if optIn {
		var rl *gocql.RequestErrRateLimitReached
		if !errors.As(err, &rl) {
			return fmt.Errorf("%T: %v; want *gocql.RequestErrRateLimitReached", err, err)
		}
		if rl.OpType != opType || !rl.RejectedByCoordinator || rl.Message != msg {
			return fmt.Errorf("%s (%q); want op type %d, rejected by the coordinator, %q", rl, rl.Message, opType, msg)
		}
		return nil
	}
	var se serverError
	if !errors.As(err, &se) || se.GetCode() != 0x2300 || se.GetMessage() != msg {
		return fmt.Errorf("%T: %v; want Config_error (0x2300) %q", err, err, msg)
	}
	return nil
}

// attempts is a query observer: it counts every attempt the driver makes
// at each statement, retries included, and notes the hosts they went to.
type attempts struct {
	mu    sync.Mutex
	n     map[string]int // by statement
	hosts map[string]bool
}

func (a *attempts) ObserveQuery(_ context.Context, q gocql.ObservedQuery) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n[q.Statement]++
	if q.Host != nil {
		a.hosts[q.Host.ConnectAddressAndPort()] = true
	}
}

// count returns how many attempts the driver made at stmt.
func (a *attempts) count(stmt string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n[stmt]
}

// hostList returns the hosts the attempts went to, sorted.
func (a *attempts) hostList() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Sorted(maps.Keys(a.hosts))
}
