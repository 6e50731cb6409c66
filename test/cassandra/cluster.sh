#!/usr/bin/env bash
# Starts and stops a three-node Apache Cassandra 5.0 cluster for the tests,
# each node a test/cassandra/cassandra.sh of its own on a loopback address,
# beside the single node (127.0.0.2) and never gossiping with it.
#
#   cluster.sh start           start the nodes one after another, then wait
#                              until each sees every node UP
#   cluster.sh stop [--wipe]   stop them; --wipe also deletes their data
#   cluster.sh status          exit 0 if every node answers and sees every node UP
#
# Environment (defaults in brackets):
#   CLUSTER_ADDRS [127.0.1.1 127.0.1.2 127.0.1.3]  the nodes' addresses, the
#                              first the seed; native port 9042 and storage
#                              port 7000 on each
#   CLUSTER_NAME [cqlguard-cluster]  cluster_name; fixed once the data exists
#   CLUSTER_HEAP [768M]        each node's -Xms/-Xmx
#   CLUSTER_TOKEN_ALLOCATION_RF [1]  the replication factor whose ownership
#                              the joining nodes' tokens balance (the seed's
#                              are random); fixed once the data exists
#   CLUSTER_AUTH_CACHE_VALIDITY [1h]  how long a node keeps a login's roles
#                              and permissions: system_auth has one replica,
#                              and each reload from another node would count
#                              among the requests between nodes that
#                              test/cluster's counts take for hops
#   CLUSTER_RING_DELAY_MS [5000]  how long a joining node waits to learn the
#                              ring (cassandra.ring_delay_ms; the seed keeps
#                              cassandra.sh's 100)
#   CLUSTER_START_TIMEOUT [180]  seconds start waits, once every node has
#                              opened its native port, for every node to
#                              accept a login and see the others UP
#   CQLGUARD_CACHE [~/.cache/cqlguard]
#   CLUSTER_DATA [$CQLGUARD_CACHE/cluster]  a directory per node, named by its
#                              address, as cassandra.sh's CASSANDRA_DATA
# CASSANDRA_START_TIMEOUT applies to each node's start. Nodes have no JMX.
# system_auth keeps cassandra.sh's replication factor of 1.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
read -r -a addrs <<<"${CLUSTER_ADDRS:-127.0.1.1 127.0.1.2 127.0.1.3}"
name=${CLUSTER_NAME:-cqlguard-cluster}
heap=${CLUSTER_HEAP:-768M}
ring_delay=${CLUSTER_RING_DELAY_MS:-5000}
allocation_rf=${CLUSTER_TOKEN_ALLOCATION_RF:-1}
auth_cache_validity=${CLUSTER_AUTH_CACHE_VALIDITY:-1h}
up_timeout=${CLUSTER_START_TIMEOUT:-180}
cache=${CQLGUARD_CACHE:-$HOME/.cache/cqlguard}
root_data=${CLUSTER_DATA:-$cache/cluster}
storage_port=7000
port=9042

die() { echo "cluster.sh: $*" >&2; exit 1; }

((${#addrs[@]} > 0)) || die "CLUSTER_ADDRS names no node"

# node i cmd...: runs cassandra.sh cmd for the i-th node.
node() {
  local i=$1
  shift
  # A node retries setting up the superuser every superuser_setup_delay_ms
  # until the nodes it knows are up: cassandra.sh's 0 would spin, writing
  # millions of log lines while the others start.
  local jvm=-Dcassandra.superuser_setup_delay_ms=1000
  ((i == 0)) || jvm+=" -Dcassandra.ring_delay_ms=$ring_delay"
  CASSANDRA_ADDR=${addrs[$i]} \
    CASSANDRA_PORT=$port \
    CASSANDRA_STORAGE_PORT=$storage_port \
    CASSANDRA_JMX_PORT= \
    CASSANDRA_HEAP=$heap \
    CASSANDRA_DATA=$root_data/${addrs[$i]} \
    CASSANDRA_CLUSTER_NAME=$name \
    CASSANDRA_SEEDS=${addrs[0]}:$storage_port \
    CASSANDRA_TOKEN_ALLOCATION_RF=$allocation_rf \
    CASSANDRA_AUTH_CACHE_VALIDITY=$auth_cache_validity \
    CASSANDRA_READY=port \
    CASSANDRA_JVM_OPTS="$jvm" \
    bash "$here/cassandra.sh" "$@"
}

# lock serialises start and stop between concurrent callers.
lock() {
  mkdir -p "$(dirname "$root_data")"
  exec 8>"$root_data.cluster-sh.lock"
  flock -w 600 8 || die "another cluster.sh has held $root_data.cluster-sh.lock for 10 minutes; giving up"
}

# all_up: every node answers and sees every node UP.
all_up() {
  local i
  for i in "${!addrs[@]}"; do
    node "$i" ring "${#addrs[@]}" 2>/dev/null || return 1
  done
}

start() {
  lock
  all_up && return 0
  local t0=$SECONDS i
  # One after another: a node joins while no other is joining, and the
  # first, the seed, is up before the others look for it. Each is started
  # once its native port opens, not its logins work: the superuser's role
  # lives on one node, maybe one not started yet.
  for i in "${!addrs[@]}"; do
    node "$i" start
  done
  local deadline=$((SECONDS + up_timeout))
  for i in "${!addrs[@]}"; do
    until node "$i" ring "${#addrs[@]}" 2>/dev/null; do
      if ((SECONDS >= deadline)); then
        node "$i" ring "${#addrs[@]}" || true
        die "${addrs[$i]} does not see all ${#addrs[@]} nodes UP within $up_timeout s; logs: $root_data/*/cassandra.log"
      fi
      sleep 1
    done
  done
  echo "cluster $name of ${#addrs[@]} nodes (${addrs[*]}) up in $((SECONDS - t0)) s, data $root_data"
}

stop() {
  case "${1:-}" in
    "" | --wipe) ;;
    *) die "usage: cluster.sh stop [--wipe]" ;;
  esac
  lock
  # Together: each takes seconds to drain (5 to 15 on two cores), and one
  # after another took longer than all at once.
  local i pids=() failed=0
  for i in "${!addrs[@]}"; do
    node "$i" stop "$@" &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || failed=1; done
  ((failed == 0)) || die "stopping a node failed"
  if [ "${1:-}" = --wipe ]; then rm -rf "$root_data"; fi
}

status() {
  local i ok=0
  for i in "${!addrs[@]}"; do
    if node "$i" ring "${#addrs[@]}"; then
      echo "${addrs[$i]}:$port up, sees ${#addrs[@]} nodes UP"
    else
      ok=1
    fi
  done
  return $ok
}

case "${1:-}" in
  start) start ;;
  stop) shift; stop "$@" ;;
  status) status ;;
  *) die "usage: cluster.sh start|stop [--wipe]|status" ;;
esac
