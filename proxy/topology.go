package proxy

// Drivers learn the cluster from system.local, system.peers and
// system.peers_v2 and from topology and status events, then dial the nodes
// they learned of. To keep all traffic on the proxy, the proxy rewrites what
// those queries and events say: in cluster mode it is the only node, in node
// mode each peer is the proxy in front of it. It also edits SUPPORTED and
// STARTUP so that drivers neither see upstream-only options nor ask the
// upstream for options it lacks. None of this is on the per-request path:
// it runs for topology queries, the handshake and events only, so it uses
// go-cassandra-native-protocol's codecs rather than hand-written ones.

import (
	"bytes"
	"crypto/md5"
	"encoding/binary"
	"fmt"
	"net"
	"strconv"

	"github.com/datastax/go-cassandra-native-protocol/compression/lz4"
	"github.com/datastax/go-cassandra-native-protocol/compression/snappy"
	pframe "github.com/datastax/go-cassandra-native-protocol/frame"
	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/cql"
	"github.com/cqlguard/cqlguard/frame"
)

// rateLimitKey is the SUPPORTED and STARTUP key of ScyllaDB's rate-limit error.
const rateLimitKey = "SCYLLA_RATE_LIMIT_ERROR"

// strippedSupported are SUPPORTED keys that reveal upstream topology or
// change frame layouts the proxy does not parse (FACTS.md section 3).
var strippedSupported = []string{
	"SCYLLA_SHARD", "SCYLLA_NR_SHARDS", "SCYLLA_PARTITIONER", "SCYLLA_SHARDING_ALGORITHM",
	"SCYLLA_SHARDING_IGNORE_MSB", "SCYLLA_SHARD_AWARE_PORT", "SCYLLA_SHARD_AWARE_PORT_SSL",
	"SCYLLA_HOST_ID", "SCYLLA_USE_METADATA_ID", "TABLETS_ROUTING_V1", "TABLETS_ROUTING_V2_EXPERIMENTAL",
}

// wholeRing is the one token of the proxy in cluster mode: a node with a
// single token owns the whole ring.
const wholeRing = "-9223372036854775808"

// topology rewrites what drivers learn of the cluster.
type topology struct {
	mode      string
	advertise net.IP // 4 or 16 bytes, as inet values carry it
	port      int32
	hostID    primitive.UUID          // the proxy's host id in cluster mode
	peers     map[string]*net.TCPAddr // node mode: upstream peer ip -> proxy address
	// onSchemaChange is called for each schema change event passing by.
	onSchemaChange func()

	codecs [3]pframe.Codec // by frame.Compression
}

func newTopology(cfg config.Config) (*topology, error) {
	host, port, err := net.SplitHostPort(cfg.AdvertiseAddr())
	if err != nil {
		return nil, fmt.Errorf("advertise: %w", err)
	}
	ip := net.ParseIP(host)
	if v4 := ip.To4(); v4 != nil {
		ip = v4
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, fmt.Errorf("advertise port: %w", err)
	}
	t := &topology{mode: cfg.Mode, advertise: ip, port: int32(p), peers: map[string]*net.TCPAddr{}}
	// A stable host id, derived from the advertised address, so that a driver
	// reconnecting through another upstream node sees the same host.
	sum := md5.Sum([]byte("cqlguard " + cfg.AdvertiseAddr()))
	sum[6] = sum[6]&0x0f | 0x30
	sum[8] = sum[8]&0x3f | 0x80
	t.hostID = primitive.UUID(sum)
	for peer, addr := range cfg.Peers {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("peers: %q: %w", addr, err)
		}
		if v4 := a.IP.To4(); v4 != nil {
			a.IP = v4
		}
		t.peers[net.ParseIP(peer).String()] = a
	}
	t.codecs[frame.CompressionNone] = pframe.NewCodec()
	t.codecs[frame.CompressionLZ4] = pframe.NewCodecWithCompression(lz4.Compressor{})
	t.codecs[frame.CompressionSnappy] = pframe.NewCodecWithCompression(snappy.Compressor{})
	return t, nil
}

// tableOf says which topology table, if any, the query rec recognised last
// reads.
func tableOf(rec *cql.Recognizer) reply {
	ks, table, ok := rec.From()
	if !ok || string(ks) != "system" {
		return replyForward
	}
	switch string(table) {
	case "local":
		return replyLocal
	case "peers":
		return replyPeers
	case "peers_v2":
		return replyPeersV2
	}
	return replyForward
}

// decode decodes a whole frame with the codec for comp.
func (t *topology) decode(f []byte, comp frame.Compression) (*pframe.Frame, error) {
	return t.codecs[comp].DecodeFrame(bytes.NewReader(f))
}

