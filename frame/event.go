package frame

// A reader and rewriter of EVENT bodies (native_protocol_v{3,4,5}.spec,
// section 4.2.6).
//
// Supported: protocol versions 3 to 5; TOPOLOGY_CHANGE and STATUS_CHANGE,
// whose node address can be replaced, and SCHEMA_CHANGE, which is checked
// whole (its target, and the object and arguments the target calls for)
// but never rewritten. Change types are not checked: a new one passes.
//
// Not supported: any other event type, which ParseEvent refuses. Bytes
// after the event are left out of a rewritten frame.

import (
	"encoding/binary"
	"fmt"
)

// Event types.
const (
	EventTopologyChange = "TOPOLOGY_CHANGE"
	EventStatusChange   = "STATUS_CHANGE"
	EventSchemaChange   = "SCHEMA_CHANGE"
)

// Event is what an EVENT body says, as slices into it.
type Event struct {
	Type   []byte // one of the Event constants
	Change []byte // NEW_NODE, UP, CREATED, ...
	// Addr and Port are the node a topology or status change is about;
	// Addr holds 4 or 16 bytes.
	Addr []byte
	Port int32
	// Target is what a schema change changed: KEYSPACE, TABLE, TYPE,
	// FUNCTION or AGGREGATE.
	Target []byte

	h    Header
	body []byte
	inet int // where in body the node's [inet] starts
}

// ParseEvent decodes the uncompressed EVENT body of a frame with header h.
func ParseEvent(body []byte, h Header) (Event, error) {
	msg, ok := ResponseMessage(body, h)
	if !ok {
		return Event{}, fmt.Errorf("frame: EVENT prefix: %w", ErrShortBody)
	}
	e := Event{h: h, body: body}
	c := bodyCursor{b: msg}
	var err error
	if e.Type, err = c.string(); err != nil {
		return Event{}, fmt.Errorf("frame: EVENT type: %w", err)
	}
	if e.Change, err = c.string(); err != nil {
		return Event{}, fmt.Errorf("frame: EVENT change: %w", err)
	}
	switch string(e.Type) {
	case EventTopologyChange, EventStatusChange:
		e.inet = len(body) - len(msg) + c.off
		n, err := c.u8()
		if err != nil {
			return Event{}, fmt.Errorf("frame: EVENT address: %w", err)
		}
		if n != 4 && n != 16 {
			return Event{}, fmt.Errorf("frame: EVENT address of %d bytes: %w", n, ErrMalformed)
		}
		if e.Addr, err = c.take(int(n)); err != nil {
			return Event{}, fmt.Errorf("frame: EVENT address: %w", err)
		}
		port, err := c.u32()
		if err != nil {
			return Event{}, fmt.Errorf("frame: EVENT port: %w", err)
		}
		e.Port = int32(port)
	case EventSchemaChange:
		if e.Target, err = c.schemaChange(h.Version); err != nil {
			return Event{}, fmt.Errorf("frame: EVENT %s: %w", e.Type, err)
		}
	default:
		return Event{}, fmt.Errorf("frame: EVENT type %q: %w", e.Type, ErrMalformed)
	}
	return e, nil
}

// schemaChange reads the target and what it names of a schema change, and
// returns the target.
func (c *bodyCursor) schemaChange(v uint8) ([]byte, error) {
	target, err := c.string()
	if err != nil {
		return nil, fmt.Errorf("target: %w", err)
	}
	if _, err := c.string(); err != nil {
		return nil, fmt.Errorf("keyspace: %w", err)
	}
	switch string(target) {
	case "KEYSPACE":
		return target, nil
	case "TABLE", "TYPE":
		_, err = c.string()
	case "FUNCTION", "AGGREGATE":
		if v < 4 {
			return nil, fmt.Errorf("target %s in v%d: %w", target, v, ErrMalformed)
		}
		if _, err = c.string(); err != nil {
			break
		}
		var n uint16
		if n, err = c.u16(); err != nil {
			break
		}
		for range int(n) {
			if _, err = c.string(); err != nil {
				break
			}
		}
	default:
		return nil, fmt.Errorf("target %q: %w", target, ErrMalformed)
	}
	if err != nil {
		return nil, fmt.Errorf("object: %w", err)
	}
	return target, nil
}

// AppendMoved appends the frame of e, a topology or status change, about
// the node at addr (4 or 16 bytes) and port instead. The frame is
// uncompressed.
func (e *Event) AppendMoved(dst, addr []byte, port int32) []byte {
	start := len(dst)
	h := e.h
	h.Flags &^= FlagCompression
	dst = AppendHeader(dst, h)
	dst = append(dst, e.body[:e.inet]...)
	dst = append(dst, byte(len(addr)))
	dst = append(dst, addr...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(port))
	SetLength(dst[start:])
	return dst
}
