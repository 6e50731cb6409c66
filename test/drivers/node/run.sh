#!/usr/bin/env bash
# Runs driver_test.js with the Node.js cassandra-driver, installing it from the
# lock file (npm ci) when node_modules is missing or was installed from another
# lock file. Settings come from the environment (see driver_test.js).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
stamp=node_modules/.cqlguard-installed
if [ ! -d node_modules/cassandra-driver ] || ! cmp -s package-lock.json "$stamp"; then
  npm ci --silent --no-audit --no-fund >/dev/null
  cp package-lock.json "$stamp"
fi
exec node driver_test.js "$@"
