#!/usr/bin/env bash
# Installs, starts and stops Redis servers for the tests and the demo of
# cqlguard's fleet-wide limits, each bound to 127.0.0.1 only, without
# persistence (save "", appendonly no: a restart forgets every key).
#
#   redis.sh install                 install Debian's redis-server and redis-tools (once)
#   redis.sh start [port]            a plain instance [6390]; prints its address
#   redis.sh start-acl [port]        the default user off, user cqlguard with a new
#                                    password; prints the password file's path
#   redis.sh start-tls [port]        TLS only, with a throwaway CA and a certificate
#                                    for 127.0.0.1 and localhost; prints the CA's path
#   redis.sh start-cluster [first]   three masters on first..first+2 [7000], their
#                                    cluster buses on port+10000; prints their addresses
#   redis.sh restart port            stop an instance this script started (if it runs)
#                                    and start it again on its port with the same
#                                    configuration, password, certificates and cluster
#   redis.sh stop [--wipe] [port...] stop instances this script started [6390];
#                                    --wipe also deletes their directories
#   redis.sh stop-all [--wipe]       stop every instance this script started
#   redis.sh pid port                print an instance's process id, if it runs
#
# A start of what already runs does nothing but print (a cluster whose node
# is down gets it back); a start on a port that runs another kind of instance,
# or anything else, fails; a start of what is stopped begins afresh (a new
# password, CA or cluster). Progress goes to stderr, the result to stdout.
# install keeps the package from starting Debian's own Redis on 6379, which
# nothing here uses in any case.
#
# Environment (defaults in brackets):
#   CQLGUARD_REDIS_DIR [/tmp/cqlguard-redis]  one directory per port: redis.conf
#                     (written by start, read by restart), redis.pid, redis.log,
#                     password, tls/ca.pem, nodes.conf, cluster-create.log
#   CQLGUARD_CACHE [~/.cache/cqlguard]  where the certificate writer is built
#   REDIS_START_TIMEOUT [30]  seconds a start waits for PONG (and cluster_state:ok)
# Passwords never appear on a command line: redis-server reads them from the
# generated redis.conf and redis-cli from REDISCLI_AUTH.
# Needs apt-get (as root or with sudo) unless redis-server and redis-cli are
# installed, and Go for start-tls (the certificate writer in
# test/cassandra/certs).
set -euo pipefail
# shellcheck source=test/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/../apt.sh"

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
state=${CQLGUARD_REDIS_DIR:-/tmp/cqlguard-redis}
cache=${CQLGUARD_CACHE:-$HOME/.cache/cqlguard}
certs="$cache/bin/cqlguard-certs"
start_timeout=${REDIS_START_TIMEOUT:-30}
host=127.0.0.1
user=cqlguard

die() { echo "redis.sh: $*" >&2; exit 1; }
say() { echo "redis.sh: $*" >&2; }

# lock serialises every start, restart and stop between concurrent callers
# (parallel tests). fd 9 must not leak into redis-server (launch closes it),
# or the server would hold the lock.
lock() {
  mkdir -p "$state"
  exec 9>"$state/lock"
  flock -w 300 9 || die "another redis.sh has held $state/lock for 5 minutes; giving up"
}

check_port() {
  if ! [[ $1 =~ ^[1-9][0-9]*$ ]] || (($1 > 65535)); then die "bad port '$1'"; fi
}

# --- install -----------------------------------------------------------------

installed() { command -v redis-server >/dev/null && command -v redis-cli >/dev/null; }

install() {
  installed && return 0
  mkdir -p "$state"
  exec 8>"$state/install.lock"
  flock -w 600 8 || die "another redis.sh has been installing Redis for 10 minutes; giving up"
  installed && return 0
  say "installing redis-server and redis-tools with apt-get"
  apt_install "$state/install.log" redis-server redis-tools
  installed || die "redis-server or redis-cli still missing after apt-get install"
  say "installed $(redis-server --version | cut -d' ' -f1-3)"
}

# --- one instance's files and process ------------------------------------------

dir_of() { echo "$state/$1"; }

# alive pid: the process runs. A server that exited stays a zombie until
# its parent, init, reaps it, which can take a second.
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

# is_ours pid port: pid is a live redis-server started from port's redis.conf.
# redis-server's process title names its configuration file
# (proc-title-template), so the check survives the title's rewrite.
is_ours() {
  [ -n "$1" ] && alive "$1" || return 1
  [ -r "/proc/$1/cmdline" ] || return 0
  tr '\0' ' ' <"/proc/$1/cmdline" | grep -qF -- "$(dir_of "$2")/redis.conf"
}

