#!/usr/bin/env bash
# Fetches, configures, starts and stops a single-node Apache Cassandra 5.0 for
# the tests and the demo, bound entirely to one loopback address; or, with
# CASSANDRA_SEEDS and CASSANDRA_CLUSTER_NAME, one node of a cluster
# (test/cassandra/cluster.sh starts three).
#
#   cassandra.sh fetch          download Cassandra's jars from Maven Central (once)
#   cassandra.sh start          start it (fetching first) and wait until logins work
#                               (or, with CASSANDRA_READY=port, until the native
#                               port is open)
#   cassandra.sh stop [--wipe]  stop it; --wipe also deletes its data
#   cassandra.sh wipe           same as stop --wipe
#   cassandra.sh status         exit 0 if it runs and answers
#   cassandra.sh pid            print its process id, if it runs
#   cassandra.sh cqlsh-check    log in as cassandra/cassandra, print release_version
#   cassandra.sh ring N         exit 0 if it answers and sees N nodes UP, itself included
#   cassandra.sh ca             print the path of the CA certificate (PEM) of the node's TLS
#
# Environment (defaults in brackets):
#   CASSANDRA_ADDR [127.0.0.2]  listen and rpc address (any 127.x works on Linux)
#   CASSANDRA_PORT [9042]       native (CQL) port
#   CASSANDRA_STORAGE_PORT [7000]  internode port, on CASSANDRA_ADDR
#   CASSANDRA_JMX_PORT []       JMX on 127.0.0.1:<port>; empty means no JMX (no nodetool)
#   CASSANDRA_HEAP [1G]         -Xms/-Xmx
#   CASSANDRA_CLUSTER_NAME [cqlguard-test]  cluster_name; fixed once the data exists
#   CASSANDRA_SEEDS [<addr>:<storage port>]  seeds, host:port separated by commas
#   CASSANDRA_NUM_TOKENS [16]   num_tokens; fixed once the data exists
#   CASSANDRA_TOKEN_ALLOCATION_RF []  allocate_tokens_for_local_replication_factor:
#                               a node joining a ring picks tokens that balance
#                               ownership at that replication factor; empty:
#                               random tokens
#   CASSANDRA_AUTH_CACHE_VALIDITY []  how long the node keeps a login's roles,
#                               permissions and credentials before reading
#                               system_auth again (roles_validity and the
#                               others, a duration such as 1h); empty:
#                               Cassandra's 2s
#   CASSANDRA_JVM_OPTS []       more JVM options, after the script's own, so that
#                               a -D here wins (-Dcassandra.ring_delay_ms=5000)
#   CASSANDRA_START_TIMEOUT [180]  seconds start waits for the node to be ready
#   CASSANDRA_READY [login]     what start waits for: login, or port (the native
#                               port is open, which Cassandra opens once it has
#                               joined its ring): a node of a cluster may need
#                               others for a login, as system_auth has one replica
#   CQLGUARD_CACHE [~/.cache/cqlguard]  jars, probe binary and default data
#   CASSANDRA_DATA [$CQLGUARD_CACHE/data-<addr>-<port>]  data, cassandra.yaml,
#                               cassandra.log and cassandra.pid
# The superuser is cassandra/cassandra (PasswordAuthenticator, CassandraAuthorizer).
# The native port takes plaintext and TLS clients both (client_encryption_options
# optional): every launch writes a throwaway CA and a node certificate it signs,
# for CASSANDRA_ADDR, to $CASSANDRA_DATA/tls; `cassandra.sh ca` prints the CA's
# path. No client certificate is asked for.
# Needs Java 17 and Maven (installed with apt-get when missing) and Go (for the
# login probe in probe/ and the certificate writer in certs/).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
addr=${CASSANDRA_ADDR:-127.0.0.2}
port=${CASSANDRA_PORT:-9042}
storage_port=${CASSANDRA_STORAGE_PORT:-7000}
jmx_port=${CASSANDRA_JMX_PORT:-}
heap=${CASSANDRA_HEAP:-1G}
cluster_name=${CASSANDRA_CLUSTER_NAME:-cqlguard-test}
seeds=${CASSANDRA_SEEDS:-$addr:$storage_port}
num_tokens=${CASSANDRA_NUM_TOKENS:-16}
token_allocation_rf=${CASSANDRA_TOKEN_ALLOCATION_RF:-}
auth_cache_validity=${CASSANDRA_AUTH_CACHE_VALIDITY:-}
read -r -a jvm_opts <<<"${CASSANDRA_JVM_OPTS:-}"
start_timeout=${CASSANDRA_START_TIMEOUT:-180}
ready_when=${CASSANDRA_READY:-login}
cache=${CQLGUARD_CACHE:-$HOME/.cache/cqlguard}
version=$(sed -n 's:.*<cassandra.version>\(.*\)</cassandra.version>.*:\1:p' "$here/pom.xml")
home="$cache/cassandra-$version"
lib="$home/lib"
data=${CASSANDRA_DATA:-$cache/data-$addr-$port}
pidfile="$data/cassandra.pid"
logfile="$data/cassandra.log"
probe="$cache/bin/cqlguard-probe"
certs="$cache/bin/cqlguard-certs"
tlsdir="$data/tls"
lockfile="$data.cassandra-sh.lock"

