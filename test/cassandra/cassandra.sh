#!/usr/bin/env bash
# Fetches, configures, starts and stops a single-node Apache Cassandra 5 for
# the tests and the demo, bound to one loopback address.
#
#   cassandra.sh fetch          download Cassandra's jars from Maven Central (once)
#   cassandra.sh start          start it (fetching first) and wait until logins work
#   cassandra.sh stop [--wipe]  stop it; --wipe also deletes its data
#   cassandra.sh status         exit 0 if it runs and answers
#
# Environment: CASSANDRA_ADDR (127.0.0.2), CASSANDRA_PORT (9042),
# CQLGUARD_CACHE (~/.cache/cqlguard), CASSANDRA_DATA (under the cache).
# Logins: cassandra/cassandra (PasswordAuthenticator).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
addr=${CASSANDRA_ADDR:-127.0.0.2}
port=${CASSANDRA_PORT:-9042}
cache=${CQLGUARD_CACHE:-$HOME/.cache/cqlguard}
version=$(sed -n 's:.*<cassandra.version>\(.*\)</cassandra.version>.*:\1:p' "$here/pom.xml")
lib="$cache/cassandra-$version/lib"
data=${CASSANDRA_DATA:-$cache/data-$addr-$port}
pidfile="$data/cassandra.pid"
logfile="$data/cassandra.log"

die() { echo "cassandra.sh: $*" >&2; exit 1; }

need_tools() {
  local missing=()
  command -v java >/dev/null && java -version 2>&1 | grep -q '"17' || missing+=(openjdk-17-jre-headless)
  command -v mvn >/dev/null || missing+=(maven)
  if ((${#missing[@]})); then
    echo "cassandra.sh: installing ${missing[*]}" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

fetch() {
  [ -f "$lib/cassandra-all-$version.jar" ] && return 0
  need_tools
  mkdir -p "$lib.tmp" "$cache"
  if ! (cd "$here" && mvn -B -Dstyle.color=never dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$lib.tmp" >"$cache/fetch.log" 2>&1); then
    tail -20 "$cache/fetch.log" >&2
    die "fetching Cassandra $version from Maven Central failed; log: $cache/fetch.log"
  fi
  rm -rf "$lib" && mv "$lib.tmp" "$lib"
}

running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

# answers reports whether the native port accepts a login as cassandra.
probe="$cache/bin/cqlguard-probe"
answers() {
  [ -x "$probe" ] || (cd "$root" && go build -o "$probe" ./test/cassandra/probe) || die "building the probe failed"
  "$probe" -addr "$addr:$port" >/dev/null 2>&1
}

write_config() {
  mkdir -p "$data"
  cat >"$data/cassandra.yaml" <<YAML
cluster_name: cqlguard-test
num_tokens: 16
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "$addr:7000"
listen_address: $addr
rpc_address: $addr
native_transport_port: $port
storage_port: 7000
start_native_transport: true
authenticator: PasswordAuthenticator
authorizer: CassandraAuthorizer
role_manager: CassandraRoleManager
data_file_directories: [$data/data]
commitlog_directory: $data/commitlog
saved_caches_directory: $data/saved_caches
hints_directory: $data/hints
cdc_raw_directory: $data/cdc_raw
commitlog_sync: periodic
commitlog_sync_period: 10000ms
auto_snapshot: false
native_transport_max_frame_size: 256MiB
native_transport_max_requests_per_second: 1000000
read_request_timeout: 10000ms
write_request_timeout: 10000ms
range_request_timeout: 20000ms
request_timeout: 20000ms
concurrent_reads: 16
concurrent_writes: 16
YAML
}

start() {
  if running && answers; then return 0; fi
  running && stop
  fetch
  need_tools
  write_config
  local jamm
  jamm=$(ls "$lib"/jamm-*.jar | head -1)
  local opts=(
    -Xms1G -Xmx1G -XX:+UseG1GC -Xss512k
    -javaagent:"$jamm"
    -Dcassandra.config=file://"$data/cassandra.yaml"
    -Dcassandra-foreground=true
    -Dcassandra.storagedir="$data"
    -Dcassandra.logdir="$data"
    -Dcassandra.jmx.local.port=7199
    -Dcom.sun.management.jmxremote.host=127.0.0.1
    -Dcassandra.skip_wait_for_gossip_to_settle=0
    -Dcassandra.ring_delay_ms=100
    -Dcassandra.superuser_setup_delay_ms=0
    -Dcassandra.auth_bcrypt_gensalt_log2_rounds=4
    -Djdk.attach.allowAttachSelf=true
    -Dio.netty.tryReflectionSetAccessible=true
    --add-exports java.base/jdk.internal.misc=ALL-UNNAMED
    --add-exports java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED
    --add-exports java.rmi/sun.rmi.registry=ALL-UNNAMED
    --add-exports java.rmi/sun.rmi.server=ALL-UNNAMED
    --add-exports java.sql/java.sql=ALL-UNNAMED
    --add-exports java.base/java.lang.ref=ALL-UNNAMED
    --add-exports jdk.unsupported/sun.misc=ALL-UNNAMED
    --add-exports jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED
    --add-exports jdk.attach/sun.tools.attach=ALL-UNNAMED
    --add-opens java.base/java.lang.module=ALL-UNNAMED
    --add-opens java.base/jdk.internal.loader=ALL-UNNAMED
    --add-opens java.base/jdk.internal.ref=ALL-UNNAMED
    --add-opens java.base/jdk.internal.reflect=ALL-UNNAMED
    --add-opens java.base/jdk.internal.math=ALL-UNNAMED
    --add-opens java.base/jdk.internal.module=ALL-UNNAMED
    --add-opens java.base/jdk.internal.util.jar=ALL-UNNAMED
    --add-opens jdk.management/com.sun.management.internal=ALL-UNNAMED
    --add-opens java.base/sun.nio.ch=ALL-UNNAMED
    --add-opens java.base/java.io=ALL-UNNAMED
    --add-opens java.base/java.lang.reflect=ALL-UNNAMED
    --add-opens jdk.compiler/com.sun.tools.javac=ALL-UNNAMED
    --add-opens java.base/java.lang=ALL-UNNAMED
    --add-opens java.base/java.util=ALL-UNNAMED
  )
  nohup java "${opts[@]}" -cp "$lib/*" org.apache.cassandra.service.CassandraDaemon >"$logfile" 2>&1 &
  echo $! >"$pidfile"
  local deadline=$((SECONDS + 180))
  until answers; do
    if ! running; then
      tail -40 "$logfile" >&2
      die "Cassandra exited during start; log: $logfile"
    fi
    if ((SECONDS > deadline)); then
      tail -40 "$logfile" >&2
      die "Cassandra did not answer on $addr:$port within 180 s; log: $logfile"
    fi
    sleep 1
  done
  echo "cassandra $version up on $addr:$port (data $data)"
}

stop() {
  if running; then
    local pid
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
  if [ "${1:-}" = --wipe ]; then rm -rf "$data"; fi
}

case "${1:-}" in
  fetch) fetch ;;
  start) start ;;
  stop) shift; stop "${1:-}" ;;
  status) running && answers ;;
  *) die "usage: cassandra.sh fetch|start|stop [--wipe]|status" ;;
esac
