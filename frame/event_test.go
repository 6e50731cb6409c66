package frame

import (
	"errors"
	"fmt"
	"net"
	"reflect"
	"testing"

	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"
)

func oracleEvents(v uint8) []message.Message {
	events := []message.Message{
		&message.TopologyChangeEvent{ChangeType: primitive.TopologyChangeTypeNewNode, Address: &primitive.Inet{Addr: []byte{127, 0, 0, 3}, Port: 9042}},
		&message.StatusChangeEvent{ChangeType: primitive.StatusChangeTypeDown, Address: &primitive.Inet{Addr: []byte{0x20, 1, 0xd, 0xb8, 15: 1}, Port: 19042}},
		&message.SchemaChangeEvent{ChangeType: primitive.SchemaChangeTypeCreated, Target: primitive.SchemaChangeTargetKeyspace, Keyspace: "ks"},
		&message.SchemaChangeEvent{ChangeType: primitive.SchemaChangeTypeUpdated, Target: primitive.SchemaChangeTargetTable, Keyspace: "ks", Object: "t"},
		&message.SchemaChangeEvent{ChangeType: primitive.SchemaChangeTypeDropped, Target: primitive.SchemaChangeTargetType, Keyspace: "ks", Object: "udt"},
	}
	if v >= 4 {
		events = append(events,
			&message.SchemaChangeEvent{ChangeType: primitive.SchemaChangeTypeCreated, Target: primitive.SchemaChangeTargetFunction, Keyspace: "ks", Object: "f", Arguments: []string{"int", "text"}},
			&message.SchemaChangeEvent{ChangeType: primitive.SchemaChangeTypeDropped, Target: primitive.SchemaChangeTargetAggregate, Keyspace: "ks", Object: "a", Arguments: []string{}})
	}
	return events
}

func TestEventOracle(t *testing.T) {
	for _, v := range parseVersions {
		for _, msg := range oracleEvents(v) {
			what := fmt.Sprintf("v%d %v", v, msg)
			raw := oracleEncode(t, primitive.ProtocolVersion(v), msg, CompressionNone)
			h, _ := ParseHeader(raw)
			e, err := ParseEvent(raw[HeaderSize:], h)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			checkTruncations(t, what, raw[HeaderSize:], func(b []byte) error { _, err := ParseEvent(b, h); return err })
			var addr **primitive.Inet
			switch m := msg.(type) {
			case *message.TopologyChangeEvent:
				addr = &m.Address
				if string(e.Type) != EventTopologyChange || string(e.Change) != string(m.ChangeType) {
					t.Fatalf("%s: %q %q", what, e.Type, e.Change)
				}
			case *message.StatusChangeEvent:
				addr = &m.Address
				if string(e.Type) != EventStatusChange || string(e.Change) != string(m.ChangeType) {
					t.Fatalf("%s: %q %q", what, e.Type, e.Change)
				}
			case *message.SchemaChangeEvent:
				if string(e.Type) != EventSchemaChange || string(e.Change) != string(m.ChangeType) || e.Addr != nil || string(e.Target) != string(m.Target) {
					t.Fatalf("%s: %q %q %v %q", what, e.Type, e.Change, e.Addr, e.Target)
				}
				continue
			}
			if !(*addr).Addr.Equal(e.Addr) || e.Port != (*addr).Port {
				t.Fatalf("%s: address %v:%d", what, e.Addr, e.Port)
			}
			// Moved to another node, the event decodes as the oracle's
			// with that node's address.
			for _, to := range [][]byte{{10, 1, 2, 3}, {0xfe, 0x80, 15: 7}} {
				out := e.AppendMoved([]byte("x"), to, 9142)
				*addr = &primitive.Inet{Addr: net.IP(to).To16(), Port: 9142} // as the oracle reads any address
				got := oracleDecode(t, out[1:], CompressionNone)
				if !reflect.DeepEqual(got.Body.Message, msg) || got.Header.StreamId != -1 || out[0] != 'x' {
					t.Errorf("%s: moved to %v: %v", what, to, got.Body.Message)
				}
			}
		}
	}
}

func TestEventRefused(t *testing.T) {
	h := Header{Version: 4, Response: true, Stream: -1, Opcode: OpEvent}
	str := func(ss ...string) []byte {
		var b []byte
		for _, s := range ss {
			b = append(b, wireString(s)...)
		}
		return b
	}
	tests := []struct {
		name string
		v    uint8
		body []byte
	}{
		{"unknown type", 4, str("NEW_EVENT", "X")},
		{"address of 5 bytes", 4, append(str("STATUS_CHANGE", "UP"), 5, 1, 2, 3, 4, 5, 0, 0, 0, 1)},
		{"unknown target", 4, str("SCHEMA_CHANGE", "CREATED", "VIEW", "ks", "v")},
		{"function in v3", 3, append(str("SCHEMA_CHANGE", "CREATED", "FUNCTION", "ks", "f"), 0, 0)},
	}
	for _, tt := range tests {
		h.Version = tt.v
		if _, err := ParseEvent(tt.body, h); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}

func FuzzParseEvent(f *testing.F) {
	for _, v := range parseVersions {
		for _, msg := range oracleEvents(v) {
			raw := encodeOracle(f, oracleResponse(f, v, msg, noPrefix))
			f.Add(raw[HeaderSize:], v)
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, v uint8) {
		h := Header{Version: 3 + v%3, Response: true, Stream: -1, Opcode: OpEvent}
		e, err := ParseEvent(body, h)
		if err != nil || e.Addr == nil {
			return
		}
		// A moved event reads back as moved, of the same type and change.
		out := e.AppendMoved(nil, []byte{1, 2, 3, 4}, 7)
		oh, err := ParseHeader(out)
		if err != nil || oh.Length != len(out)-HeaderSize {
			t.Fatalf("header %+v, %v", oh, err)
		}
		m, err := ParseEvent(out[HeaderSize:], oh)
		if err != nil || string(m.Type) != string(e.Type) || string(m.Change) != string(e.Change) || string(m.Addr) != "\x01\x02\x03\x04" || m.Port != 7 {
			t.Fatalf("moved event reads back as %+v, %v", m, err)
		}
	})
}

// The requests a connection of the proxy's own sends to follow events
// decode there as they say.
func TestEventRequestsOracle(t *testing.T) {
	for _, v := range parseVersions {
		for _, tc := range []struct {
			f    []byte
			want message.Message
		}{
			{AppendStartupRequest(nil, v, 1), &message.Startup{Options: map[string]string{"CQL_VERSION": "3.0.0"}}},
			{AppendAuthResponse(nil, v, 2, []byte("\x00user\x00secret")), &message.AuthResponse{Token: []byte("\x00user\x00secret")}},
			{AppendRegisterRequest(nil, v, 3, EventTopologyChange, EventStatusChange, EventSchemaChange), &message.Register{EventTypes: []primitive.EventType{
				primitive.EventTypeTopologyChange, primitive.EventTypeStatusChange, primitive.EventTypeSchemaChange}}},
		} {
			got := oracleDecode(t, tc.f, CompressionNone).Body.Message
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("v%d: decoded %#v, want %#v", v, got, tc.want)
			}
		}
	}
}
