package integration

// TestToken checks the proxy's tokens against Cassandra itself: for every
// type a partition key can have, and for composite keys, it writes random
// values (with their edge cases) through the proxy, prepared and executed by
// gocql, as inline CQL literals, and as QUERY frames with positional and
// named values, and compares the tokens the proxy classified each write with
// to Cassandra's token(k). Cassandra's tokens are also checked per value
// against schema.Token, so that a mismatch names the value.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/big"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/datastax/go-cassandra-native-protocol/client"
	nativeframe "github.com/datastax/go-cassandra-native-protocol/frame"
	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"
	"github.com/rs/zerolog"
	zlog "github.com/rs/zerolog/log"
	"gopkg.in/inf.v0"

	"github.com/cqlguard/cqlguard/classify"
	"github.com/cqlguard/cqlguard/schema"
)

const tokenKeyspace = "cqlguard_tokens"

// tokenValue is one partition key value: what gocql binds, and the CQL
// literal text for the same value.
type tokenValue struct {
	bound any
	lit   string
	// boundOnly values are not written as literals: Cassandra's parser
	// refuses or misreads their literal (decimal exponents near 2^31).
	boundOnly bool
}

// tokenCase is one partition key type and a generator of its values.
type tokenCase struct {
	name string
	typ  string // CQL type, or for composite keys several, comma-separated
	gen  func(r *rand.Rand, i int) []tokenValue
}

// recorder is a gocql.Marshaler that keeps the bytes gocql produced.
type recorder struct {
	v   any
	out *[]byte
}

func (r recorder) MarshalCQL(info gocql.TypeInfo) ([]byte, error) {
	b, err := gocql.Marshal(info, r.v)
	*r.out = b
	return b, err
}

// tokenValues is how many random values of each key type TestToken
// writes, each in four ways: 300, or CQLGUARD_TOKEN_VALUES (1,000 takes
// about a minute more).
func tokenValues(t *testing.T) int {
	t.Helper()
	v := os.Getenv("CQLGUARD_TOKEN_VALUES")
	if v == "" {
		return 300
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("CQLGUARD_TOKEN_VALUES=%q: want a positive count", v)
	}
	return n
}

