package frame

import "encoding/binary"

// AppendVersionError appends the ERROR frame Cassandra answers a frame of
// protocol version e.Version with, in a header the driver can read: the
// 8-byte layout of protocol v1 and v2 for those versions (stream 0), a v4
// header for any other, so that the driver retries with a lower version.
func AppendVersionError(dst []byte, e *UnsupportedVersionError) []byte {
	if e.Version < 1 || e.Version >= 3 {
		return AppendError(dst, 4, 0, ErrCodeProtocol, e.Error())
	}
	msg := e.Error()
	start := len(dst)
	dst = append(dst, e.Version|responseBit, 0, 0, byte(OpError), 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(ErrCodeProtocol))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(msg)))
	dst = append(dst, msg...)
	binary.BigEndian.PutUint32(dst[start+4:], uint32(len(dst)-start-8))
	return dst
}