# pid_of port prints the pid of port's instance if it runs.
pid_of() {
  local f pid
  f="$(dir_of "$1")/redis.pid"
  [ -f "$f" ] || return 1
  pid=$(cat "$f" 2>/dev/null || true)
  is_ours "$pid" "$1" || return 1
  echo "$pid"
}

running() { pid_of "$1" >/dev/null; }

kind_of() { cat "$(dir_of "$1")/kind" 2>/dev/null || echo unknown; }

# port_open port: something accepts TCP connections on 127.0.0.1:port.
port_open() { timeout 2 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$host" "$1" 2>/dev/null; }

# cli port args...: redis-cli against port's instance, with its TLS or
# credentials.
cli() {
  local port=$1 d
  shift
  d=$(dir_of "$port")
  case $(kind_of "$port") in
    tls) redis-cli -h "$host" -p "$port" --tls --cacert "$d/tls/ca.pem" "$@" ;;
    acl) REDISCLI_AUTH=$(cat "$d/password") redis-cli -h "$host" -p "$port" --user "$user" --no-auth-warning "$@" ;;
    *) redis-cli -h "$host" -p "$port" "$@" ;;
  esac
}

pong() { [ "$(cli "$1" ping 2>/dev/null)" = PONG ]; }

show_log() {
  local log
  log="$(dir_of "$1")/redis.log"
  [ -f "$log" ] || return 0
  echo "--- last lines of $log:" >&2
  tail -15 "$log" >&2
}

# write_config port kind writes a fresh directory for a new instance: its
# redis.conf and, by kind, its password, certificates or cluster settings.
write_config() {
  local port=$1 kind=$2 d
  d=$(dir_of "$port")
  rm -rf "$d"
  mkdir -p "$d"
  chmod 700 "$d"
  local listen="port $port"
  if [ "$kind" = tls ]; then
    # A new CA and certificate for every new instance; restart keeps them.
    build_certs
    "$certs" -dir "$d/tls" -hosts "$host,localhost" -name "cqlguard test Redis" ||
      die "writing the TLS certificates to $d/tls failed"
    listen="port 0
tls-port $port
tls-cert-file $d/tls/node.pem
tls-key-file $d/tls/node.pem
tls-ca-cert-file $d/tls/ca.pem
tls-auth-clients no"
  fi
  (
    umask 077
    cat >"$d/redis.conf" <<CONF
# Written by test/redis/redis.sh $kind; restart reads it, a new start replaces it.
bind $host
$listen
protected-mode yes
daemonize no
supervised no
dir $d
logfile ""
save ""
appendonly no
proc-title-template "{title} {listen-addr} {server-mode} $d/redis.conf"
CONF
    case $kind in
      acl)
        # 32 hex digits: nothing that redis.conf or a URL would need quoted.
        od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$d/password"
        cat >>"$d/redis.conf" <<CONF
user default off resetpass nocommands
user $user on >$(cat "$d/password") ~* &* +@all
CONF
        ;;
      cluster)
        cat >>"$d/redis.conf" <<CONF
cluster-enabled yes
cluster-config-file $d/nodes.conf
cluster-node-timeout 5000
CONF
        ;;
    esac
  )
  echo "$kind" >"$d/kind"
}

build_certs() {
  local src="$root/test/cassandra/certs/main.go"
  if [ -x "$certs" ] && [ "$certs" -nt "$src" ] && [ "$certs" -nt "$root/go.mod" ]; then
    return 0
  fi
  command -v go >/dev/null || die "go is needed to build the certificate writer (test/cassandra/certs)"
  mkdir -p "$(dirname "$certs")"
  local out
  if ! out=$(cd "$root" && go build -o "$certs.tmp.$$" ./test/cassandra/certs 2>&1); then
    rm -f "$certs.tmp.$$"
    echo "$out" >&2
    die "building the certificate writer (test/cassandra/certs) failed"
  fi
  mv -f "$certs.tmp.$$" "$certs"
}

