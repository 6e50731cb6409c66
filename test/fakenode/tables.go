package fakenode

import (
	"bytes"
	"crypto/md5"
	"encoding/binary"
	"net"
	"strings"

	"github.com/datastax/go-cassandra-native-protocol/datatype"
	"github.com/datastax/go-cassandra-native-protocol/message"
)

// table is a system table the server answers SELECTs on: its columns and
// its rows, each row's values encoded in column order.
type table struct {
	keyspace, name string
	cols           []column
	rows           []message.Row
}

type column struct {
	name string
	typ  datatype.DataType
}

// selectRows answers a SELECT on t, keeping the columns the query names
// (all for *). Columns it does not have are left out rather than refused:
// drivers only read what they find.
func (t *table) selectRows(q string) *message.RowsResult {
	keep := projection(q, t.cols)
	md := &message.RowsMetadata{ColumnCount: int32(len(keep))}
	for i, k := range keep {
		md.Columns = append(md.Columns, &message.ColumnMetadata{Keyspace: t.keyspace, Table: t.name,
			Name: t.cols[k].name, Index: int32(i), Type: t.cols[k].typ})
	}
	data := message.RowSet{}
	for _, row := range t.rows {
		r := make(message.Row, len(keep))
		for i, k := range keep {
			r[i] = row[k]
		}
		data = append(data, r)
	}
	return &message.RowsResult{Metadata: md, Data: data}
}

// projection returns the indexes of the columns a SELECT names, in its order.
func projection(q string, cols []column) []int {
	lower := strings.ToLower(q)
	i, j := strings.Index(lower, "select"), strings.Index(lower, " from ")
	all := make([]int, len(cols))
	for k := range cols {
		all[k] = k
	}
	if i < 0 || j < i {
		return all
	}
	list := strings.TrimSpace(lower[i+len("select") : j])
	if list == "*" {
		return all
	}
	var keep []int
	for _, name := range strings.Split(list, ",") {
		name = strings.Trim(strings.TrimSpace(name), `"`)
		for k, c := range cols {
			if c.name == name {
				keep = append(keep, k)
			}
		}
	}
	return keep
}

var (
	text      = datatype.Varchar
	textSet   = datatype.NewSet(datatype.Varchar)
	textList  = datatype.NewList(datatype.Varchar)
	textMap   = datatype.NewMap(datatype.Varchar, datatype.Varchar)
	blobMap   = datatype.NewMap(datatype.Varchar, datatype.Blob)
	schemaVer = bytes.Repeat([]byte{0x5c}, 16)
)

