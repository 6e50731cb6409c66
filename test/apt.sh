# shellcheck shell=bash
# Sourced by the scripts that install Debian packages the tests need
# (test/redis/redis.sh, test/prometheus/prometheus.sh,
# test/haproxy/haproxy.sh); the sourcing script defines die.
#
# apt_install LOG ARG... runs apt-get install -y ARG..., as root or through
# sudo, writing apt-get's output to LOG. It keeps the packages' services
# from starting (the tests run their own servers, and installing should not
# leave one running) through policy-rc.d, unless one exists already (as in
# containers), and refreshes the package lists once if the install fails
# without them. It ends the script through die when it cannot install.
apt_install() {
  local log=$1
  shift
  command -v apt-get >/dev/null || die "no apt-get here: install $* by hand"
  local sudo=()
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || die "not root and no sudo: install $* as root (apt-get install $*)"
    sudo=(sudo)
  fi
  local policy=/usr/sbin/policy-rc.d made=''
  if [ ! -e "$policy" ]; then
    "${sudo[@]}" sh -c "printf '#!/bin/sh\\nexit 101\\n' >$policy && chmod 755 $policy"
    made=1
    # shellcheck disable=SC2064 # sudo is local: expanded now, on purpose.
    trap "${sudo[*]} rm -f $policy" EXIT
  fi
  local apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -qq -o DPkg::Lock::Timeout=300)
  if ! "${apt[@]}" install -y "$@" >"$log" 2>&1; then
    "${apt[@]}" update >>"$log" 2>&1 || { tail -5 "$log" >&2; die "apt-get update failed; log: $log"; }
    "${apt[@]}" install -y "$@" >>"$log" 2>&1 ||
      { tail -5 "$log" >&2; die "apt-get install $* failed; log: $log"; }
  fi
  if [ -n "$made" ]; then
    "${sudo[@]}" rm -f "$policy"
    trap - EXIT
  fi
}

# as_root runs its arguments as root, through sudo unless root already.
as_root() {
  if [ "$(id -u)" = 0 ]; then
    "$@"
  else
    sudo "$@"
  fi
}