# launch port runs redis-server on port's redis.conf in the background, in a
# process group of its own so that a Ctrl-C or a killed process group of the
# caller does not reach it, and deaf to the hangup of the caller's terminal;
# the inner shell writes its pid, which exec hands on. It stays in the
# caller's session: where Linux groups processes by session for the
# scheduler (kernel.sched_autogroup_enabled), a Redis in a session of its
# own (setsid, or daemonize) beside a busy one was left waiting to run for
# seconds at a time, and the proxies took it for gone (docs/scale-out.md).
launch() {
  local d
  d=$(dir_of "$1")
  rm -f "$d/redis.pid"
  (
    set -m
    nohup bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$d/redis.pid" \
      redis-server "$d/redis.conf" </dev/null >>"$d/redis.log" 2>&1 9>&- 8>&- &
  )
  local i
  for i in $(seq 50); do [ -s "$d/redis.pid" ] && return 0; sleep 0.1; done
  die "redis-server on port $1 did not start (no pid file); log: $d/redis.log"
}

# wait_pong port waits until the instance answers PING, it exits or the time
# is up.
wait_pong() {
  local deadline=$((SECONDS + start_timeout))
  until pong "$1"; do
    if ! running "$1"; then
      show_log "$1"
      die "redis-server on port $1 exited during start; log: $(dir_of "$1")/redis.log"
    fi
    if ((SECONDS >= deadline)); then
      show_log "$1"
      stop_port "$1"
      die "redis-server on port $1 did not answer PING within $start_timeout s, stopped it"
    fi
    sleep 0.1
  done
}

# cluster_ok port: the node sees the cluster as ok, with three known nodes.
cluster_ok() {
  local info
  info=$(cli "$1" cluster info 2>/dev/null | tr -d '\r') || return 1
  grep -qx 'cluster_state:ok' <<<"$info" && grep -qx 'cluster_known_nodes:3' <<<"$info"
}

# cluster_new ports...: no node knows another or holds a slot yet (also
# after a start that died before the cluster was created).
cluster_new() {
  local p info
  for p in "$@"; do
    info=$(cli "$p" cluster info | tr -d '\r') || return 1
    grep -qx 'cluster_known_nodes:1' <<<"$info" && grep -qx 'cluster_slots_assigned:0' <<<"$info" || return 1
  done
}

wait_cluster_ok() {
  local deadline=$((SECONDS + start_timeout)) p
  for p in "$@"; do
    until cluster_ok "$p"; do
      if ((SECONDS >= deadline)); then
        cli "$p" cluster info >&2 || true
        die "the cluster did not reach cluster_state:ok on port $p within $start_timeout s; logs: $state/<port>/redis.log"
      fi
      sleep 0.1
    done
  done
}

# free_or_ours port kind: fail unless the port is free or runs this kind of
# instance of ours; true if it runs.
free_or_ours() {
  local port=$1 kind=$2
  if running "$port"; then
    [ "$(kind_of "$port")" = "$kind" ] ||
      die "port $port runs a $(kind_of "$port") instance, not $kind: stop it first (redis.sh stop $port)"
    return 0
  fi
  if port_open "$port"; then
    die "port $port on $host is taken by another process; see: ss -ltnp"
  fi
  return 1
}

# --- commands ------------------------------------------------------------------

# start_one kind port starts a standalone instance and prints the result.
start_one() {
  local kind=$1 port=$2 d
  check_port "$port"
  install
  lock
  d=$(dir_of "$port")
  if free_or_ours "$port" "$kind"; then
    wait_pong "$port"
  else
    write_config "$port" "$kind"
    launch "$port"
    wait_pong "$port"
    say "redis ($kind) up on $host:$port (pid $(pid_of "$port"), dir $d)"
  fi
  case $kind in
    plain) echo "$host:$port" ;;
    acl) echo "$d/password" ;;
    tls) echo "$d/tls/ca.pem" ;;
  esac
}

