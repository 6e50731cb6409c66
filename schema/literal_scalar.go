package schema

// Numbers, inet addresses and the small helpers of literal parsing (see
// literal.go).

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"unsafe"
)

// putUvarint writes v in Cassandra's unsigned vint encoding: the count of
// extra bytes as leading one bits of the first byte, then big-endian.
func putUvarint(b []byte, v uint64) int {
	extra := 0
	for extra < 8 && v >= 1<<(7*(extra+1)) {
		extra++
	}
	if extra == 8 {
		b[0] = 0xff
		binary.BigEndian.PutUint64(b[1:], v)
		return 9
	}
	for i := extra; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
	b[0] |= ^byte(0xff >> extra)
	return extra + 1
}

// parseInt64 parses -?[0-9]+, reporting false on overflow.
func parseInt64(s []byte) (int64, bool) {
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	if len(s) == 0 {
		return 0, false
	}
	var u uint64
	for _, c := range s {
		if !isDigit(c) {
			return 0, false
		}
		if u > (math.MaxUint64-9)/10 {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
	}
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return -int64(u), true
	}
	if u > math.MaxInt64 {
		return 0, false
	}
	return int64(u), true
}

// appendVarint appends the minimal two's complement big-endian encoding of
// the integer whose decimal digits are digits then more (skipping any '.'),
// negative if neg. It works in dst's spare capacity, allocating nothing
// once dst has room.
func appendVarint(dst []byte, neg bool, digits, more []byte) []byte {
	for len(digits) > 0 && (digits[0] == '0' || digits[0] == '.') {
		digits = digits[1:]
	}
	if len(digits) == 0 {
		for len(more) > 0 && (more[0] == '0' || more[0] == '.') {
			more = more[1:]
		}
		digits, more = more, nil
	}
	n := len(digits) + len(more)
	if n == 0 {
		return append(dst, 0)
	}
	if n <= 18 {
		var u uint64
		for _, part := range [2][]byte{digits, more} {
			for _, c := range part {
				if c != '.' {
					u = u*10 + uint64(c-'0')
				}
			}
		}
		v := int64(u)
		if neg {
			v = -v
		}
		return appendMinimalInt64(dst, v)
	}
	// Schoolbook: w = w*10^9 + chunk, over a big-endian buffer in dst
	// sized for n digits (log2(10)/8 < 0.4153 bytes a digit) and a sign.
	size := n*4153/10000 + 2
	start := len(dst)
	dst = slices.Grow(dst, size)[:start+size]
	w := dst[start:]
	clear(w)
	var chunk uint64
	var k int
	flush := func() {
		mul := uint64(1)
		for range k {
			mul *= 10
		}
		carry := chunk
		for i := len(w) - 1; i >= 0; i-- {
			x := uint64(w[i])*mul + carry
			w[i] = byte(x)
			carry = x >> 8
		}
		chunk, k = 0, 0
	}
	for _, part := range [2][]byte{digits, more} {
		for _, c := range part {
			if c == '.' {
				continue
			}
			chunk = chunk*10 + uint64(c-'0')
			if k++; k == 9 {
				flush()
			}
		}
	}
	if k > 0 {
		flush()
	}
	if neg {
		carry := uint16(1)
		for i := len(w) - 1; i >= 0; i-- {
			x := uint16(^w[i]) + carry
			w[i] = byte(x)
			carry = x >> 8
		}
	}
	// Drop sign-extension bytes that the next byte's top bit repeats.
	i := 0
	for i < len(w)-1 && (w[i] == 0 && w[i+1]&0x80 == 0 || w[i] == 0xff && w[i+1]&0x80 != 0) {
		i++
	}
	copy(w, w[i:])
	return dst[:len(dst)-i]
}

// appendMinimalInt64 appends v as the shortest big-endian two's complement.
func appendMinimalInt64(dst []byte, v int64) []byte {
	n := 8
	for n > 1 {
		top := byte(v >> (8 * (n - 1)))
		next := byte(v >> (8 * (n - 2)))
		if top == 0 && next&0x80 == 0 || top == 0xff && next&0x80 != 0 {
			n--
			continue
		}
		break
	}
	return appendBigEndian(dst, uint64(v), n)
}

