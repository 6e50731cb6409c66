#!/usr/bin/env bash
# Runs a test client with ScyllaDB's fork of gocql: "driver" (the default)
# or "limits" (see main.go). Builds it first into bin/ with the go command,
# which downloads the versions go.mod and go.sum pin and rebuilds only what
# changed. Settings come from the environment (see the clients).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
client="${1:-driver}"
case "$client" in
  driver|limits) ;;
  *) echo "run.sh: $client: want driver or limits" >&2; exit 2 ;;
esac
cd "$here"
# A module of its own, outside the repository's go.work.
export GOWORK=off
if ! out=$(go build -o bin/scyllagocql . 2>&1); then
  echo "$out" >&2
  exit 1
fi
exec "$here/bin/scyllagocql" "$client"