// encode encodes fr uncompressed: the protocol lets any frame go
// uncompressed, and these frames are small.
func (t *topology) encode(fr *pframe.Frame) ([]byte, error) {
	fr.Header.Flags = fr.Header.Flags.Remove(primitive.HeaderFlagCompressed)
	var b bytes.Buffer
	if err := t.codecs[frame.CompressionNone].EncodeFrame(fr, &b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// supported rewrites a SUPPORTED response: strips upstream-only keys and
// advertises the rate-limit error.
func (t *topology) supported(f []byte, comp frame.Compression) ([]byte, error) {
	fr, err := t.decode(f, comp)
	if err != nil {
		return nil, fmt.Errorf("decoding SUPPORTED: %w", err)
	}
	sup, ok := fr.Body.Message.(*message.Supported)
	if !ok {
		return f, nil
	}
	for _, k := range strippedSupported {
		delete(sup.Options, k)
	}
	sup.Options[rateLimitKey] = []string{"ERROR_CODE=" + strconv.Itoa(int(frame.ErrCodeRateLimit))}
	return t.encode(fr)
}

// startupOptions reads the options of a STARTUP frame.
func startupOptions(f []byte) (map[string]string, error) {
	if len(f) < frame.HeaderSize {
		return nil, frame.ErrShortBody
	}
	return primitive.ReadStringMap(bytes.NewReader(f[frame.HeaderSize:]))
}

// startupWithout re-encodes a STARTUP frame without option key.
func startupWithout(f []byte, opts map[string]string, key string) ([]byte, error) {
	delete(opts, key)
	var b bytes.Buffer
	b.Write(f[:frame.HeaderSize])
	if err := primitive.WriteStringMap(opts, &b); err != nil {
		return nil, err
	}
	out := b.Bytes()
	frame.SetLength(out)
	return out, nil
}

// rows rewrites the rows of a topology query's RESULT. columns stands in
// for metadata the response skipped (an EXECUTE with skip_metadata).
func (t *topology) rows(f []byte, comp frame.Compression, table reply, columns []*message.ColumnMetadata) ([]byte, error) {
	fr, err := t.decode(f, comp)
	if err != nil {
		return nil, fmt.Errorf("decoding topology rows: %w", err)
	}
	rows, ok := fr.Body.Message.(*message.RowsResult)
	if !ok {
		return f, nil // an error, or a prepared result: nothing to rewrite
	}
	if len(rows.Metadata.Columns) > 0 {
		columns = rows.Metadata.Columns
	}
	if len(columns) != int(rows.Metadata.ColumnCount) {
		return nil, fmt.Errorf("topology rows: %d columns, metadata for %d", rows.Metadata.ColumnCount, len(columns))
	}
	col := func(name string) int {
		for i, c := range columns {
			if c.Name == name {
				return i
			}
		}
		return -1
	}
	if table == replyLocal {
		for _, row := range rows.Data {
			t.rewriteLocal(row, col)
		}
	} else {
		kept := rows.Data[:0]
		for _, row := range rows.Data {
			if t.rewritePeer(row, col) {
				kept = append(kept, row)
			}
		}
		rows.Data = kept
	}
	return t.encode(fr)
}

func (t *topology) rewriteLocal(row message.Row, col func(string) int) {
	set := func(name string, v []byte) {
		if i := col(name); i >= 0 && i < len(row) {
			row[i] = v
		}
	}
	addr := []byte(t.advertise)
	for _, name := range []string{"rpc_address", "broadcast_address", "listen_address", "native_address"} {
		set(name, addr)
	}
	port := binary.BigEndian.AppendUint32(nil, uint32(t.port))
	set("rpc_port", port)
	set("native_port", port)
	if t.mode == config.ModeCluster {
		set("host_id", t.hostID[:])
		set("tokens", textSet(wholeRing))
	}
}

// rewritePeer rewrites a peers or peers_v2 row to the proxy in front of that
// peer, reporting false when the driver must not learn of the peer at all.
func (t *topology) rewritePeer(row message.Row, col func(string) int) bool {
	if t.mode == config.ModeCluster {
		return false
	}
	i := col("peer")
	if i < 0 || i >= len(row) {
		return false
	}
	to, ok := t.peers[net.IP(row[i]).String()]
	if !ok {
		return false
	}
	for _, name := range []string{"peer", "rpc_address", "native_address", "preferred_ip"} {
		if j := col(name); j >= 0 && j < len(row) && row[j] != nil {
			row[j] = []byte(to.IP)
		}
	}
	if j := col("native_port"); j >= 0 && j < len(row) {
		row[j] = binary.BigEndian.AppendUint32(nil, uint32(to.Port))
	}
	return true
}

// textSet encodes a set<text> of one element (protocol v3 and later).
func textSet(s string) []byte {
	b := binary.BigEndian.AppendUint32(nil, 1)
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// event filters an EVENT: topology and status changes about nodes the
// driver must not dial are dropped (keep false), or rewritten to the proxy
// in front of that node in node mode.
func (t *topology) event(f []byte, comp frame.Compression) (out []byte, keep bool, err error) {
	fr, err := t.decode(f, comp)
	if err != nil {
		return nil, false, fmt.Errorf("decoding EVENT: %w", err)
	}
	var addr **primitive.Inet
	switch e := fr.Body.Message.(type) {
	case *message.SchemaChangeEvent:
		if t.onSchemaChange != nil {
			t.onSchemaChange()
		}
		return f, true, nil
	case *message.TopologyChangeEvent:
		addr = &e.Address
	case *message.StatusChangeEvent:
		addr = &e.Address
	default:
		return f, true, nil
	}
	if t.mode == config.ModeCluster || *addr == nil {
		return nil, false, nil
	}
	to, ok := t.peers[(*addr).Addr.String()]
	if !ok {
		return nil, false, nil
	}
	*addr = &primitive.Inet{Addr: to.IP, Port: int32(to.Port)}
	out, err = t.encode(fr)
	return out, err == nil, err
}

// preparedColumns returns the result columns of a RESULT Prepared, which
// EXECUTEs that skip metadata will not repeat.
func (t *topology) preparedColumns(f []byte, comp frame.Compression) ([]*message.ColumnMetadata, error) {
	fr, err := t.decode(f, comp)
	if err != nil {
		return nil, fmt.Errorf("decoding PREPARED: %w", err)
	}
	p, ok := fr.Body.Message.(*message.PreparedResult)
	if !ok || p.ResultMetadata == nil {
		return nil, nil
	}
	return p.ResultMetadata.Columns, nil
}
