package frame

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"

	"github.com/datastax/go-cassandra-native-protocol/message"
	"github.com/datastax/go-cassandra-native-protocol/primitive"
)

func TestStartupOracle(t *testing.T) {
	opts := map[string]string{"CQL_VERSION": "3.0.0", "COMPRESSION": "lz4", "SCYLLA_RATE_LIMIT_ERROR": "", "DRIVER_NAME": "x"}
	tests := []struct {
		key       string
		value     string
		ok        bool
		wantAfter map[string]string // options once key is left out
	}{
		{"COMPRESSION", "lz4", true, map[string]string{"CQL_VERSION": "3.0.0", "SCYLLA_RATE_LIMIT_ERROR": "", "DRIVER_NAME": "x"}},
		{"SCYLLA_RATE_LIMIT_ERROR", "", true, map[string]string{"CQL_VERSION": "3.0.0", "COMPRESSION": "lz4", "DRIVER_NAME": "x"}},
		{"NO_SUCH_OPTION", "", false, opts},
	}
	for _, v := range parseVersions {
		raw := oracleEncode(t, primitive.ProtocolVersion(v), &message.Startup{Options: opts}, CompressionNone)
		checkTruncations(t, fmt.Sprintf("v%d STARTUP", v), raw[HeaderSize:], func(b []byte) error { _, _, err := StartupOption(b, "X"); return err })
		for _, tt := range tests {
			value, ok, err := StartupOption(raw[HeaderSize:], tt.key)
			if err != nil || ok != tt.ok || string(value) != tt.value {
				t.Errorf("v%d StartupOption(%s) = %q, %v, %v", v, tt.key, value, ok, err)
			}
			out, err := AppendStartupWithout([]byte("x"), raw, tt.key)
			if err != nil || out[0] != 'x' {
				t.Fatalf("v%d without %s: %v", v, tt.key, err)
			}
			got := oracleDecode(t, out[1:], CompressionNone)
			if m, ok := got.Body.Message.(*message.Startup); !ok || !reflect.DeepEqual(m.Options, tt.wantAfter) || got.Header.StreamId != 42 {
				t.Errorf("v%d without %s: %v", v, tt.key, got.Body.Message)
			}
		}
	}
	// The last of a repeated key counts, as a map keeps it, and every
	// one is left out.
	body := append(wireShort(3), wireString("K")...)
	body = append(append(append(body, wireString("1")...), wireString("J")...), wireString("j")...)
	body = append(append(body, wireString("K")...), wireString("2")...)
	if v, ok, err := StartupOption(body, "K"); string(v) != "2" || !ok || err != nil {
		t.Errorf("repeated key: %q, %v, %v", v, ok, err)
	}
	f := append(AppendHeader(nil, Header{Version: 4, Opcode: OpStartup, Length: len(body)}), body...)
	out, err := AppendStartupWithout(nil, f, "K")
	want := append(AppendHeader(nil, Header{Version: 4, Opcode: OpStartup, Length: 8}), append(append(wireShort(1), wireString("J")...), wireString("j")...)...)
	if err != nil || !bytes.Equal(out, want) {
		t.Errorf("repeated key left out: % x, %v", out, err)
	}
}

func TestSupportedOracle(t *testing.T) {
	upstream := map[string][]string{
		"COMPRESSION": {"lz4", "snappy"}, "CQL_VERSION": {"3.4.7"}, "SCYLLA_SHARD": {"3"},
		"SCYLLA_NR_SHARDS": {"8"}, "SCYLLA_RATE_LIMIT_ERROR": {"ERROR_CODE=1"}, "EMPTY": {},
	}
	drop := func(k []byte) bool { return bytes.HasPrefix(k, []byte("SCYLLA_")) }
	add := []Option{{Key: "SCYLLA_RATE_LIMIT_ERROR", Values: []string{"ERROR_CODE=61440"}}, {Key: "NONE"}}
	want := map[string][]string{"COMPRESSION": {"lz4", "snappy"}, "CQL_VERSION": {"3.4.7"}, "EMPTY": {},
		"SCYLLA_RATE_LIMIT_ERROR": {"ERROR_CODE=61440"}, "NONE": {}}
	for _, v := range parseVersions {
		for _, prefix := range []int{noPrefix, tracedWarnings, tracedPayload} {
			what := fmt.Sprintf("v%d prefix %d", v, prefix)
			in := oracleResponse(t, v, &message.Supported{Options: upstream}, prefix)
			raw := encodeOracle(t, in)
			h, _ := ParseHeader(raw)
			checkTruncations(t, what, raw[HeaderSize:], func(b []byte) error { _, err := SupportedHas(b, h, "X"); return err })
			for key, has := range map[string]bool{"SCYLLA_RATE_LIMIT_ERROR": true, "EMPTY": true, "SCYLLA": false} {
				if got, err := SupportedHas(raw[HeaderSize:], h, key); got != has || err != nil {
					t.Errorf("%s: SupportedHas(%s) = %v, %v", what, key, got, err)
				}
			}
			out, err := AppendSupported(nil, h, raw[HeaderSize:], drop, add...)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			got := oracleDecode(t, out, CompressionNone)
			in.Body.Message = &message.Supported{Options: want}
			if !reflect.DeepEqual(got.Body, in.Body) {
				t.Errorf("%s: %v, want %v", what, got.Body.Message, in.Body.Message)
			}
		}
	}
}

func FuzzOptions(f *testing.F) {
	for _, v := range parseVersions {
		f.Add(oracleBody(f, v, &message.Startup{Options: map[string]string{"CQL_VERSION": "3.0.0", "COMPRESSION": "lz4"}}), uint8(0))
		raw := encodeOracle(f, oracleResponse(f, v, &message.Supported{Options: map[string][]string{"COMPRESSION": {"lz4"}, "K": {}}}, tracedWarnings))
		f.Add(raw[HeaderSize:], raw[1])
	}
	f.Fuzz(func(t *testing.T, body []byte, flags uint8) {
		if _, _, err := StartupOption(body, "K"); err == nil {
			f := append(AppendHeader(nil, Header{Version: 4, Opcode: OpStartup, Length: len(body)}), body...)
			out, err := AppendStartupWithout(nil, f, "K")
			if err != nil {
				t.Fatalf("STARTUP read but not rewritten: %v", err)
			}
			if _, ok, err := StartupOption(out[HeaderSize:], "K"); ok || err != nil {
				t.Fatalf("K left in: %v, %v", ok, err)
			}
		}
		h := Header{Version: 4, Response: true, Flags: flags &^ FlagCompression, Opcode: OpSupported}
		if _, err := SupportedHas(body, h, "K"); err == nil {
			out, err := AppendSupported(nil, h, body, func(k []byte) bool { return string(k) == "K" }, Option{Key: "N", Values: []string{"v"}})
			if err != nil {
				t.Fatalf("SUPPORTED read but not rewritten: %v", err)
			}
			oh, _ := ParseHeader(out)
			if has, err := SupportedHas(out[HeaderSize:], oh, "K"); has || err != nil || oh.Length != len(out)-HeaderSize {
				t.Fatalf("K left in: %v, %v", has, err)
			}
			if has, _ := SupportedHas(out[HeaderSize:], oh, "N"); !has {
				t.Fatal("N not added")
			}
		}
	})
}
