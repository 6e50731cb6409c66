#!/usr/bin/env bash
# Runs driver_test.js with the DataStax Node.js driver, installing it from the
# lock file on first use. Settings come from the environment (see the script).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
if [ ! -d node_modules/cassandra-driver ]; then
  npm ci --silent --no-audit --no-fund >/dev/null
fi
exec node driver_test.js "$@"
