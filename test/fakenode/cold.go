package fakenode

import (
	"crypto/md5"
	"fmt"
	"strings"

	"github.com/datastax/go-cassandra-native-protocol/datatype"
	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"

	"github.com/cqlguard/cqlguard/cql"
	"github.com/cqlguard/cqlguard/frame"
)

// maxCold bounds the answers remembered for queries off the request path.
const maxCold = 10000

// coldAnswer answers a query other than a read of the user table or a
// write: system tables, other tables, USE, DDL. Answers are remembered by
// query text.
func (n *Node) coldAnswer(q string, keyspace []byte) *answer {
	key := string(keyspace) + "\x00" + q
	n.mu.Lock()
	a := n.cold[key]
	n.mu.Unlock()
	if a != nil {
		return a
	}
	a = n.encodeCold(q, keyspace)
	n.mu.Lock()
	if len(n.cold) < maxCold {
		n.cold[key] = a
	}
	n.mu.Unlock()
	return a
}

func (n *Node) encodeCold(q string, keyspace []byte) *answer {
	var rec cql.Recognizer
	st := rec.Recognize([]byte(q))
	var msg message.Message = &message.VoidResult{}
	switch st.Kind {
	case cql.StmtUse:
		msg = &message.SetKeyspaceResult{Keyspace: string(st.Keyspace)}
	case cql.StmtSelect:
		ks := st.Keyspace
		if len(ks) == 0 {
			ks = keyspace
		}
		msg = n.selectMessage(q, strings.ToLower(string(ks)), strings.ToLower(string(st.Table)))
	default:
		if m := schemaChange(q, string(keyspace)); m != nil {
			msg = m
		}
	}
	a, err := messageAnswer(same(msg))
	if err != nil {
		return n.serverError(err)
	}
	return a
}

// selectMessage answers a SELECT on keyspace.table.
func (n *Node) selectMessage(q, keyspace, table string) message.Message {
	if t := n.tables[keyspace+"."+table]; t != nil {
		return t.selectRows(q)
	}
	if keyspace == "system" && table == "peers_v2" && !n.opts.PeersV2 {
		return &message.Invalid{ErrorMessage: "unconfigured table peers_v2"}
	}
	if n.userTable([]byte(keyspace), []byte(table)) {
		value := make([]byte, n.opts.RowBytes)
		fillText(value)
		return n.userRows(false, value)
	}
	// A table the node does not model: no rows, one text column per
	// selected name.
	md := &message.RowsMetadata{}
	for i, name := range selectedNames(q) {
		md.Columns = append(md.Columns, &message.ColumnMetadata{Keyspace: keyspace, Table: table,
			Name: name, Index: int32(i), Type: datatype.Varchar})
	}
	md.ColumnCount = int32(len(md.Columns))
	return &message.RowsResult{Metadata: md, Data: message.RowSet{}}
}

// selectedNames lists the names a SELECT selects; "key" for *.
func selectedNames(q string) []string {
	lower := strings.ToLower(q)
	i, j := strings.Index(lower, "select"), strings.Index(lower, " from ")
	if i < 0 || j < i || strings.TrimSpace(lower[i+6:j]) == "*" {
		return []string{"key"}
	}
	var names []string
	for _, n := range strings.Split(lower[i+6:j], ",") {
		names = append(names, strings.Trim(strings.TrimSpace(n), `"`))
	}
	return names
}

// preparedKey begins the keys of PREPARE answers among the cold answers.
const preparedKey = "\x01PREPARE\x00"

