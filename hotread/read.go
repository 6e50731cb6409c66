package hotread

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
)

// Read identifies a read request: every field that can change the bytes or
// the meaning of its answer, except its stream id. Table and Token name the
// one partition it reads, for invalidation.
//
// Two reads are identical when all their fields are equal, Keyspace and Body
// byte for byte; a nil and an empty Keyspace (or Body) are equal. Table and
// Token are part of the identity too: the same request reads the same
// partition, so this never keeps apart reads that the rest would join, and
// it keeps an answer filed under the partition whose writes invalidate it
// even when the proxy's view of the schema changes.
type Read struct {
	Version     uint8 // protocol version
	Flags       uint8 // the request header's flags
	Opcode      uint8 // the request's opcode
	Compression uint8 // the connection's compression (answers are stored as sent)
	// Options is a digest of what else the connection negotiated that can
	// change its answers (STARTUP options such as ScyllaDB's rate-limit
	// error or THROW_ON_OVERLOAD), as the caller computes it; 0 for none.
	Options   uint64
	Principal uint64 // digest of who the connection authenticated as; 0 for none
	Keyspace  []byte // the connection's keyspace (USE), may be empty
	Body      []byte // the request body, decompressed
	Table     uint32 // partition: the table's label
	Token     int64  // partition: its token
}

// headerLen is the size of a read's fixed fields as hashed: version, flags,
// opcode, compression, options, principal, table, token and the keyspace's
// length, which keeps a keyspace's last bytes from passing for the body's
// first.
const headerLen = 4 + 8 + 8 + 4 + 8 + 4

// hash returns r's identity hashed with seed. Equal reads hash equal; a
// client that does not know seed cannot choose reads that collide.
func (r *Read) hash(seed maphash.Seed) uint64 {
	var hdr [headerLen]byte
	hdr[0], hdr[1], hdr[2], hdr[3] = r.Version, r.Flags, r.Opcode, r.Compression
	binary.LittleEndian.PutUint64(hdr[4:], r.Options)
	binary.LittleEndian.PutUint64(hdr[12:], r.Principal)
	binary.LittleEndian.PutUint32(hdr[20:], r.Table)
	binary.LittleEndian.PutUint64(hdr[24:], uint64(r.Token))
	binary.LittleEndian.PutUint32(hdr[32:], uint32(len(r.Keyspace)))
	var h maphash.Hash
	h.SetSeed(seed)
	h.Write(hdr[:])
	h.Write(r.Keyspace)
	h.Write(r.Body)
	return h.Sum64()
}

// identical reports whether a and b are the same read.
func identical(a, b *Read) bool {
	return a.Version == b.Version && a.Flags == b.Flags && a.Opcode == b.Opcode &&
		a.Compression == b.Compression && a.Options == b.Options && a.Principal == b.Principal &&
		a.Table == b.Table && a.Token == b.Token &&
		bytes.Equal(a.Keyspace, b.Keyspace) && bytes.Equal(a.Body, b.Body)
}

// identityLen is how many bytes of r a copy holds: its keyspace and body.
func (r *Read) identityLen() int { return len(r.Keyspace) + len(r.Body) }

// copyInto makes dst a copy of r whose Keyspace and Body live at the start
// of buf, which must hold r.identityLen() bytes, and returns the rest of buf.
func (r *Read) copyInto(dst *Read, buf []byte) []byte {
	*dst = *r
	k := copy(buf, r.Keyspace)
	b := copy(buf[k:], r.Body)
	dst.Keyspace = buf[:k:k]
	dst.Body = buf[k : k+b : k+b]
	return buf[k+b:]
}