func TestToken(t *testing.T) {
	skipUnlessEnabled(t)
	observed.watch(tokenKeyspace)
	// The protocol library's client logs every frame at debug level to
	// zerolog's global logger.
	zlog.Logger = zlog.Logger.Level(zerolog.WarnLevel)
	c := gocql.NewCluster(proxyAddr)
	c.Authenticator = gocql.PasswordAuthenticator{Username: user, Password: password}
	c.Timeout = 30 * time.Second
	c.ConnectTimeout = 10 * time.Second
	c.Consistency = gocql.One
	c.NumConns = 4
	s, err := c.CreateSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	// QUERY frames with values, which gocql does not send (it prepares
	// every statement with values), go over connections of the protocol
	// library's client.
	var raw []*client.CqlClientConnection
	for range 4 {
		conn, err := client.NewCqlClient(proxyAddr, &client.AuthCredentials{Username: user, Password: password}).
			ConnectAndInit(ctx, primitive.ProtocolVersion4, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		raw = append(raw, conn)
	}
	for _, q := range []string{
		"DROP KEYSPACE IF EXISTS " + tokenKeyspace,
		"CREATE KEYSPACE " + tokenKeyspace + " WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
		"CREATE TYPE " + tokenKeyspace + ".addr (street text, no int, tags frozen<set<text>>)",
	} {
		if err := s.Query(q).ExecContext(ctx); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	udts := map[string]schema.Type{}
	resolve := func(ks, name string) (schema.Type, error) {
		if u, ok := udts[name]; ok {
			return u, nil
		}
		return schema.Type{}, fmt.Errorf("no type %s.%s", ks, name)
	}
	addr, err := schema.ParseType("tuple<text, int, frozen<set<text>>>", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	udts["addr"] = schema.Type{Kind: schema.UDT, Name: "addr", Keyspace: tokenKeyspace,
		Fields: []string{"street", "no", "tags"}, Elems: addr.Elems}

	// The group returns once its parallel subtests are done, before the
	// session closes.
	t.Run("types", func(t *testing.T) {
		for i, tc := range tokenCases() {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				runTokenCase(t, s, raw, i, tc, resolve)
			})
		}
	})
}

func runTokenCase(t *testing.T, s *gocql.Session, raw []*client.CqlClientConnection, n int, tc tokenCase, resolve func(ks, name string) (schema.Type, error)) {
	ctx := context.Background()
	tableName := fmt.Sprintf("t%d", n)
	table := tokenKeyspace + "." + tableName
	typeTexts := strings.Split(tc.typ, ";")
	var cols, defs, marks, names []string
	var types []schema.Type
	for i, tt := range typeTexts {
		cols = append(cols, fmt.Sprintf("k%d", i))
		defs = append(defs, fmt.Sprintf("k%d %s", i, tt))
		marks = append(marks, "?")
		names = append(names, fmt.Sprintf(":k%d", i))
		st, err := schema.ParseType(tt, resolve, tokenKeyspace)
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, st)
	}
	create := fmt.Sprintf("CREATE TABLE %s (%s, id int, PRIMARY KEY ((%s), id))", table, strings.Join(defs, ", "), strings.Join(cols, ", "))
	if err := s.Query(create).ExecContext(ctx); err != nil {
		t.Fatalf("%s: %v", create, err)
	}

	r := rand.New(rand.NewPCG(uint64(n)+1, 42))
	count := tokenValues(t)
	var values [][]tokenValue
	for i := range count {
		values = append(values, tc.gen(r, i))
	}
	literals := func(vals []tokenValue) string {
		var lits []string
		for _, v := range vals {
			lits = append(lits, v.lit)
		}
		return strings.Join(lits, ", ")
	}
	var restrictions []string
	for j, v := range values[0] {
		restrictions = append(restrictions, cols[j]+" = "+v.lit)
	}
	waitForSchema(t, s, tokenKeyspace, tableName, fmt.Sprintf("SELECT id FROM %s WHERE %s", table, strings.Join(restrictions, " AND ")))

	// Each value is written four times, in four phases, so that the
	// proxy's classifications of each phase can be told apart: id 4i
	// prepared and executed with bound values, 4i+1 as a QUERY with inline
	// literals, 4i+2 as a QUERY with positional (even i) or named (odd i)
	// values, 4i+3 with inline literals prepared and executed.
	const (
		phasePrepared = iota
		phaseLiteral
		phaseBound
		phasePreparedLiteral
		phases
	)
	phaseNames := [phases]string{"prepared", "literal", "bound", "prepared literal"}
	want := make([]int64, phases*count) // schema.Token, by id
	bound := make([][][]byte, count)    // the bytes gocql bound, by value
	insert := fmt.Sprintf("INSERT INTO %s (%s, id) VALUES (%s, ?)", table, strings.Join(cols, ", "), strings.Join(marks, ", "))
	insertNamed := fmt.Sprintf("INSERT INTO %s (%s, id) VALUES (%s, :id)", table, strings.Join(cols, ", "), strings.Join(names, ", "))

	var mu sync.Mutex
	var failures []string
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(failures) < 20 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}
	failed := make([]bool, phases*count) // ids whose insert failed
	var refused atomic.Int64             // literals AppendLiteral refuses on purpose
	var rejectedLiterals atomic.Int64    // literals Cassandra refuses
	var rejectedTokens [phases][]int64   // their tokens, under mu
	write := func(phase, i int, kb *schema.KeyBuilder, buf *[]byte, conn *client.CqlClientConnection) {
		vals := values[i]
		id := phases*i + phase
		switch phase {
		case phasePrepared:
			recs := make([][]byte, len(vals))
			if elems, ok := vals[0].bound.([]any); ok && len(vals) == 1 {
				// gocql v2 cannot bind a tuple partition key (it counts
				// the components as values, then wants one value): bind it
				// with the protocol library's client.
				recs[0] = tupleBytes(elems)
				if err := rawExecute(conn, insert, recs[0], id); err != nil {
					fail("prepared %v: %v", vals, err)
					failed[id] = true
					return
				}
			} else {
				args := make([]any, 0, len(vals)+1)
				for j, v := range vals {
					args = append(args, recorder{v.bound, &recs[j]})
				}
				args = append(args, id)
				if err := s.Query(insert, args...).ExecContext(ctx); err != nil {
					fail("prepared %v: %v", vals, err)
					failed[id] = true
					return
				}
			}
			bound[i] = recs
			kb.Reset()
			for _, b := range recs {
				kb.Add(b)
			}
			want[id] = kb.Token()
		case phaseLiteral, phasePreparedLiteral:
			if slices.ContainsFunc(vals, func(v tokenValue) bool { return v.boundOnly }) {
				failed[id] = true
				return
			}
			kb.Reset()
			ok := true
			for j, v := range vals {
				start := len(*buf)
				var err error
				*buf, err = schema.AppendLiteral(*buf, types[j], []byte(v.lit))
				if errors.Is(err, schema.ErrDuplicateMapKey) {
					// Refused on purpose: the proxy leaves it unpinned.
					refused.Add(1)
					ok = false
					break
				}
				if err != nil {
					fail("AppendLiteral(%s, %s): %v", types[j], v.lit, err)
					ok = false
					break
				}
				kb.Add((*buf)[start:])
			}
			*buf = (*buf)[:0]
			q := fmt.Sprintf("INSERT INTO %s (%s, id) VALUES (%s, %d)", table, strings.Join(cols, ", "), literals(vals), id)
			var err error
			if phase == phaseLiteral {
				err = rawQuery(conn, q, &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne})
			} else {
				err = s.Query(q).ExecContext(ctx) // gocql prepares it
			}
			if err != nil {
				// A literal Cassandra refuses (an exponent past its
				// parser's range, say) fails at the upstream whatever
				// token the proxy gives it; it is counted, not failed.
				if ok {
					t.Logf("Cassandra refused %s: %v", q, err)
					rejectedLiterals.Add(1)
					mu.Lock()
					rejectedTokens[phase] = append(rejectedTokens[phase], kb.Token())
					mu.Unlock()
				}
				failed[id] = true
				return
			}
			if !ok {
				failed[id] = true // Cassandra took it; reported above
				return
			}
			want[id] = kb.Token()
		case phaseBound:
			if bound[i] == nil {
				failed[id] = true
				return
			}
			idBytes := binary.BigEndian.AppendUint32(nil, uint32(id))
			opts := &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne}
			q := insert
			if i%2 == 0 {
				for _, b := range bound[i] {
					opts.PositionalValues = append(opts.PositionalValues, primitive.NewValue(b))
				}
				opts.PositionalValues = append(opts.PositionalValues, primitive.NewValue(idBytes))
			} else {
				q = insertNamed
				opts.NamedValues = map[string]*primitive.Value{"id": primitive.NewValue(idBytes)}
				for j, b := range bound[i] {
					opts.NamedValues[cols[j]] = primitive.NewValue(b)
				}
			}
			if err := rawQuery(conn, q, opts); err != nil {
				fail("bound %v: %v", vals, err)
				failed[id] = true
				return
			}
			want[id] = want[phases*i+phasePrepared]
		}
	}
	var observedTokens [phases][]int64
	var refusedByPhase [phases]int
	for phase := range phases {
		work := make(chan int)
		var wg sync.WaitGroup
		for w := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var kb schema.KeyBuilder
				var buf []byte
				for i := range work {
					write(phase, i, &kb, &buf, raw[w%len(raw)])
				}
			}()
		}
		for i := range count {
			work <- i
		}
		close(work)
		wg.Wait()
		// What the proxy computed for this phase's writes.
		var proxyTokens []int64
		unpinned := 0
		for _, o := range observed.take(tokenKeyspace, tableName) {
			if o.op != classify.OpWrite {
				continue
			}
			if !o.pinned || len(o.tokens) != 1 {
				unpinned++
				continue
			}
			proxyTokens = append(proxyTokens, o.tokens[0])
		}
		n := int(refused.Swap(0))
		refusedByPhase[phase] = n
		// Only writes refused on purpose may be unpinned; a driver may send
		// one more than once (after an Unprepared, say), so their number is
		// checked by the set comparison below.
		if unpinned > 0 && n == 0 {
			fail("%s: %d %s writes not pinned to one partition by the proxy", tc.typ, unpinned, phaseNames[phase])
		}
		observedTokens[phase] = proxyTokens
	}

	got := make(map[int]int64, phases*count)
	iter := s.Query(fmt.Sprintf("SELECT token(%s), id FROM %s", strings.Join(cols, ", "), table)).PageSize(5000).IterContext(ctx)
	var tok int64
	var id int
	for iter.Scan(&tok, &id) {
		got[id] = tok
	}
	if err := iter.Close(); err != nil {
		t.Fatal(err)
	}
	var cassandraTokens [phases][]int64
	var mismatches [phases]int
	for id := range phases * count {
		g, ok := got[id]
		if !ok {
			continue // its insert failed, reported above
		}
		cassandraTokens[id%phases] = append(cassandraTokens[id%phases], g)
		if !failed[id] && g != want[id] {
			mismatches[id%phases]++
			fail("%s: token %d, schema.Token %d (%s: %+v)", tc.typ, g, want[id], phaseNames[id%phases], values[id/phases])
		}
	}
	// The proxy's tokens, each phase's as a set (a driver may send a write
	// twice, after an Unprepared say), must be Cassandra's, less the
	// writes left unpinned on purpose.
	var proxyMismatches [phases]int
	for phase := range phases {
		// A literal Cassandra refused was still classified, when sent as a
		// QUERY: its token is no extra.
		extra, _ := setDiff(observedTokens[phase], append(cassandraTokens[phase], rejectedTokens[phase]...))
		_, missing := setDiff(observedTokens[phase], cassandraTokens[phase])
		proxyMismatches[phase] = extra
		if extra > 0 {
			fail("%s: %s: %d of the proxy's tokens are not among Cassandra's", tc.typ, phaseNames[phase], extra)
		}
		if missing > refusedByPhase[phase] {
			seen := map[int64]bool{}
			for _, x := range observedTokens[phase] {
				seen[x] = true
			}
			for id, tok := range got {
				if id%phases == phase && !seen[tok] {
					t.Logf("not seen pinned by the proxy: %s", values[id/phases][0].lit)
				}
			}
			fail("%s: %s: %d of Cassandra's tokens are not among the proxy's", tc.typ, phaseNames[phase], missing)
		}
	}
	if n := rejectedLiterals.Load(); n > 0 {
		t.Logf("%s: %d literals refused by Cassandra", tc.typ, n)
	}
	t.Logf("%s: %d rows; proxy tokens (%s) %d, %d, %d, %d; mismatches with Cassandra: proxy %v, schema.Token %v",
		tc.typ, len(got), strings.Join(phaseNames[:], ", "), len(observedTokens[0]), len(observedTokens[1]), len(observedTokens[2]), len(observedTokens[3]), proxyMismatches, mismatches)
	for _, f := range failures {
		t.Error(f)
	}
}