// prepare answers PREPARE q and remembers the statement for EXECUTE.
func (n *Node) prepare(q []byte) *answer {
	key := preparedKey + string(q)
	n.mu.Lock()
	a := n.cold[key]
	n.mu.Unlock()
	if a != nil {
		return a
	}
	sum := md5.Sum(q)
	id := sum[:]
	var rec cql.Recognizer
	st := rec.Recognize(q)
	ks, tbl := strings.ToLower(string(st.Keyspace)), strings.ToLower(string(st.Table))
	if ks == "" {
		ks = n.opts.Keyspace
	}
	user := n.userTable([]byte(ks), []byte(tbl))

	// Bound variables: on the user table, k is the bigint partition key
	// wherever a marker gives it and every other marker is a blob; on
	// other tables every marker is text.
	vars := &message.VariablesMetadata{Columns: []*message.ColumnMetadata{}}
	names := make([]string, st.Markers)
	for _, r := range st.Restrictions {
		for _, t := range r.Terms {
			if t.Kind == cql.TermPositional && t.Index < len(names) {
				names[t.Index] = string(r.Column)
			}
		}
	}
	for i, name := range names {
		typ := datatype.DataType(datatype.Varchar)
		switch {
		case user && name == "k":
			typ = datatype.Bigint
			vars.PkIndices = append(vars.PkIndices, uint16(i))
		case user:
			typ = datatype.Blob
		}
		if name == "" {
			name = fmt.Sprint("v", i)
		}
		vars.Columns = append(vars.Columns, &message.ColumnMetadata{Keyspace: ks, Table: tbl, Name: name, Index: int32(i), Type: typ})
	}
	result := &message.RowsMetadata{}
	stmt := &statement{user: user, write: st.Kind != cql.StmtSelect, keyMarker: -1}
	if user {
		stmt.keyMarker, stmt.key = keyOf(st)
	}
	var rows [2]message.Message
	if st.Kind == cql.StmtSelect {
		value := make([]byte, n.opts.RowBytes)
		fillText(value)
		var full *message.RowsResult
		if user {
			full = n.userRows(false, value)
		} else {
			m := n.selectMessage(string(q), ks, tbl)
			if _, ok := m.(*message.RowsResult); !ok {
				// A refused table is refused when prepared.
				return n.remember(key, mustAnswer(same(m)))
			}
			full = m.(*message.RowsResult)
		}
		result = full.Metadata
		skipped := *full
		md := *full.Metadata
		md.Columns = nil
		skipped.Metadata = &md
		rows = [2]message.Message{full, &skipped}
	}
	for skip := range 2 {
		m := rows[skip]
		if m == nil {
			m = &message.VoidResult{}
		}
		r, err := messageAnswer(same(m))
		if err != nil {
			return n.serverError(err)
		}
		stmt.result[skip] = r
	}
	a, err := messageAnswer(func(v primitive.ProtocolVersion) message.Message {
		p := &message.PreparedResult{PreparedQueryId: id, VariablesMetadata: vars, ResultMetadata: result}
		if v >= 5 {
			p.ResultMetadataId = id[:8]
		}
		if v < 4 {
			vv := *vars
			vv.PkIndices = nil
			p.VariablesMetadata = &vv
		}
		return p
	})
	if err != nil {
		return n.serverError(err)
	}

	n.mu.Lock()
	old := *n.prepared.Load()
	next := make(map[string]*statement, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[string(id)] = stmt
	n.prepared.Store(&next)
	n.mu.Unlock()
	return n.remember(key, a)
}

// remember keeps answer a for key while there is room, and returns it.
func (n *Node) remember(key string, a *answer) *answer {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.cold) < maxCold {
		n.cold[key] = a
	}
	return a
}

func (n *Node) serverError(err error) *answer {
	return newAnswer(frame.OpError, func(uint8) []byte {
		return errorBody(frame.ErrCodeServer, "fakenode: "+err.Error())
	})
}

// schemaChange answers a CREATE, ALTER or DROP of a keyspace or table, in
// keyspace unless it names one, as Cassandra does: a RESULT Schema_change
// naming what changed. It returns nil for any other statement.
func schemaChange(q, keyspace string) message.Message {
	words := strings.Fields(strings.ToLower(strings.TrimRight(q, "; \t\r\n")))
	if len(words) < 3 {
		return nil
	}
	change := map[string]primitive.SchemaChangeType{
		"create": primitive.SchemaChangeTypeCreated,
		"alter":  primitive.SchemaChangeTypeUpdated,
		"drop":   primitive.SchemaChangeTypeDropped,
	}[words[0]]
	if change == "" {
		return nil
	}
	name := words[2]
	for i := 2; i < len(words) && (words[i] == "if" || words[i] == "not" || words[i] == "exists"); i++ {
		if i+1 < len(words) {
			name = words[i+1]
		}
	}
	name, _, _ = strings.Cut(name, "(")
	switch words[1] {
	case "keyspace":
		return &message.SchemaChangeResult{ChangeType: change, Target: primitive.SchemaChangeTargetKeyspace, Keyspace: name}
	case "table":
		ks, table, ok := strings.Cut(name, ".")
		if !ok {
			ks, table = keyspace, name
		}
		return &message.SchemaChangeResult{ChangeType: change, Target: primitive.SchemaChangeTargetTable, Keyspace: ks, Object: table}
	}
	return nil
}