die() { echo "cassandra.sh: $*" >&2; exit 1; }

[ -n "$version" ] || die "no <cassandra.version> in $here/pom.xml"

# lock serialises start, stop and fetch between concurrent callers. fd 9 must
# not leak into Cassandra (launch closes every descriptor above 2), or
# Cassandra would hold the lock.
lock() {
  mkdir -p "$(dirname "$1")"
  exec 9>"$1"
  flock -w 300 9 || die "another cassandra.sh has held $1 for 5 minutes; giving up"
}

# --- tools -------------------------------------------------------------------

apt_install() {
  command -v apt-get >/dev/null || die "$* missing and no apt-get here: install $* by hand"
  local sudo=()
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || die "$* missing: install them as root (apt-get install $*)"
    sudo=(sudo)
  fi
  echo "cassandra.sh: installing $* with apt-get" >&2
  "${sudo[@]}" apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "$@" >/dev/null
}

java_major() { "$1" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p'; }

# find_java sets java to a Java 17 binary: $JAVA_HOME, PATH, /usr/lib/jvm.
find_java() {
  local c
  for c in ${JAVA_HOME:+"$JAVA_HOME/bin/java"} "$(command -v java || true)" /usr/lib/jvm/java-17-openjdk*/bin/java; do
    if [ -n "$c" ] && [ -x "$c" ] && [ "$(java_major "$c")" = 17 ]; then java=$c; return 0; fi
  done
  return 1
}

need_java() {
  find_java && return 0
  apt_install openjdk-17-jdk-headless
  find_java || die "no Java 17 found after installing openjdk-17-jdk-headless"
}

need_mvn() {
  command -v mvn >/dev/null || apt_install maven
}

# --- fetch -------------------------------------------------------------------

fetch() {
  [ -f "$lib/cassandra-all-$version.jar" ] && return 0
  lock "$cache/fetch.lock"
  [ -f "$lib/cassandra-all-$version.jar" ] && return 0
  need_java
  need_mvn
  mkdir -p "$home"
  local tmp
  tmp=$(mktemp -d "$home/fetch.XXXXXX")
  # JAVA_HOME for mvn: the JDK that holds the Java 17 binary found above.
  if ! JAVA_HOME=$(dirname "$(dirname "$(readlink -f "$java")")") \
      mvn -B -q -f "$here/pom.xml" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$tmp/lib" >"$home/fetch.log" 2>&1 ||
      [ ! -f "$tmp/lib/cassandra-all-$version.jar" ]; then
    rm -rf "$tmp"
    tail -20 "$home/fetch.log" >&2
    die "fetching Cassandra $version from Maven Central failed; log: $home/fetch.log"
  fi
  rm -rf "$lib"
  mv "$tmp/lib" "$lib"
  rm -rf "$tmp"
}

# --- probes ------------------------------------------------------------------

# is_ours pid: pid is a live Cassandra started with this data directory's yaml.
is_ours() {
  [ -n "$1" ] && kill -0 "$1" 2>/dev/null || return 1
  [ -r "/proc/$1/cmdline" ] || return 0
  tr '\0' ' ' <"/proc/$1/cmdline" | grep -qF -- "-Dcassandra.config=file://$data/cassandra.yaml "
}

# running: a Cassandra for this data directory is alive. Its pid comes from the
# pid file or, if that is missing or stale, from the process list (and is then
# written back to the pid file).
running() {
  local pid=
  [ -f "$pidfile" ] && pid=$(cat "$pidfile" 2>/dev/null || true)
  is_ours "$pid" && return 0
  command -v pgrep >/dev/null || return 1
  for pid in $(pgrep -f org.apache.cassandra.service.CassandraDaemon || true); do
    if is_ours "$pid"; then
      echo "$pid" >"$pidfile"
      return 0
    fi
  done
  return 1
}

# port_open host port: something accepts TCP connections there.
port_open() { timeout 2 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>/dev/null; }

# build_tool bin pkg what (re)builds the Go command in test/cassandra/pkg into
# bin when bin is missing or older than its sources.
build_tool() {
  local bin=$1 pkg=$2 what=$3
  if [ -x "$bin" ] && [ "$bin" -nt "$here/$pkg/main.go" ] &&
    [ "$bin" -nt "$root/go.mod" ] && [ "$bin" -nt "$root/go.sum" ]; then
    return 0
  fi
  command -v go >/dev/null || die "go is needed to build the $what (test/cassandra/$pkg)"
  mkdir -p "$(dirname "$bin")"
  local out
  if ! out=$(cd "$root" && go build -o "$bin.tmp.$$" "./test/cassandra/$pkg" 2>&1); then
    rm -f "$bin.tmp.$$"
    echo "$out" >&2
    die "building the $what (test/cassandra/$pkg) failed"
  fi
  mv -f "$bin.tmp.$$" "$bin"
}

build_probe() { build_tool "$probe" probe "login probe"; }

# answers: the native port is open and cassandra/cassandra can log in and query.
answers() {
  port_open "$addr" "$port" || return 1
  build_probe
  "$probe" -addr "$addr:$port" >/dev/null 2>&1
}

# ring n: the node answers and sees n nodes UP, itself included (the probe's
# -nodes says how it tells).
ring() {
  [[ "${1:-}" =~ ^[1-9][0-9]*$ ]] || die "usage: cassandra.sh ring N"
  if ! running; then
    echo "cassandra.sh: not running (data $data)" >&2
    return 1
  fi
  port_open "$addr" "$port" || { echo "cassandra.sh: nothing listens on $addr:$port yet" >&2; return 1; }
  build_probe
  "$probe" -addr "$addr:$port" -nodes "$1" >/dev/null
}

# --- start -------------------------------------------------------------------

write_config() {
  mkdir -p "$data/triggers"
  # A new CA and node certificate on every launch: nothing outlives a run.
  build_tool "$certs" certs "certificate writer"
  rm -rf "$tlsdir"
  "$certs" -dir "$tlsdir" -hosts "$addr,localhost" || die "writing the TLS certificates to $tlsdir failed"
  # num_tokens must not change once a data directory exists.
  local allocation= auth_caches=
  [ -z "$token_allocation_rf" ] || allocation="allocate_tokens_for_local_replication_factor: $token_allocation_rf"
  if [ -n "$auth_cache_validity" ]; then
    auth_caches="roles_validity: $auth_cache_validity
permissions_validity: $auth_cache_validity
credentials_validity: $auth_cache_validity"
  fi
  cat >"$data/cassandra.yaml" <<YAML
# Written by test/cassandra/cassandra.sh on every start; edits are lost.
cluster_name: $cluster_name
num_tokens: $num_tokens
$allocation
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "$seeds"
listen_address: $addr
rpc_address: $addr
storage_port: $storage_port
native_transport_port: $port
start_native_transport: true
native_transport_max_frame_size: 256MiB
native_transport_max_requests_per_second: 1000000
authenticator: PasswordAuthenticator
authorizer: CassandraAuthorizer
role_manager: CassandraRoleManager
$auth_caches
data_file_directories: [$data/data]
commitlog_directory: $data/commitlog
saved_caches_directory: $data/saved_caches
hints_directory: $data/hints
cdc_raw_directory: $data/cdc_raw
commitlog_sync: periodic
commitlog_sync_period: 10000ms
auto_snapshot: false
hinted_handoff_enabled: false
concurrent_reads: 16
concurrent_writes: 16
concurrent_compactors: 1
read_request_timeout: 10000ms
write_request_timeout: 10000ms
range_request_timeout: 20000ms
request_timeout: 20000ms
client_encryption_options:
  enabled: true
  optional: true
  ssl_context_factory:
    class_name: org.apache.cassandra.security.PEMBasedSslContextFactory
  keystore: $tlsdir/node.pem
  truststore: $tlsdir/ca.pem
  require_client_auth: false
YAML
  cat >"$data/logback.xml" <<'XML'
<configuration scan="false">
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %logger{0} - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="STDOUT"/></root>
</configuration>
XML
}

launch() {
  local jamm
  jamm=$(ls "$lib"/jamm-*.jar 2>/dev/null | head -1)
  [ -n "$jamm" ] || die "no jamm jar in $lib: run '$0 fetch' again after deleting $home"
  local opts=(
    -Xms"$heap" -Xmx"$heap" -XX:+UseG1GC -Xss512k -XX:+PerfDisableSharedMem -XX:+ExitOnOutOfMemoryError
    -javaagent:"$jamm"
    -Dcassandra.config=file://"$data/cassandra.yaml"
    -Dlogback.configurationFile="$data/logback.xml"
    -Dcassandra-foreground=true
    -Dcassandra.storagedir="$data"
    -Dcassandra.logdir="$data"
    -Dcassandra.triggers_dir="$data/triggers"
    -Djava.net.preferIPv4Stack=true
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
  if [ -n "$jmx_port" ]; then
    opts+=(-Dcassandra.jmx.local.port="$jmx_port" -Djava.rmi.server.hostname=127.0.0.1)
  fi
  # Last: of a property given twice, Java keeps the last.
  opts+=("${jvm_opts[@]}")
  rm -f "$pidfile"
  # setsid: a Ctrl-C or a killed process group of the caller does not reach
  # Cassandra; the inner shell writes its own pid, which exec hands to java.
  # It closes every descriptor above 2 first: a lock a caller holds (ours,
  # cluster.sh's, flock(1)'s around a test run) is released when the caller
  # ends, not when Cassandra does.
  setsid -f bash -c 'echo $$ >"$1"; shift
    for fd in /proc/$$/fd/*; do fd=${fd##*/}; if ((fd > 2)); then eval "exec $fd>&-"; fi; done
    exec nohup "$@"' _ "$pidfile" \
    "$java" "${opts[@]}" -cp "$lib/*" org.apache.cassandra.service.CassandraDaemon \
    </dev/null >"$logfile" 2>&1
  local i
  for i in $(seq 50); do [ -s "$pidfile" ] && return 0; sleep 0.1; done
  die "Cassandra did not start (no pid file $pidfile); log: $logfile"
}

# show_log prints the end of Cassandra's log, then its errors, last.
show_log() {
  [ -f "$logfile" ] || return 0
  echo "--- last lines of $logfile:" >&2
  tail -30 "$logfile" >&2
  if grep -qE '^ERROR|encountered during startup' "$logfile"; then
    echo "--- errors in $logfile:" >&2
    grep -E '^ERROR|encountered during startup' "$logfile" | tail -5 | cut -c1-400 >&2
  fi
}

# ready: what start waits for (CASSANDRA_READY) holds.
ready() {
  case "$ready_when" in
    login) answers ;;
    port) port_open "$addr" "$port" ;;
    *) die "CASSANDRA_READY is login or port, not $ready_when" ;;
  esac
}

