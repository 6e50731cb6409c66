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

state=${CQLGUARD_HAPROXY_DIR:-/tmp/cqlguard-haproxy}

die() { echo "haproxy.sh: $*" >&2; exit 1; }
say() { echo "haproxy.sh: $*" >&2; }

installed() { command -v haproxy >/dev/null; }

install() {
  installed && return 0
  command -v apt-get >/dev/null || die "haproxy missing and no apt-get here: install haproxy by hand"
  local sudo=()
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || die "haproxy missing: install it as root (apt-get install haproxy)"
    sudo=(sudo)
  fi
  mkdir -p "$state"
  exec 8>"$state/install.lock"
  flock -w 600 8 || die "another haproxy.sh has been installing HAProxy for 10 minutes; giving up"
  installed && return 0
  say "installing haproxy with apt-get"
  # The package's postinst starts a system haproxy unless policy-rc.d says
  # no; the bench never uses it. An existing policy-rc.d (as in containers)
  # is left as it is.
  local policy=/usr/sbin/policy-rc.d made=''
  if [ ! -e "$policy" ]; then
    "${sudo[@]}" sh -c "printf '#!/bin/sh\\nexit 101\\n' >$policy && chmod 755 $policy"
    made=1
    # shellcheck disable=SC2064 # sudo is local: expanded now, on purpose.
    trap "${sudo[*]} rm -f $policy" EXIT
  fi
  local apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -qq -o DPkg::Lock::Timeout=300)
  # An empty or stale package list is refreshed once, when install needs it.
  if ! "${apt[@]}" install -y haproxy >"$state/install.log" 2>&1; then
    "${apt[@]}" update >>"$state/install.log" 2>&1 || { tail -5 "$state/install.log" >&2; die "apt-get update failed; log: $state/install.log"; }
    "${apt[@]}" install -y haproxy >>"$state/install.log" 2>&1 ||
      { tail -5 "$state/install.log" >&2; die "apt-get install haproxy failed; log: $state/install.log"; }
  fi
  if [ -n "$made" ]; then
    "${sudo[@]}" rm -f "$policy"
    trap - EXIT
  fi
  # The package enables its service for the next boot whatever policy-rc.d
  # says; under systemd, turn that off too, and stop one that started.
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
    "${sudo[@]}" systemctl disable --now haproxy >>"$state/install.log" 2>&1 || true
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