// systemTables are the tables drivers and cqlguard read at connection and
// schema load: the node itself, its peers, and a schema of one table,
// opts.Keyspace.opts.Table (k bigint PRIMARY KEY, v blob).
func systemTables(ip net.IP, port int, opts Options) map[string]*table {
	ip4 := ip.To4()
	if ip4 != nil {
		ip = ip4
	}
	s := func(v string) []byte { return []byte(v) }
	rpcPort := binary.BigEndian.AppendUint32(nil, uint32(port))
	local := &table{keyspace: "system", name: "local", cols: []column{
		{"key", text}, {"bootstrapped", text}, {"broadcast_address", datatype.Inet},
		{"cluster_name", text}, {"cql_version", text}, {"data_center", text},
		{"host_id", datatype.Uuid}, {"listen_address", datatype.Inet},
		{"native_protocol_version", text}, {"partitioner", text}, {"rack", text},
		{"release_version", text}, {"rpc_address", datatype.Inet}, {"rpc_port", datatype.Int},
		{"schema_version", datatype.Uuid}, {"tokens", textSet},
	}, rows: []message.Row{{
		s("local"), s("COMPLETED"), ip, s("fakenode"), s("3.4.7"), s("dc1"), hostID(ip), ip,
		s("5"), s("org.apache.cassandra.dht.Murmur3Partitioner"), s("rack1"), s("5.0.0"), ip,
		rpcPort, schemaVer, encodeTextCollection(token(ip)),
	}}}
	peers := &table{keyspace: "system", name: "peers", cols: []column{
		{"peer", datatype.Inet}, {"data_center", text}, {"host_id", datatype.Uuid},
		{"preferred_ip", datatype.Inet}, {"rack", text}, {"release_version", text},
		{"rpc_address", datatype.Inet}, {"schema_version", datatype.Uuid}, {"tokens", textSet},
	}}
	peersV2 := &table{keyspace: "system", name: "peers_v2", cols: []column{
		{"peer", datatype.Inet}, {"peer_port", datatype.Int}, {"data_center", text},
		{"host_id", datatype.Uuid}, {"native_address", datatype.Inet}, {"native_port", datatype.Int},
		{"preferred_ip", datatype.Inet}, {"preferred_port", datatype.Int}, {"rack", text},
		{"release_version", text}, {"schema_version", datatype.Uuid}, {"tokens", textSet},
	}}
	for _, p := range opts.Peers {
		// Peers are taken to listen on the node's port.
		ip := net.ParseIP(p).To4()
		peers.rows = append(peers.rows, message.Row{ip, s("dc1"), hostID(ip), ip, s("rack1"), s("5.0.0"),
			ip, schemaVer, encodeTextCollection(token(ip))})
		peersV2.rows = append(peersV2.rows, message.Row{ip, binary.BigEndian.AppendUint32(nil, 7000), s("dc1"),
			hostID(ip), ip, rpcPort, ip, binary.BigEndian.AppendUint32(nil, 7000), s("rack1"), s("5.0.0"),
			schemaVer, encodeTextCollection(token(ip))})
	}
	keyspace, name := opts.Keyspace, opts.Table
	keyspaces := &table{keyspace: "system_schema", name: "keyspaces", cols: []column{
		{"keyspace_name", text}, {"durable_writes", datatype.Boolean}, {"replication", textMap},
	}, rows: []message.Row{{s(keyspace), []byte{1}, encodeTextMap(
		"class", "org.apache.cassandra.locator.SimpleStrategy", "replication_factor", "1")}}}
	tables := &table{keyspace: "system_schema", name: "tables", cols: []column{
		{"keyspace_name", text}, {"table_name", text}, {"flags", textSet}, {"extensions", blobMap},
	}, rows: []message.Row{{s(keyspace), s(name), encodeTextCollection(), encodeTextMap()}}}
	columns := &table{keyspace: "system_schema", name: "columns", cols: []column{
		{"keyspace_name", text}, {"table_name", text}, {"column_name", text}, {"clustering_order", text},
		{"column_name_bytes", datatype.Blob}, {"kind", text}, {"position", datatype.Int}, {"type", text},
	}, rows: []message.Row{
		{s(keyspace), s(name), s("k"), s("none"), s("k"), s("partition_key"), binary.BigEndian.AppendUint32(nil, 0), s("bigint")},
		{s(keyspace), s(name), s("v"), s("none"), s("v"), s("regular"), binary.BigEndian.AppendUint32(nil, ^uint32(0)), s("blob")},
	}}
	types := &table{keyspace: "system_schema", name: "types", cols: []column{
		{"keyspace_name", text}, {"type_name", text}, {"field_names", textList}, {"field_types", textList},
	}}
	m := map[string]*table{}
	all := []*table{local, peers, keyspaces, tables, columns, types}
	if opts.PeersV2 {
		all = append(all, peersV2)
	}
	for _, t := range all {
		m[t.keyspace+"."+t.name] = t
	}
	return m
}

// hostID is a node's host id, derived from its address so that a peer's
// row and the peer's own system.local agree.
func hostID(ip net.IP) []byte {
	sum := md5.Sum([]byte("fakenode " + ip.String()))
	return sum[:]
}

// token gives each node of a test's cluster, on 127.0.0.x, a distinct
// token.
func token(ip net.IP) string {
	return [...]string{"-6000000000000000000", "-3000000000000000000", "0", "3000000000000000000"}[ip[len(ip)-1]%4]
}

// encodeTextCollection encodes a list or set of text values.
func encodeTextCollection(vs ...string) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(vs)))
	for _, v := range vs {
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	return b
}

// encodeTextMap encodes a map from text to text (or blob) values, given
// as key, value pairs.
func encodeTextMap(kvs ...string) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(kvs)/2))
	for _, v := range kvs {
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	return b
}
