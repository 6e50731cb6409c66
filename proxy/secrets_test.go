package proxy

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/datastax/go-cassandra-native-protocol/message"

	"github.com/cqlguard/cqlguard/frame"
	"github.com/cqlguard/cqlguard/test/fakenode"
)

// TestCredentialsNeverLogged sends a secret every way a client can send one
// (SASL credentials, passwords in role statements, and bodies the proxy
// refuses or cannot decode, whose errors are logged) to a proxy logging at
// every level, and checks that the secret appears in no log line.
func TestCredentialsNeverLogged(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-canary-7f1d"
	var log logLines
	node := fakeNode(t, "127.0.0.1:0", fakenode.Options{})
	bp := startBadInputProxy(t, &log, "127.0.0.1:0", node.Addr(), nil)

	query := func(stream int16, cql string) []byte {
		return msgFrame(t, 4, stream, &message.Query{Query: cql})
	}
	// body is a frame whose body is given as it is.
	body := func(op frame.Opcode, b []byte) []byte { return rawFrame(4, 9, op, len(b), b...) }
	garbage := append([]byte{0, 0, 0, 200}, secret...) // a [long string] longer than the body
	var startupWithSecret []byte                       // a [string map] cut short after the secret
	startupWithSecret = binary.BigEndian.AppendUint16(startupWithSecret, 2)
	startupWithSecret = binary.BigEndian.AppendUint16(startupWithSecret, uint16(len("PASSWORD")))
	startupWithSecret = append(startupWithSecret, "PASSWORD"...)
	startupWithSecret = binary.BigEndian.AppendUint16(startupWithSecret, uint16(len(secret)))
	startupWithSecret = append(startupWithSecret, secret...)

	tests := []struct {
		name    string
		startup bool // complete a v4 STARTUP first
		input   []byte
	}{
		{"SASL PLAIN credentials in AUTH_RESPONSE", true,
			msgFrame(t, 4, 1, &message.AuthResponse{Token: []byte("\x00cqlguard\x00" + secret)})},
		{"CREATE ROLE with a password", true,
			query(2, "CREATE ROLE canary WITH PASSWORD = '"+secret+"' AND LOGIN = true")},
		{"ALTER USER with a password", true,
			query(3, "ALTER USER canary WITH PASSWORD '"+secret+"'")},
		{"PREPARE of a role statement", true,
			msgFrame(t, 4, 4, &message.Prepare{Query: "CREATE ROLE canary WITH PASSWORD = '" + secret + "'"})},
		{"QUERY body that does not decode", true, body(frame.OpQuery, garbage)},
		{"BATCH body that does not decode", true, body(frame.OpBatch, garbage)},
		{"AUTH_RESPONSE body that does not decode", true, body(frame.OpAuthResponse, garbage)},
		{"STARTUP that cannot be parsed", false, body(frame.OpStartup, startupWithSecret)},
		{"frame over max_frame_bytes", true,
			body(frame.OpAuthResponse, bytes.Repeat([]byte(secret), 2048/len(secret)+1))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := uint8(0)
			if tt.startup {
				v = 4
			}
			c := dialBad(t, bp.addr, v, nil)
			defer c.c.Close()
			c.write(tt.input)
			// Whatever the answer, there is one: the proxy has handled
			// the input, and logged what it logs of it, by then.
			if _, err := c.next(); err != nil {
				t.Fatalf("no answer: %v", err)
			}
		})
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if log.b.Len() == 0 {
		t.Fatal("nothing logged: the check below would prove nothing")
	}
	for line := range strings.Lines(log.b.String()) {
		if strings.Contains(line, secret) {
			t.Errorf("the secret was logged: %s", line)
		}
	}
}