// tupleBytes serializes a tuple of int and text components (nil for null).
func tupleBytes(elems []any) []byte {
	b := []byte{}
	for _, e := range elems {
		var p []byte
		switch v := e.(type) {
		case nil:
			b = binary.BigEndian.AppendUint32(b, math.MaxUint32)
			continue
		case int32:
			p = binary.BigEndian.AppendUint32(nil, uint32(v))
		case string:
			p = []byte(v)
		default:
			panic(fmt.Sprintf("tuple component %T", e))
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	return b
}

// rawExecute prepares q (one partition key value and an int id) and
// executes it with key and id, over conn.
func rawExecute(conn *client.CqlClientConnection, q string, key []byte, id int) error {
	resp, err := conn.SendAndReceive(nativeframe.NewFrame(primitive.ProtocolVersion4, 0, &message.Prepare{Query: q}))
	if err != nil {
		return err
	}
	prep, ok := resp.Body.Message.(*message.PreparedResult)
	if !ok {
		return fmt.Errorf("PREPARE: %s", resp.Body.Message)
	}
	opts := &message.QueryOptions{Consistency: primitive.ConsistencyLevelOne, PositionalValues: []*primitive.Value{
		primitive.NewValue(key), primitive.NewValue(binary.BigEndian.AppendUint32(nil, uint32(id)))}}
	resp, err = conn.SendAndReceive(nativeframe.NewFrame(primitive.ProtocolVersion4, 0, &message.Execute{QueryId: prep.PreparedQueryId, Options: opts}))
	if err != nil {
		return err
	}
	if e, ok := resp.Body.Message.(message.Error); ok {
		return fmt.Errorf("%s", e)
	}
	return nil
}

// rawQuery sends a QUERY frame over conn and returns the error it got.
func rawQuery(conn *client.CqlClientConnection, q string, opts *message.QueryOptions) error {
	resp, err := conn.SendAndReceive(nativeframe.NewFrame(primitive.ProtocolVersion4, 0, &message.Query{Query: q, Options: opts}))
	if err != nil {
		return err
	}
	if e, ok := resp.Body.Message.(message.Error); ok {
		return fmt.Errorf("%s", e)
	}
	return nil
}

// setDiff returns how many distinct elements of a are not in b, and how
// many distinct elements of b are not in a.
func setDiff(a, b []int64) (extra, missing int) {
	in := func(s []int64) map[int64]bool {
		m := map[int64]bool{}
		for _, x := range s {
			m[x] = true
		}
		return m
	}
	sa, sb := in(a), in(b)
	for x := range sa {
		if !sb[x] {
			extra++
		}
	}
	for x := range sb {
		if !sa[x] {
			missing++
		}
	}
	return extra, missing
}

// waitForSchema runs probe, a SELECT pinned to one partition of table,
// until the proxy classifies it as pinned: the proxy learns of the new
// table from the schema change, a moment after CREATE returns.
func waitForSchema(t *testing.T, s *gocql.Session, keyspace, table, probe string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if err := s.Query(probe).Exec(); err != nil {
			t.Fatalf("%s: %v", probe, err)
		}
		for _, o := range observed.take(keyspace, table) {
			if o.pinned {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the proxy never pinned %s", probe)
}

// tokenCases lists the key types and their value generators.
func tokenCases() []tokenCase {
	one := func(f func(r *rand.Rand, i int) tokenValue) func(r *rand.Rand, i int) []tokenValue {
		return func(r *rand.Rand, i int) []tokenValue { return []tokenValue{f(r, i)} }
	}
	cases := []tokenCase{
		{"int", "int", one(genInt(32))},
		{"bigint", "bigint", one(genInt(64))},
		{"smallint", "smallint", one(genInt(16))},
		{"tinyint", "tinyint", one(genInt(8))},
		{"varint", "varint", one(genVarint)},
		{"decimal", "decimal", one(genDecimal)},
		{"float", "float", one(genFloat(32))},
		{"double", "double", one(genFloat(64))},
		{"boolean", "boolean", one(genBool)},
		{"text", "text", one(genText(false, false))},
		{"ascii", "ascii", one(genText(true, false))},
		{"varchar", "varchar", one(genText(false, false))},
		{"uuid", "uuid", one(genUUID(false))},
		{"timeuuid", "timeuuid", one(genUUID(true))},
		{"timestamp", "timestamp", one(genTimestamp)},
		{"date", "date", one(genDate)},
		{"time", "time", one(genTime)},
		{"inet", "inet", one(genInet)},
		{"blob", "blob", one(genBlob(false))},
		{"list", "frozen<list<int>>", one(genList)},
		{"set_text", "frozen<set<text>>", one(genSet(genText(false, true), false))},
		{"set_int", "frozen<set<int>>", one(genSet(genInt(32), true))},
		{"set_double", "frozen<set<double>>", one(genSet(genFloat(64), true))},
		{"set_varint", "frozen<set<varint>>", one(genSet(genVarint, true))},
		{"set_uuid", "frozen<set<uuid>>", one(genSet(genUUID(false), true))},
		{"set_timeuuid", "frozen<set<timeuuid>>", one(genSet(genUUID(true), true))},
		{"set_inet", "frozen<set<inet>>", one(genSet(genInet, true))},
		{"map", "frozen<map<text, int>>", one(genMap)},
		{"tuple", "frozen<tuple<int, text>>", one(genTuple)},
		{"udt", "frozen<addr>", one(genUDT)},
		{"composite", "int;text;uuid", func(r *rand.Rand, i int) []tokenValue {
			return []tokenValue{genInt(32)(r, i), genText(false, true)(r, i), genUUID(false)(r, i)}
		}},
		{"composite_mixed", "timestamp;blob;frozen<list<int>>;double", func(r *rand.Rand, i int) []tokenValue {
			return []tokenValue{genTimestamp(r, i), genBlob(true)(r, i), genList(r, i), genFloat(64)(r, i)}
		}},
	}
	return cases
}

func genInt(bits int) func(r *rand.Rand, i int) tokenValue {
	return func(r *rand.Rand, i int) tokenValue {
		lo, hi := -int64(1)<<(bits-1), int64(1)<<(bits-1)-1
		var v int64
		switch i % 8 {
		case 0:
			v = []int64{lo, hi, 0, -1, 1, lo + 1, hi - 1}[i/8%7]
		case 1:
			v = r.Int64N(201) - 100
		default:
			v = int64(r.Uint64() >> (64 - bits))
			v = v << (64 - bits) >> (64 - bits)
		}
		var bound any
		switch bits {
		case 8:
			bound = int8(v)
		case 16:
			bound = int16(v)
		case 32:
			bound = int32(v)
		default:
			bound = v
		}
		lit := strconv.FormatInt(v, 10)
		if i%5 == 3 && v >= 0 {
			lit = "00" + lit // leading zeros
		}
		return tokenValue{bound: bound, lit: lit}
	}
}

func randBig(r *rand.Rand, i int) *big.Int {
	digits := 1 + r.IntN(60)
	if i%50 == 0 {
		digits = 300
	}
	var sb strings.Builder
	for range digits {
		sb.WriteByte(byte('0' + r.IntN(10)))
	}
	b, _ := new(big.Int).SetString(sb.String(), 10)
	if r.IntN(2) == 0 {
		b.Neg(b)
	}
	switch i % 20 {
	case 1:
		b.SetInt64(0)
	case 2:
		b.SetInt64(-1)
	case 3:
		b.SetInt64(-128)
	case 4:
		b.SetInt64(128)
	case 5:
		b.SetInt64(255)
	case 6:
		b.SetInt64(-129)
	case 7:
		b.Lsh(big.NewInt(1), uint(r.IntN(200)))
	case 8:
		b.Lsh(big.NewInt(1), uint(r.IntN(200)))
		b.Neg(b)
	}
	return b
}

func genVarint(r *rand.Rand, i int) tokenValue {
	b := randBig(r, i)
	return tokenValue{bound: b, lit: b.String()}
}

func genDecimal(r *rand.Rand, i int) tokenValue {
	u := randBig(r, i)
	scale := int32(r.IntN(40) - 10)
	switch i % 17 {
	case 1:
		scale = math.MaxInt32
	case 2:
		scale = math.MinInt32 + 1
	}
	d := inf.NewDecBig(u, inf.Scale(scale))
	digits := new(big.Int).Abs(u).String()
	sign := ""
	if u.Sign() < 0 {
		sign = "-"
	}
	var lit string
	switch {
	case scale < 0 || scale > 1000 || i%3 == 0:
		// unscaled E -scale
		lit = fmt.Sprintf("%s%sE%d", sign, digits, -int64(scale))
	case scale == 0:
		lit = sign + digits
	default:
		for len(digits) <= int(scale) {
			digits = "0" + digits
		}
		p := len(digits) - int(scale)
		lit = sign + digits[:p] + "." + digits[p:]
	}
	return tokenValue{bound: d, lit: lit, boundOnly: i%17 == 1 || i%17 == 2}
}

func genFloat(bits int) func(r *rand.Rand, i int) tokenValue {
	return func(r *rand.Rand, i int) tokenValue {
		var f float64
		switch i % 10 {
		case 0:
			f = []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1), 1, -1, math.MaxFloat32, math.SmallestNonzeroFloat32, math.MaxFloat64, math.SmallestNonzeroFloat64}[i/10%11]
		case 1:
			f = float64(r.IntN(2000) - 1000)
		case 2:
			f = r.NormFloat64() * 1000
		default:
			f = math.Float64frombits(r.Uint64())
		}
		if bits == 32 {
			if !math.IsNaN(f) {
				f = float64(float32(f))
			}
		}
		lit := ""
		switch {
		case math.IsNaN(f):
			lit = []string{"NaN", "nan", "-NaN"}[i%3]
			f = math.NaN()
		case math.IsInf(f, 1):
			lit = []string{"Infinity", "infinity"}[i%2]
		case math.IsInf(f, -1):
			lit = "-Infinity"
		default:
			lit = strconv.FormatFloat(f, 'g', -1, bits)
			if i%4 == 1 {
				lit = strconv.FormatFloat(f, 'e', -1, bits)
			}
			if strings.Contains(lit, "e") && !strings.ContainsAny(lit, ".") && i%3 == 0 {
				lit = strings.Replace(lit, "e", ".0E", 1)
			}
		}
		var bound any = f
		if bits == 32 {
			bound = float32(f)
		}
		return tokenValue{bound: bound, lit: lit}
	}
}

func genBool(r *rand.Rand, i int) tokenValue {
	b := r.IntN(2) == 0
	lit := []string{"false", "true"}[map[bool]int{false: 0, true: 1}[b]]
	if i%3 == 0 {
		lit = strings.ToUpper(lit)
	}
	return tokenValue{bound: b, lit: lit}
}

func quoteCQL(s string, i int) string {
	if i%4 == 0 && !strings.Contains(s, "$$") && !strings.HasSuffix(s, "$") {
		return "$$" + s + "$$"
	}
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

func genText(ascii, allowEmpty bool) func(r *rand.Rand, i int) tokenValue {
	alphabet := []rune("abcXYZ019 '$\"-_/*\n\t")
	if !ascii {
		alphabet = append(alphabet, []rune("éß中文🙂\u0000\u00ff\uffff")...)
	}
	return func(r *rand.Rand, i int) tokenValue {
		n := r.IntN(40)
		if i%100 == 7 {
			n = 2000
		}
		if !allowEmpty && n == 0 {
			n = 1
		}
		var sb strings.Builder
		for range n {
			sb.WriteRune(alphabet[r.IntN(len(alphabet))])
		}
		s := sb.String()
		return tokenValue{bound: s, lit: quoteCQL(s, i)}
	}
}

func genUUID(timeBased bool) func(r *rand.Rand, i int) tokenValue {
	return func(r *rand.Rand, i int) tokenValue {
		var u gocql.UUID
		for j := range u {
			u[j] = byte(r.Uint32())
		}
		version := byte(4)
		if i%3 == 0 {
			version = byte(1 + r.IntN(5))
		}
		if timeBased {
			version = 1
		}
		u[6] = u[6]&0x0f | version<<4
		u[8] = u[8]&0x3f | 0x80
		lit := u.String()
		if i%2 == 0 {
			lit = strings.ToUpper(lit)
		}
		if timeBased {
			return tokenValue{bound: timeUUID(u), lit: lit}
		}
		return tokenValue{bound: u, lit: lit}
	}
}

func genTimestamp(r *rand.Rand, i int) tokenValue {
	var ms int64
	switch i % 10 {
	case 0:
		ms = []int64{0, -1, 1, 253402300799999, -62135596800000}[i/10%5]
	case 1:
		ms = r.Int64() >> r.IntN(64)
		if r.IntN(2) == 0 {
			ms = -ms
		}
	default:
		// Years 1 to 9999.
		ms = -62135596800000 + r.Int64N(253402300800000+62135596800000)
	}
	tm := time.UnixMilli(ms).UTC()
	lit := strconv.FormatInt(ms, 10)
	if tm.Year() >= 1 && tm.Year() <= 9999 && i%10 >= 1 {
		zone := time.FixedZone("", (r.IntN(37)-18)*1800)
		zt := tm.In(zone)
		switch i % 8 {
		case 0:
			lit = "'" + zt.Format("2006-01-02 15:04:05.000-0700") + "'"
		case 1:
			lit = "'" + tm.Format("2006-01-02T15:04:05.000Z") + "'"
		case 2:
			lit = "'" + zt.Format("2006-01-02T15:04:05.000-07:00") + "'"
		case 3:
			lit = "'" + tm.Format("2006-01-02 15:04:05.000") + "'"
		case 4:
			// Up to 9 fraction digits, truncated to milliseconds.
			lit = "'" + zt.Format("2006-1-2T15:04:05.000") + "123456" + zt.Format("-07") + "'"
		case 5:
			if tm.Nanosecond() == 0 && tm.Second() == 0 {
				lit = "'" + tm.Format("2006-01-02 15:04 MST") + "'"
			}
		case 6:
			lit = "'" + strconv.FormatInt(ms, 10) + "'"
		case 7:
			if tm.Hour() == 0 && tm.Minute() == 0 && tm.Second() == 0 && tm.Nanosecond() == 0 {
				lit = "'" + tm.Format("2006-01-02") + "'"
			}
		}
	}
	// gocql sends the zero time.Time (0001-01-01) as an empty value.
	return tokenValue{bound: ms, lit: lit}
}

func genDate(r *rand.Rand, i int) tokenValue {
	days := r.Int64N(2932897+719162) - 719162 // years 1 to 9999
	if i%10 == 0 {
		days = []int64{0, -1, 1, 2932896, -719162}[i/10%5]
	}
	tm := time.UnixMilli(days * 86400000).UTC()
	lit := "'" + tm.Format("2006-01-02") + "'"
	switch i % 3 {
	case 1:
		lit = strconv.FormatInt(days+1<<31, 10)
	case 2:
		lit = "'" + strconv.FormatInt(days+1<<31, 10) + "'"
	}
	return tokenValue{bound: days * 86400000, lit: lit}
}

func genTime(r *rand.Rand, i int) tokenValue {
	ns := r.Int64N(86400e9)
	if i%10 == 0 {
		ns = []int64{0, 1, 86400e9 - 1, 43200e9}[i/10%4]
	}
	d := time.Duration(ns)
	lit := strconv.FormatInt(ns, 10)
	switch i % 3 {
	case 1:
		lit = fmt.Sprintf("'%02d:%02d:%02d.%09d'", ns/3600e9, ns/60e9%60, ns/1e9%60, ns%1e9)
	case 2:
		if ns%1e9 == 0 || i%2 == 0 {
			ns -= ns % 1e9
			d = time.Duration(ns)
			lit = fmt.Sprintf("'%d:%d:%d'", ns/3600e9, ns/60e9%60, ns/1e9%60)
		}
	}
	return tokenValue{bound: d, lit: lit}
}

func genInet(r *rand.Rand, i int) tokenValue {
	if i%2 == 0 {
		ip := net.IPv4(byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())).To4()
		lit := "'" + ip.String() + "'"
		if i%6 == 0 {
			lit = "'::ffff:" + ip.String() + "'"
		}
		return tokenValue{bound: ip, lit: lit}
	}
	ip := make(net.IP, 16)
	for j := range ip {
		ip[j] = byte(r.Uint32())
	}
	if i%5 == 1 {
		copy(ip, make([]byte, 15)) // ::xx
	}
	if ip.To4() != nil {
		ip[0] = 0x20
	}
	lit := "'" + ip.String() + "'"
	if i%7 == 3 {
		lit = "'[" + ip.String() + "]'"
	}
	return tokenValue{bound: ip, lit: lit}
}

func genBlob(allowEmpty bool) func(r *rand.Rand, i int) tokenValue {
	return func(r *rand.Rand, i int) tokenValue {
		n := r.IntN(40)
		if !allowEmpty && n == 0 {
			n = 1
		}
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		h := hex.EncodeToString(b)
		if i%2 == 0 {
			h = strings.ToUpper(h)
		}
		return tokenValue{bound: b, lit: "0x" + h}
	}
}

func genList(r *rand.Rand, i int) tokenValue {
	n := r.IntN(6)
	v := []int32{} // gocql sends a nil slice as null
	var lits []string
	for j := range n {
		e := genInt(32)(r, i+j)
		v = append(v, e.bound.(int32))
		lits = append(lits, e.lit)
	}
	return tokenValue{bound: v, lit: "[" + strings.Join(lits, ", ") + "]"}
}

// genSet makes a set whose elements gocql binds in sorted order (see
// sorted) and the literal lists in random order, with duplicates.
func genSet(elem func(r *rand.Rand, i int) tokenValue, dup bool) func(r *rand.Rand, i int) tokenValue {
	return func(r *rand.Rand, i int) tokenValue {
		n := r.IntN(6)
		vals := []any{}
		var lits []string
		for j := range n {
			e := elem(r, i*7+j)
			vals = append(vals, e.bound)
			lits = append(lits, e.lit)
			if dup && r.IntN(4) == 0 {
				lits = append(lits, e.lit)
			}
		}
		r.Shuffle(len(lits), func(a, b int) { lits[a], lits[b] = lits[b], lits[a] })
		return tokenValue{bound: sortedSet{vals}, lit: "{" + strings.Join(lits, ", ") + "}"}
	}
}

// sortedSet marshals a set with its elements in Cassandra's order: a driver
// sends them in the order it is given, and Cassandra sorts a bound set
// before it computes the token.
type sortedSet struct{ elems []any }

func (s sortedSet) MarshalCQL(info gocql.TypeInfo) ([]byte, error) {
	elems := slices.Clone(s.elems)
	slices.SortStableFunc(elems, compareJava)
	elems = slices.CompactFunc(elems, func(a, b any) bool { return compareJava(a, b) == 0 })
	return gocql.Marshal(info, elems)
}

// compareJava orders values as Cassandra's comparators for their types.
func compareJava(a, b any) int {
	switch x := a.(type) {
	case int32:
		return cmp.Compare(x, b.(int32))
	case string:
		return strings.Compare(x, b.(string))
	case float64:
		y := b.(float64)
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		xb, yb := math.Float64bits(x), math.Float64bits(y)
		if math.IsNaN(x) || math.IsNaN(y) || x == 0 {
			// NaN after everything, -0 before 0.
			return cmp.Compare(int64(xb)^int64(uint64(int64(xb)>>63)>>1), int64(yb)^int64(uint64(int64(yb)>>63)>>1))
		}
		return 0
	case *big.Int:
		return x.Cmp(b.(*big.Int))
	case gocql.UUID:
		y := b.(gocql.UUID)
		if c := cmp.Compare(x[6]>>4, y[6]>>4); c != 0 {
			return c
		}
		if x[6]>>4 == 1 {
			if c := cmp.Compare(x.Timestamp(), y.Timestamp()); c != 0 {
				return c
			}
		}
		return bytes.Compare(x[:], y[:])
	case timeUUID:
		y := b.(timeUUID)
		if c := cmp.Compare(gocql.UUID(x).Timestamp(), gocql.UUID(y).Timestamp()); c != 0 {
			return c
		}
		for i := 8; i < 16; i++ {
			if c := cmp.Compare(int8(x[i]), int8(y[i])); c != 0 {
				return c
			}
		}
		return 0
	case net.IP:
		return bytes.Compare(x, b.(net.IP))
	}
	panic(fmt.Sprintf("no order for %T", a))
}

// timeUUID is a timeuuid bound through a set: its comparator breaks ties
// of timestamps by signed bytes.
type timeUUID gocql.UUID

func (u timeUUID) MarshalCQL(info gocql.TypeInfo) ([]byte, error) {
	return gocql.Marshal(info, gocql.UUID(u))
}

func genMap(r *rand.Rand, i int) tokenValue {
	n := r.IntN(5)
	m := map[string]int32{}
	var lits []string
	for j := range n {
		k := genText(false, true)(r, i+j)
		v := genInt(32)(r, i+j)
		m[k.bound.(string)] = v.bound.(int32)
		lits = append(lits, k.lit+": "+v.lit)
	}
	return tokenValue{bound: sortedMap(m), lit: "{" + strings.Join(lits, ", ") + "}"}
}

// sortedMap marshals a map with its keys in order, which gocql, ranging
// over a Go map, does not.
type sortedMap map[string]int32

func (m sortedMap) MarshalCQL(gocql.TypeInfo) ([]byte, error) {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(m)))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		b = binary.BigEndian.AppendUint32(b, uint32(len(k)))
		b = append(b, k...)
		b = binary.BigEndian.AppendUint32(b, 4)
		b = binary.BigEndian.AppendUint32(b, uint32(m[k]))
	}
	return b, nil
}

func genTuple(r *rand.Rand, i int) tokenValue {
	a := genInt(32)(r, i)
	b := genText(false, true)(r, i)
	if i%10 == 3 {
		return tokenValue{bound: []any{a.bound, nil}, lit: "(" + a.lit + ", null)"}
	}
	return tokenValue{bound: []any{a.bound, b.bound}, lit: "(" + a.lit + ", " + b.lit + ")"}
}

func genUDT(r *rand.Rand, i int) tokenValue {
	street := genText(false, true)(r, i)
	no := genInt(32)(r, i)
	m := map[string]any{"street": street.bound, "no": no.bound, "tags": nil}
	fields := []string{"street: " + street.lit, "NO: " + no.lit}
	if i%3 == 0 {
		delete(m, "street")
		m["street"] = nil
		fields = fields[1:]
	}
	r.Shuffle(len(fields), func(a, b int) { fields[a], fields[b] = fields[b], fields[a] })
	return tokenValue{bound: m, lit: "{" + strings.Join(fields, ", ") + "}"}
}
