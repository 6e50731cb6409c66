package config

import (
	"runtime"
	"strings"
	"testing"
)

// TestAddresses checks every address the configuration holds, as the
// proxy will listen on it or dial it: each kind of mistake is refused,
// naming the key's line, and the forms that work pass.
func TestAddresses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, text string
		wantErr    string // substring; empty means it loads
	}{
		// listen: port 0 lets the system choose; no host means every address.
		{name: "listen on port 0", text: "listen: 127.0.0.1:0\n"},
		{name: "listen on every address", text: "listen: ':9042'\nadvertise: 10.0.0.5:9042\n"},
		{name: "listen on IPv6", text: "listen: '[::1]:9042'\n"},
		{name: "listen port past 65535", text: "listen: 127.0.0.1:99999\n", wantErr: `cqlguard.yaml:1: listen: "127.0.0.1:99999": port 99999 is outside 0 to 65535`},
		{name: "listen port a name", text: "listen: 127.0.0.1:cql\n", wantErr: `listen: "127.0.0.1:cql": port "cql" is not a number from 0 to 65535`},
		{name: "listen port negative", text: "listen: 127.0.0.1:-1\n", wantErr: `port "-1" is not a number`},
		{name: "listen without a port", text: "listen: 127.0.0.1\n", wantErr: `listen: "127.0.0.1": address 127.0.0.1: missing port in address`},
		{name: "listen with an empty port", text: "listen: '127.0.0.1:'\n", wantErr: `listen: "127.0.0.1:": the port is missing`},
		{name: "listen on a mistyped IPv4", text: "listen: 127.0.0.256:9042\n", wantErr: `host "127.0.0.256" is neither an IP address nor a host name`},
		{name: "listen on a host with a space", text: "listen: 'local host:9042'\n", wantErr: `host "local host" is neither`},
		{name: "listen on IPv6 without brackets", text: "listen: '::1:9042'\n", wantErr: "too many colons"},
		{name: "host and port both wrong", text: "listen: 'a..b:70000'\n", wantErr: `listen: "a..b:70000": port 70000 is outside 0 to 65535; host "a..b" is neither`},

		// admin.listen: as listen, and not listen's port.
		{name: "admin off", text: "admin: {listen: ''}\n"},
		{name: "admin port past 65535", text: "admin:\n  listen: 127.0.0.1:70000\n", wantErr: `cqlguard.yaml:2: admin.listen: "127.0.0.1:70000": port 70000 is outside 0 to 65535`},
		{name: "admin without a port", text: "admin: {listen: localhost}\n", wantErr: "admin.listen: \"localhost\": address localhost: missing port"},
		{name: "admin port a name", text: "admin: {listen: '127.0.0.1:http'}\n", wantErr: `admin.listen: "127.0.0.1:http": port "http" is not a number`},
		{name: "admin on listen's port", text: "listen: 127.0.0.1:9042\nadmin:\n  listen: 127.0.0.1:9042\n", wantErr: `cqlguard.yaml:3: admin.listen: "127.0.0.1:9042" takes the port listen "127.0.0.1:9042" takes`},
		{name: "admin on every address, listen's port", text: "listen: 127.0.0.1:9042\nadmin: {listen: '0.0.0.0:9042'}\n", wantErr: "takes the port listen"},
		{name: "admin on listen's port, another host", text: "listen: 127.0.0.1:9042\nadmin: {listen: '127.0.0.2:9042'}\n"},
		{name: "both on port 0", text: "listen: 127.0.0.1:0\nadmin: {listen: '127.0.0.1:0'}\n"},

		// advertise: an IP address and a port drivers can dial.
		{name: "advertise port 0", text: "advertise: 10.0.0.5:0\n", wantErr: `advertise: "10.0.0.5:0": port 0 is outside 1 to 65535`},
		{name: "advertise port a word", text: "advertise: 10.0.0.5:x\n", wantErr: `advertise: "10.0.0.5:x": port "x" is not a number from 1 to 65535`},
		{name: "advertise without a port", text: "advertise: 10.0.0.5\n", wantErr: "missing port in address"},
		{name: "advertise a name", text: "advertise: proxy:9042\n", wantErr: `"proxy:9042" must be one IP address`},

		// upstreams: names are looked up when dialed, not here.
		{name: "upstream names", text: "upstreams: [cassandra-0.cassandra.db.svc.cluster.local:9042, cassandra_1:9042, 'cassandra.:9042']\n"},
		{name: "upstream on IPv6", text: "upstreams: ['[fe80::1%eth0]:9042']\n"},
		{name: "upstream port 0", text: "upstreams: [10.0.0.1:0]\n", wantErr: `upstreams: "10.0.0.1:0": port 0 is outside 1 to 65535`},
		{name: "upstream port past 65535", text: "upstreams: [10.0.0.1:65536]\n", wantErr: "port 65536 is outside 1 to 65535"},
		{name: "upstream port a word", text: "upstreams: ['cass:abc']\n", wantErr: `upstreams: "cass:abc": port "abc" is not a number`},
		{name: "upstream without a port", text: "upstreams: [10.0.0.1]\n", wantErr: "missing port in address"},
		{name: "upstream without a host", text: "upstreams: [':9042']\n", wantErr: `upstreams: ":9042": the host is missing`},
		{name: "upstream name with an empty label", text: "upstreams: ['cass..db:9042']\n", wantErr: `host "cass..db" is neither`},
		{name: "upstream label too long", text: "upstreams: ['" + strings.Repeat("a", 64) + ":9042']\n", wantErr: "is neither an IP address nor a host name"},
		{name: "the second upstream, its line", text: "upstreams:\n  - 10.0.0.1:9042\n  - 10.0.0.2:99999\n", wantErr: `cqlguard.yaml:1: upstreams: "10.0.0.2:99999"`},

		// peers: the proxies in front of the other nodes.
		{name: "peer port past 65535", text: "mode: node\npeers:\n  10.0.0.3: 10.0.1.3:90420\n", wantErr: `cqlguard.yaml:3: peers.10.0.0.3: "10.0.1.3:90420": port 90420 is outside 1 to 65535, for the proxy in front of 10.0.0.3`},

		// coordination.addresses: Redis.
		{name: "redis port past 65535", text: "coordination:\n  addresses: [127.0.0.1:637900]\n", wantErr: `cqlguard.yaml:2: coordination.addresses: "127.0.0.1:637900": port 637900 is outside 1 to 65535`},
		{name: "redis without a port", text: "coordination: {addresses: [redis]}\n", wantErr: "missing port in address"},
		{name: "redis without a host", text: "coordination: {addresses: [':6379']}\n", wantErr: "the host is missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			loadCase(t, tt.text, tt.wantErr)
		})
	}
}

// The limiter's memory is divided among the processors, each of which
// needs a table of some size: too little for this machine is refused as
// the limiter itself would refuse it. Not parallel: it sets GOMAXPROCS,
// which the limiter reads.
func TestLimitsMemoryForProcessors(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(64))
	text := "limits:\n  algorithm: token-bucket\n  memory: 64KiB\n"
	loadCase(t, text, "cqlguard.yaml:3: limits.memory: 65536 bytes on this machine: ratelimit: memory 65536 bytes over 64 shards")
	runtime.GOMAXPROCS(2)
	loadCase(t, text, "")
}