start_cluster() {
  local first=${1:-7000}
  check_port "$first"
  local ports=("$first" $((first + 1)) $((first + 2)))
  local p
  for p in "${ports[@]}"; do check_port "$p"; check_port $((p + 10000)); done
  install
  lock
  local up=() down=()
  for p in "${ports[@]}"; do
    if free_or_ours "$p" cluster; then up+=("$p"); else down+=("$p"); fi
    if ! running "$p" && port_open $((p + 10000)); then
      die "cluster bus port $((p + 10000)) on $host is taken by another process; see: ss -ltnp"
    fi
  done
  if ((${#up[@]} == 0)); then
    # A new cluster: new node ids and slots.
    for p in "${ports[@]}"; do write_config "$p" cluster; done
  fi
  # A node of a running cluster that is down comes back with its nodes.conf.
  for p in "${down[@]}"; do
    [ -f "$(dir_of "$p")/redis.conf" ] || die "port $p is down and has no configuration: stop the other nodes (redis.sh stop ${ports[*]}) and start the cluster anew"
    launch "$p"
  done
  for p in "${ports[@]}"; do wait_pong "$p"; done
  if cluster_new "${ports[@]}"; then
    local addrs=()
    for p in "${ports[@]}"; do addrs+=("$host:$p"); done
    if ! redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >"$(dir_of "$first")/cluster-create.log" 2>&1; then
      tail -10 "$(dir_of "$first")/cluster-create.log" >&2
      die "redis-cli --cluster create ${addrs[*]} failed; log: $(dir_of "$first")/cluster-create.log"
    fi
  fi
  wait_cluster_ok "${ports[@]}"
  if ((${#down[@]} > 0)); then
    say "redis cluster up on $host:${ports[0]}-${ports[2]} (pids $(for p in "${ports[@]}"; do pid_of "$p"; done | paste -sd' '), dir $state)"
  fi
  for p in "${ports[@]}"; do echo "$host:$p"; done
}

restart() {
  local port=${1:-}
  [ -n "$port" ] || die "usage: redis.sh restart port"
  check_port "$port"
  local d
  d=$(dir_of "$port")
  [ -f "$d/redis.conf" ] || die "no $d/redis.conf: port $port was never started by redis.sh"
  lock
  stop_port "$port"
  if port_open "$port"; then
    die "port $port on $host is taken by another process; see: ss -ltnp"
  fi
  launch "$port"
  wait_pong "$port"
  if [ "$(kind_of "$port")" = cluster ]; then
    wait_cluster_ok "$port"
  fi
  say "redis ($(kind_of "$port")) restarted on $host:$port (pid $(pid_of "$port"))"
}

# stop_port port stops port's instance if it runs: SIGTERM, then SIGKILL
# after 10 s. Its directory stays for restart.
stop_port() {
  local pid i
  if pid=$(pid_of "$1"); then
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 200); do alive "$pid" || break; sleep 0.05; done
    if alive "$pid"; then
      say "redis-server on port $1 (pid $pid) ignored SIGTERM for 10 s, killing it"
      kill -KILL "$pid" 2>/dev/null || true
      for i in $(seq 50); do alive "$pid" || break; sleep 0.1; done
    fi
  fi
  rm -f "$(dir_of "$1")/redis.pid"
}

# stop [--wipe] [port...]; --wipe also deletes the ports' directories.
stop() {
  local wipe='' p ports=()
  for p in "$@"; do
    if [ "$p" = --wipe ]; then wipe=1; else check_port "$p"; ports+=("$p"); fi
  done
  ((${#ports[@]} > 0)) || ports=(6390)
  [ -d "$state" ] || return 0
  lock
  for p in "${ports[@]}"; do
    stop_port "$p"
    if [ -n "$wipe" ]; then rm -rf "$(dir_of "$p")"; fi
  done
}

stop_all() {
  case "${1:-}" in "" | --wipe) ;; *) die "usage: redis.sh stop-all [--wipe]" ;; esac
  [ -d "$state" ] || return 0
  local f ports=()
  for f in "$state"/*/redis.conf; do
    [ -e "$f" ] && ports+=("$(basename "$(dirname "$f")")")
  done
  ((${#ports[@]} > 0)) || return 0
  stop "$@" "${ports[@]}"
}

cmd=${1:-}
shift || true
case $cmd in
  install) install ;;
  start) start_one plain "${1:-6390}" ;;
  start-acl) start_one acl "${1:-6390}" ;;
  start-tls) start_one tls "${1:-6390}" ;;
  start-cluster) start_cluster "$@" ;;
  restart) restart "$@" ;;
  stop) stop "$@" ;;
  stop-all) stop_all "$@" ;;
  pid)
    [ -n "${1:-}" ] || die "usage: redis.sh pid port"
    check_port "$1"
    pid_of "$1" || die "nothing of redis.sh's runs on port $1 (dir $(dir_of "$1"))" ;;
  *) die "usage: redis.sh install|start [port]|start-acl [port]|start-tls [port]|start-cluster [first-port]|restart port|stop [--wipe] [port...]|stop-all [--wipe]|pid port" ;;
esac
