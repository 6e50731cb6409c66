package frame

// Readers and writers of the options of STARTUP (a [string map]) and of
// SUPPORTED (a [string multimap]), native_protocol_v{3,4,5}.spec sections
// 4.1.1 and 4.2.4.
//
// Supported: protocol versions 3 to 5, keys and values of any bytes. The
// rewritten frames keep the entries they keep in the order the peer sent
// them, and leave out bytes after the map, which no version defines.

import (
	"encoding/binary"
	"fmt"
)

// Option is one SUPPORTED option: a key and its values.
type Option struct {
	Key    string
	Values []string
}

// StartupOption returns the value of option key in the STARTUP body: the
// last one when the driver sent the key more than once, as a map would
// keep it. ok is false when the body has no such key.
func StartupOption(body []byte, key string) (value []byte, ok bool, err error) {
	err = eachStringMap(body, func(k, v []byte, _, _ int) {
		if string(k) == key {
			value, ok = v, true
		}
	})
	if err != nil {
		return nil, false, err
	}
	return value, ok, nil
}

// EachStartupOption calls fn with each option of the STARTUP body, in the
// order the driver sent them, once the body is known to hold them all.
func EachStartupOption(body []byte, fn func(key, value []byte)) error {
	return eachStringMap(body, func(k, v []byte, _, _ int) { fn(k, v) })
}

// AppendStartupWithout appends the STARTUP frame f (uncompressed, as
// STARTUP always is) without option key.
func AppendStartupWithout(dst, f []byte, key string) ([]byte, error) {
	if len(f) < HeaderSize {
		return dst, ErrShortBody
	}
	body := f[HeaderSize:]
	var n int
	if err := eachStringMap(body, func(k, _ []byte, _, _ int) {
		if string(k) != key {
			n++
		}
	}); err != nil {
		return dst, err
	}
	start := len(dst)
	dst = append(dst, f[:HeaderSize]...)
	dst = binary.BigEndian.AppendUint16(dst, uint16(n))
	eachStringMap(body, func(k, _ []byte, from, to int) {
		if string(k) != key {
			dst = append(dst, body[from:to]...)
		}
	})
	SetLength(dst[start:])
	return dst, nil
}

// eachStringMap calls fn with every entry of the [string map] at the
// start of b, and where in b the entry starts and ends, once b is known
// to hold the whole map.
func eachStringMap(b []byte, fn func(k, v []byte, from, to int)) error {
	for pass := range 2 {
		c := bodyCursor{b: b}
		n, err := c.u16()
		if err != nil {
			return fmt.Errorf("frame: string map: %w", err)
		}
		for i := range int(n) {
			from := c.off
			k, err := c.string()
			if err != nil {
				return fmt.Errorf("frame: string map key %d: %w", i, err)
			}
			v, err := c.string()
			if err != nil {
				return fmt.Errorf("frame: string map value %d: %w", i, err)
			}
			if pass == 1 {
				fn(k, v, from, c.off)
			}
		}
	}
	return nil
}

// SupportedHas reports whether the SUPPORTED body of a frame with header
// h offers option key.
func SupportedHas(body []byte, h Header, key string) (bool, error) {
	var has bool
	err := eachMultimap(body, h, func(k []byte, _, _ int) {
		has = has || string(k) == key
	})
	return has, err
}

// AppendSupported appends a SUPPORTED frame of header h and uncompressed
// body (the upstream's) that offers the options of body but those drop
// reports true for, then add. The frame is uncompressed.
func AppendSupported(dst []byte, h Header, body []byte, drop func(key []byte) bool, add ...Option) ([]byte, error) {
	msg, ok := ResponseMessage(body, h)
	if !ok {
		return dst, fmt.Errorf("frame: SUPPORTED prefix: %w", ErrShortBody)
	}
	n := len(add)
	if err := eachMultimap(body, h, func(k []byte, _, _ int) {
		if !drop(k) {
			n++
		}
	}); err != nil {
		return dst, err
	}
	start := len(dst)
	h.Flags &^= FlagCompression
	dst = AppendHeader(dst, h)
	dst = append(dst, body[:len(body)-len(msg)]...)
	dst = binary.BigEndian.AppendUint16(dst, uint16(n))
	eachMultimap(body, h, func(k []byte, from, to int) {
		if !drop(k) {
			dst = append(dst, msg[from:to]...)
		}
	})
	for _, o := range add {
		dst = appendString(dst, o.Key)
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(o.Values)))
		for _, v := range o.Values {
			dst = appendString(dst, v)
		}
	}
	SetLength(dst[start:])
	return dst, nil
}

// eachMultimap calls fn with the key of every entry of the [string
// multimap] message of body, and where in the message the entry starts
// and ends, once the message is known to hold the whole map.
func eachMultimap(body []byte, h Header, fn func(k []byte, from, to int)) error {
	msg, ok := ResponseMessage(body, h)
	if !ok {
		return fmt.Errorf("frame: SUPPORTED prefix: %w", ErrShortBody)
	}
	for pass := range 2 {
		c := bodyCursor{b: msg}
		n, err := c.u16()
		if err != nil {
			return fmt.Errorf("frame: string multimap: %w", err)
		}
		for i := range int(n) {
			from := c.off
			k, err := c.string()
			if err != nil {
				return fmt.Errorf("frame: string multimap key %d: %w", i, err)
			}
			m, err := c.u16()
			if err != nil {
				return fmt.Errorf("frame: string multimap values %d: %w", i, err)
			}
			for j := range int(m) {
				if _, err := c.string(); err != nil {
					return fmt.Errorf("frame: string multimap value %d of %d: %w", j, i, err)
				}
			}
			if pass == 1 {
				fn(k, from, c.off)
			}
		}
	}
	return nil
}

func appendString(dst []byte, s string) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(s)))
	return append(dst, s...)
}