# wait_ready waits until the node is ready, the process dies or the time is up.
wait_ready() {
  local deadline=$((SECONDS + start_timeout))
  until ready; do
    if ! running; then
      show_log
      rm -f "$pidfile"
      die "Cassandra exited during start; log: $logfile"
    fi
    if ((SECONDS >= deadline)); then
      show_log
      stop_locked
      local what="accept a login"
      [ "$ready_when" != port ] || what="open its native port"
      die "Cassandra did not $what on $addr:$port within $start_timeout s, stopped it; log: $logfile"
    fi
    sleep 1
  done
}

start() {
  fetch
  need_java
  build_probe
  lock "$lockfile"
  if running; then
    # Ours and alive: a no-op, or still booting: wait for it.
    ready || wait_ready
    return 0
  fi
  [ "$port" != "$storage_port" ] || die "CASSANDRA_PORT and CASSANDRA_STORAGE_PORT are both $port"
  local p
  for p in "$port" "$storage_port" $jmx_port; do
    if port_open "$addr" "$p" || { [ "$p" = "$jmx_port" ] && port_open 127.0.0.1 "$p"; }; then
      die "port $p on $addr is taken by another process (a Cassandra with another data directory?); see: ss -ltnp"
    fi
  done
  write_config
  local t0=$SECONDS
  launch
  wait_ready
  echo "cassandra $version up on $addr:$port in $((SECONDS - t0)) s (pid $(cat "$pidfile"), data $data)"
}

