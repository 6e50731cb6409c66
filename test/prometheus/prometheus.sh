#!/usr/bin/env bash
# Installs, starts and stops a private Prometheus for the tests of
# cqlguard's dashboard and alerts, and checks the alerting rules.
#
#   prometheus.sh install                 install Debian's prometheus (once), without
#                                         leaving its system service running or enabled
#   prometheus.sh start PORT DIR CONFIG   run Prometheus on 127.0.0.1:PORT with the
#                                         configuration file CONFIG, keeping its data,
#                                         pid and log in DIR; prints its URL when ready
#   prometheus.sh stop DIR                stop the Prometheus started with DIR, if it runs
#   prometheus.sh rules                   promtool check rules on deploy/prometheus/*.yml,
#                                         as a rule_files glob loads them, and promtool
#                                         test rules on deploy/prometheus/tests/*.yml
#
# CONFIG says what to scrape and how often; the tests scrape every second.
# A start on a DIR whose Prometheus runs fails: stop it first. Progress goes
# to stderr, the result to stdout.
#
# Environment (defaults in brackets):
#   PROMETHEUS_START_TIMEOUT [30]  seconds a start waits for /-/ready
# Needs apt-get (as root or with sudo) unless prometheus and promtool are
# installed, and curl.
set -euo pipefail
# shellcheck source=test/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/../apt.sh"

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
start_timeout=${PROMETHEUS_START_TIMEOUT:-30}
host=127.0.0.1

die() { echo "prometheus.sh: $*" >&2; exit 1; }
say() { echo "prometheus.sh: $*" >&2; }

# --- install -----------------------------------------------------------------

installed() { command -v prometheus >/dev/null && command -v promtool >/dev/null; }

install() {
  installed && return 0
  local log=${TMPDIR:-/tmp}/cqlguard-prometheus-install.log
  exec 8>"$log.lock"
  flock -w 600 8 || die "another prometheus.sh has been installing Prometheus for 10 minutes; giving up"
  installed && return 0
  say "installing prometheus with apt-get"
  # Without recommends: the node exporter would be one more service.
  apt_install "$log" --no-install-recommends prometheus
  # Nor should the service start at the next boot.
  if command -v systemctl >/dev/null; then
    as_root systemctl disable --now prometheus >>"$log" 2>&1 || true
  fi
  if command -v update-rc.d >/dev/null; then
    as_root update-rc.d prometheus disable >>"$log" 2>&1 || true
  fi
  installed || die "prometheus or promtool still missing after apt-get install"
  say "installed $(prometheus --version 2>&1 | head -1)"
}

# --- one instance ------------------------------------------------------------

check_port() {
  if ! [[ $1 =~ ^[1-9][0-9]*$ ]] || (($1 > 65535)); then die "bad port '$1'"; fi
}

# alive pid: the process runs and is not a zombie.
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

# pid_of dir prints the pid of dir's Prometheus if it runs: a live process
# whose command line names dir's data directory.
pid_of() {
  local f="$1/prometheus.pid" pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f" 2>/dev/null || true)
  [ -n "$pid" ] && alive "$pid" || return 1
  if [ -r "/proc/$pid/cmdline" ]; then
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "--storage.tsdb.path=$1/data" || return 1
  fi
  echo "$pid"
}

# shellcheck disable=SC2016 # $1 and $2 are the inner shell's.
port_open() { timeout 2 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$host" "$1" 2>/dev/null; }

start() {
  [ $# = 3 ] || die "usage: prometheus.sh start PORT DIR CONFIG"
  local port=$1 dir=$2 config=$3
  check_port "$port"
  [ -r "$config" ] || die "cannot read the configuration $config"
  command -v curl >/dev/null || die "curl is needed to see when Prometheus is ready"
  install
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  config=$(cd "$(dirname "$config")" && pwd)/$(basename "$config")
  if pid_of "$dir" >/dev/null; then
    die "a Prometheus already runs with $dir: stop it first (prometheus.sh stop $dir)"
  fi
  if port_open "$port"; then
    die "port $port on $host is taken by another process; see: ss -ltnp"
  fi
  promtool check config "$config" >"$dir/check.log" 2>&1 || { cat "$dir/check.log" >&2; die "$config is not a valid configuration"; }
  rm -f "$dir/prometheus.pid"
  # A session of its own, so that a Ctrl-C for the caller does not reach it;
  # the inner shell writes its pid, which exec hands on.
  # shellcheck disable=SC2016 # $$ and $1 are the inner shell's.
  setsid -f bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$dir/prometheus.pid" \
    prometheus --config.file="$config" --storage.tsdb.path="$dir/data" \
    --web.listen-address="$host:$port" --web.enable-lifecycle \
    </dev/null >>"$dir/prometheus.log" 2>&1 8>&-
  local deadline=$((SECONDS + start_timeout))
  until curl -fsS "http://$host:$port/-/ready" >/dev/null 2>&1; do
    if ! pid_of "$dir" >/dev/null && [ -s "$dir/prometheus.pid" ]; then
      tail -15 "$dir/prometheus.log" >&2
      die "prometheus on port $port exited during start; log: $dir/prometheus.log"
    fi
    if ((SECONDS >= deadline)); then
      tail -15 "$dir/prometheus.log" >&2
      stop "$dir"
      die "prometheus on port $port was not ready within $start_timeout s, stopped it"
    fi
    sleep 0.1
  done
  say "prometheus up on $host:$port (pid $(pid_of "$dir"), dir $dir)"
  echo "http://$host:$port"
}

# stop dir: SIGTERM, then SIGKILL after 10 s. The directory stays.
stop() {
  [ $# = 1 ] || die "usage: prometheus.sh stop DIR"
  [ -d "$1" ] || return 0
  local dir pid
  dir=$(cd "$1" && pwd)
  if pid=$(pid_of "$dir"); then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 200); do alive "$pid" || break; sleep 0.05; done
    if alive "$pid"; then
      say "prometheus (pid $pid) ignored SIGTERM for 10 s, killing it"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$dir/prometheus.pid"
}

rules() {
  install
  local d="$root/deploy/prometheus"
  promtool check rules "$d"/*.yml
  promtool test rules "$d"/tests/*.yml
}

cmd=${1:-}
shift || true
case $cmd in
  install) install ;;
  start) start "$@" ;;
  stop) stop "$@" ;;
  rules) rules ;;
  *) die "usage: prometheus.sh install|start PORT DIR CONFIG|stop DIR|rules" ;;
esac