// appendDecimal appends a decimal as Java's BigDecimal(String) reads it: a
// 4-byte scale, then the unscaled value as a varint. 1.50 keeps its scale
// 2; 1e3 is 1 with scale -3.
func appendDecimal(dst []byte, s []byte) ([]byte, error) {
	neg := s[0] == '-'
	m := s
	if neg {
		m = m[1:]
	}
	var exp int64
	if e := bytes.IndexAny(m, "eE"); e >= 0 {
		es := m[e+1:]
		m = m[:e]
		if len(es) > 0 && es[0] == '+' {
			es = es[1:]
		}
		v, ok := parseInt64(es)
		if !ok || v > math.MaxInt32*2 || v < math.MinInt32*2 {
			return dst, fmt.Errorf("exponent of %s out of range", s)
		}
		exp = v
	}
	intPart, frac := m, []byte(nil)
	if dot := bytes.IndexByte(m, '.'); dot >= 0 {
		intPart, frac = m[:dot], m[dot+1:]
	}
	scale := int64(len(frac)) - exp
	if scale < math.MinInt32 || scale > math.MaxInt32 {
		return dst, fmt.Errorf("scale of %s out of range", s)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(int32(scale)))
	return appendVarint(dst, neg, intPart, frac), nil
}

// appendInet appends an IP address the way Java's InetAddress.getByName
// reads a literal: IPv4 in one to four parts, IPv6 (bracketed or not),
// IPv4-mapped IPv6 as IPv4. The empty string is Cassandra's empty value.
func appendInet(dst []byte, s []byte) ([]byte, error) {
	if len(s) == 0 {
		return dst, nil
	}
	if s[0] == '[' {
		if s[len(s)-1] != ']' {
			return dst, fmt.Errorf("bad inet address %q", s)
		}
		s = s[1 : len(s)-1]
		if bytes.IndexByte(s, ':') < 0 {
			return dst, fmt.Errorf("bad inet address %q", s)
		}
	}
	if bytes.IndexByte(s, ':') >= 0 {
		if bytes.IndexByte(s, '%') >= 0 {
			return dst, fmt.Errorf("inet address %q has a zone: %w", s, errNotDeterministic)
		}
		a, err := netip.ParseAddr(unsafeString(s))
		if err != nil {
			return dst, fmt.Errorf("bad inet address %q", s)
		}
		if a.Is4In6() {
			v4 := a.Unmap().As4()
			return append(dst, v4[:]...), nil
		}
		v6 := a.As16()
		return append(dst, v6[:]...), nil
	}
	return appendIPv4(dst, s)
}

// appendIPv4 appends an IPv4 literal of one to four decimal parts, the
// last filling the remaining bytes (127.1 is 127.0.0.1), as Java reads it:
// leading zeros are decimal (010.0.0.1 is 10.0.0.1), and text longer than
// 15 bytes is no literal but a host name.
func appendIPv4(dst []byte, s []byte) ([]byte, error) {
	if len(s) > 15 {
		return dst, fmt.Errorf("bad inet address %q (host names are not supported)", s)
	}
	var parts [4]uint64
	n := 0
	for i := 0; i <= len(s); {
		j := i
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		if j == i || n == 4 {
			return dst, fmt.Errorf("bad inet address %q (host names are not supported)", s)
		}
		var v uint64
		for _, c := range s[i:j] {
			v = v*10 + uint64(c-'0')
		}
		parts[n] = v
		n++
		if j == len(s) {
			break
		}
		if s[j] != '.' {
			return dst, fmt.Errorf("bad inet address %q (host names are not supported)", s)
		}
		i = j + 1
		if i == len(s) {
			return dst, fmt.Errorf("bad inet address %q", s)
		}
	}
	var addr uint64
	for i := 0; i < n-1; i++ {
		if parts[i] > 0xff {
			return dst, fmt.Errorf("bad inet address %q", s)
		}
		addr |= parts[i] << (8 * (3 - i))
	}
	if parts[n-1] >= 1<<(8*(5-n)) {
		return dst, fmt.Errorf("bad inet address %q", s)
	}
	addr |= parts[n-1]
	return binary.BigEndian.AppendUint32(dst, uint32(addr)), nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func unhex(c byte) byte {
	if isDigit(c) {
		return c - '0'
	}
	return c | 0x20 - 'a' + 10
}

// equalFold reports whether s is w (lower case) in any ASCII case.
func equalFold(s []byte, w string) bool {
	if len(s) != len(w) {
		return false
	}
	for i := range len(w) {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != w[i] {
			return false
		}
	}
	return true
}

// unsafeString views b as a string for parsers that do not keep it.
func unsafeString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
