#!/usr/bin/env bash
# Runs every fuzz target of the main module for a bounded time each
# (default 10s), after its committed seeds.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-10s}
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
    echo "fuzz $pkg $target ($fuzztime)"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" >/tmp/cqlguard-fuzz.log 2>&1 || { cat /tmp/cqlguard-fuzz.log; exit 1; }
  done
done
