#!/usr/bin/env bash
# Runs a test client (driver_test unless named; limits_test floods a partition
# the proxy refuses some requests of) with the Node.js cassandra-driver,
# installing it from the lock file (npm ci) when node_modules is missing or was
# installed from another lock file. Settings come from the environment (see the
# clients).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
client="${1:-driver_test}"
case "$client" in
  driver_test|limits_test) ;;
  *) echo "$client: want driver_test or limits_test" >&2; exit 2 ;;
esac
cd "$here"
stamp=node_modules/.cqlguard-installed
if [ ! -d node_modules/cassandra-driver ] || ! cmp -s package-lock.json "$stamp"; then
  npm ci --silent --no-audit --no-fund >/dev/null
  cp package-lock.json "$stamp"
fi
exec node "$client.js"
