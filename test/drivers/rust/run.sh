#!/usr/bin/env bash
# Runs a driver test client (driver_test unless named; limits_test floods a
# limited partition) with ScyllaDB's Rust driver, the `scylla` crate. Cargo
# builds both clients on first use from the versions in Cargo.lock (about a
# minute on two cores, plus downloading the crates) and rebuilds only when
# the sources or the lock file change. Settings come from the environment
# (see src/bin/*.rs); CARGO_BUILD_JOBS overrides the build's 2 jobs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
client="${1:-driver_test}"
case "$client" in
  driver_test|limits_test) ;;
  *) echo "$client: want driver_test or limits_test" >&2; exit 2 ;;
esac
cd "$here"
if ! command -v cargo >/dev/null; then
  # The driver needs a recent Rust (1.88 or later), newer than distributions
  # ship: install it with rustup, the toolchain's own installer.
  if [ ! -x "$HOME/.cargo/bin/cargo" ]; then
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs |
      sh -s -- -y --profile minimal --no-modify-path >/dev/null
  fi
  export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! out=$(cargo build --locked --quiet --bins -j "${CARGO_BUILD_JOBS:-2}" 2>&1); then
  echo "$out" >&2
  exit 1
fi
exec "$here/target/debug/$client"
