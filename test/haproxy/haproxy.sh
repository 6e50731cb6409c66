#!/usr/bin/env bash
# Installs HAProxy for the benchmark's floor rows (docs/benchmarks.md): the
# bench starts its own haproxy, in the foreground, from a configuration it
# writes, so nothing here starts or configures one.
#
#   haproxy.sh install   install Debian's haproxy (once) and keep Debian's
#                        own service from running
#   haproxy.sh version   print the installed version, or fail
#
# Environment (defaults in brackets):
#   CQLGUARD_HAPROXY_DIR [/tmp/cqlguard-haproxy]  install.log and install.lock
# Needs apt-get (as root or with sudo) unless haproxy is installed.
set -euo pipefail
# shellcheck source=test/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/../apt.sh"

state=${CQLGUARD_HAPROXY_DIR:-/tmp/cqlguard-haproxy}

die() { echo "haproxy.sh: $*" >&2; exit 1; }
say() { echo "haproxy.sh: $*" >&2; }

installed() { command -v haproxy >/dev/null; }

install() {
  installed && return 0
  mkdir -p "$state"
  exec 8>"$state/install.lock"
  flock -w 600 8 || die "another haproxy.sh has been installing HAProxy for 10 minutes; giving up"
  installed && return 0
  say "installing haproxy with apt-get"
  apt_install "$state/install.log" haproxy
  # The package enables its service for the next boot whatever policy-rc.d
  # says; under systemd, turn that off too, and stop one that started.
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
    as_root systemctl disable --now haproxy >>"$state/install.log" 2>&1 || true
  fi
  installed || die "haproxy still missing after apt-get install"
  say "installed $(version)"
}

version() {
  installed || die "haproxy is not installed (haproxy.sh install)"
  haproxy -v | head -1
}

cmd=${1:-}
case $cmd in
  install) install ;;
  version) version ;;
  *) die "usage: haproxy.sh install|version" ;;
esac