# --- stop --------------------------------------------------------------------

stop_locked() {
  if running; then
    local pid i
    pid=$(cat "$pidfile")
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "cassandra.sh: Cassandra (pid $pid) ignored SIGTERM for 60 s, killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
      for i in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    fi
  fi
  rm -f "$pidfile"
}

stop() {
  local wipe=
  case "${1:-}" in
    "") ;;
    --wipe) wipe=1 ;;
    *) die "usage: cassandra.sh stop [--wipe]" ;;
  esac
  [ -d "$data" ] || return 0
  lock "$lockfile"
  stop_locked
  if [ -n "$wipe" ]; then rm -rf "$data"; fi
}

# --- status ------------------------------------------------------------------

status() {
  if ! running; then
    echo "cassandra.sh: not running (data $data)" >&2
    return 1
  fi
  if ! answers; then
    echo "cassandra.sh: running (pid $(cat "$pidfile")) but no login on $addr:$port yet; log: $logfile" >&2
    return 1
  fi
  echo "cassandra $version running on $addr:$port (pid $(cat "$pidfile"))"
}

cqlsh_check() {
  build_probe
  local out err
  err=$(mktemp)
  if ! out=$("$probe" -addr "$addr:$port" 2>"$err"); then
    cat "$err" >&2
    rm -f "$err"
    die "cannot log in as cassandra/cassandra and query $addr:$port"
  fi
  rm -f "$err"
  echo "cassandra $out answers on $addr:$port as cassandra/cassandra"
}

case "${1:-}" in
  fetch) fetch ;;
  start) start ;;
  stop) shift; stop "$@" ;;
  wipe) stop --wipe ;;
  status) status ;;
  pid) running || die "not running (data $data)"; cat "$pidfile" ;;
  cqlsh-check) cqlsh_check ;;
  ring) shift; ring "$@" ;;
  ca)
    [ -f "$tlsdir/ca.pem" ] || die "no $tlsdir/ca.pem: start Cassandra (a Cassandra started by an older cassandra.sh has no TLS: stop it first)"
    echo "$tlsdir/ca.pem" ;;
  *) die "usage: cassandra.sh fetch|start|stop [--wipe]|wipe|status|pid|cqlsh-check|ring N|ca" ;;
esac
