package schema

// Cassandra's Murmur3Partitioner: the token of a partition key is the first
// 64 bits of MurmurHash3_x64_128 (seed 0) of the serialized key, as a signed
// integer.
//
// Supported: exactly Cassandra's variant of the hash, including its quirk
// that the tail bytes (the last len%16) are sign-extended before they are
// shifted into place, because Java bytes are signed; and the partitioner's
// remapping of Long.MIN_VALUE, which it reserves as the minimum token, to
// Long.MAX_VALUE.
//
// Not supported: the other partitioners (RandomPartitioner,
// ByteOrderedPartitioner) and ScyllaDB's tablets, which change the
// token-to-node mapping but not the token.

import (
	"encoding/binary"
	"math"
	"math/bits"
)

const (
	murmurC1 = 0x87c37b91114253d5
	murmurC2 = 0x4cf5ad432745937f
)

// Token returns the Murmur3Partitioner token of a serialized partition key:
// a column's value bytes for a one-column key, or KeyBuilder's encoding for
// a composite one.
func Token(key []byte) int64 {
	var h1, h2 uint64
	n := len(key)
	b := key
	for len(b) >= 16 {
		k1 := binary.LittleEndian.Uint64(b)
		k2 := binary.LittleEndian.Uint64(b[8:])
		b = b[16:]

		k1 *= murmurC1
		k1 = bits.RotateLeft64(k1, 31)
		k1 *= murmurC2
		h1 ^= k1
		h1 = bits.RotateLeft64(h1, 27)
		h1 += h2
		h1 = h1*5 + 0x52dce729

		k2 *= murmurC2
		k2 = bits.RotateLeft64(k2, 33)
		k2 *= murmurC1
		h2 ^= k2
		h2 = bits.RotateLeft64(h2, 31)
		h2 += h1
		h2 = h2*5 + 0x38495ab5
	}

	// The tail: Cassandra widens each byte as a signed value and XORs it
	// in, so a byte >= 0x80 also flips every bit above its own. This is
	// where Cassandra's hash differs from the reference MurmurHash3.
	var k1, k2 uint64
	switch len(b) {
	case 15:
		k2 ^= sext(b[14]) << 48
		fallthrough
	case 14:
		k2 ^= sext(b[13]) << 40
		fallthrough
	case 13:
		k2 ^= sext(b[12]) << 32
		fallthrough
	case 12:
		k2 ^= sext(b[11]) << 24
		fallthrough
	case 11:
		k2 ^= sext(b[10]) << 16
		fallthrough
	case 10:
		k2 ^= sext(b[9]) << 8
		fallthrough
	case 9:
		k2 ^= sext(b[8])
		k2 *= murmurC2
		k2 = bits.RotateLeft64(k2, 33)
		k2 *= murmurC1
		h2 ^= k2
		fallthrough
	case 8:
		k1 ^= sext(b[7]) << 56
		fallthrough
	case 7:
		k1 ^= sext(b[6]) << 48
		fallthrough
	case 6:
		k1 ^= sext(b[5]) << 40
		fallthrough
	case 5:
		k1 ^= sext(b[4]) << 32
		fallthrough
	case 4:
		k1 ^= sext(b[3]) << 24
		fallthrough
	case 3:
		k1 ^= sext(b[2]) << 16
		fallthrough
	case 2:
		k1 ^= sext(b[1]) << 8
		fallthrough
	case 1:
		k1 ^= sext(b[0])
		k1 *= murmurC1
		k1 = bits.RotateLeft64(k1, 31)
		k1 *= murmurC2
		h1 ^= k1
	}

	h1 ^= uint64(n)
	h2 ^= uint64(n)
	h1 += h2
	h2 += h1
	h1 = fmix64(h1)
	h2 = fmix64(h2)
	h1 += h2

	t := int64(h1)
	if t == math.MinInt64 {
		// Long.MIN_VALUE is the partitioner's minimum token, which no key
		// may have.
		return math.MaxInt64
	}
	return t
}

// sext widens b the way Java widens a byte: as a signed value.
func sext(b byte) uint64 { return uint64(int64(int8(b))) }

func fmix64(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}

// KeyBuilder assembles a serialized partition key from its components'
// value bytes, reusing its buffer. The zero value is an empty key.
//
// A key of one component is that component's bytes. A key of several is
// Cassandra's composite encoding: for each component a 2-byte big-endian
// length, the bytes and a 0x00 byte. Cassandra refuses components longer
// than 65535 bytes; KeyBuilder truncates their length field, so their
// token matches nothing Cassandra stores.
type KeyBuilder struct {
	buf []byte // always the composite encoding
	n   int    // components added
}

// Reset empties the key, keeping the buffer.
func (k *KeyBuilder) Reset() {
	k.buf = k.buf[:0]
	k.n = 0
}

// Add appends a component, the value bytes of one partition key column.
func (k *KeyBuilder) Add(component []byte) {
	k.buf = binary.BigEndian.AppendUint16(k.buf, uint16(len(component)))
	k.buf = append(k.buf, component...)
	k.buf = append(k.buf, 0)
	k.n++
}

// Len returns how many components the key has.
func (k *KeyBuilder) Len() int { return k.n }

// Bytes returns the serialized key. It aliases the builder's buffer and is
// valid until the next Reset or Add.
func (k *KeyBuilder) Bytes() []byte {
	if k.n == 1 {
		// The composite encoding is kept so that a second Add needs no
		// rewrite; one component is its bare bytes.
		return k.buf[2 : len(k.buf)-1]
	}
	return k.buf
}

// Token returns the key's Murmur3Partitioner token.
func (k *KeyBuilder) Token() int64 { return Token(k.Bytes()) }
