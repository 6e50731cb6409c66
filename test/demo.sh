#!/usr/bin/env bash
# The demo: a local Cassandra 5, cqlguard in front of it, and a short hot
# workload through the proxy, with a summary of what happened.
# Set CQLGUARD_KEEP_CASSANDRA=1 to leave Cassandra running afterwards.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

echo "== starting Cassandra 5 on 127.0.0.2:9042 (first run downloads it)"
bash test/cassandra/cassandra.sh start
if [ "${CQLGUARD_KEEP_CASSANDRA:-}" != 1 ]; then
  trap 'bash test/cassandra/cassandra.sh stop' EXIT
fi

echo "== building and starting cqlguard on 127.0.0.1:9042, cqlguard_demo.kv limited to 100 reads and 100 writes a second per partition"
go build -o bin/cqlguard ./cmd/cqlguard
log=$(mktemp -t cqlguard-demo.XXXXXX.log)
config=$(mktemp -t cqlguard-demo.XXXXXX.yaml)
cat >"$config" <<'YAML'
listen: 127.0.0.1:9042
upstreams: [127.0.0.2:9042]
admin: {listen: 127.0.0.1:9180}
log: {format: console}
# The proxy reads partition keys from the schema as this user.
schema: {username: cassandra, password_env: CQLGUARD_DEMO_PASSWORD}
limits:
  keyspaces:
    cqlguard_demo:
      tables:
        kv: {max_reads_per_second: 100, max_writes_per_second: 100}
YAML
CQLGUARD_DEMO_PASSWORD=cassandra bin/cqlguard -config "$config" >"$log" 2>&1 &
proxy=$!
trap 'kill -TERM $proxy 2>/dev/null; wait $proxy 2>/dev/null || true; [ "${CQLGUARD_KEEP_CASSANDRA:-}" = 1 ] || bash test/cassandra/cassandra.sh stop' EXIT
for _ in $(seq 50); do
  curl -sf http://127.0.0.1:9180/readyz >/dev/null 2>&1 && break
  sleep 0.2
done

echo "== running the workload through cqlguard"
go run ./test/demo -proxy 127.0.0.1:9042 -admin http://127.0.0.1:9180
echo "== proxy log: $log, configuration: $config"
