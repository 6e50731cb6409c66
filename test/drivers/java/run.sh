#!/usr/bin/env bash
# Runs a test client with the Apache Cassandra Java driver 4.x: DriverTest
# (the default, or "driver"), LimitsTest ("limits") or HotReadsTest
# ("hotreads"). Builds them with Maven first when target/ is missing or was
# built from another pom.xml or other sources; every version, the driver's
# dependencies too, is pinned in pom.xml. Installs Maven and a JDK with
# apt-get when missing. Settings come from the environment (see the classes).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
case "${1:-driver}" in
  driver) main=cqlguard.drivertest.DriverTest ;;
  limits) main=cqlguard.drivertest.LimitsTest ;;
  hotreads) main=cqlguard.drivertest.HotReadsTest ;;
  *) echo "run.sh: $1: want driver, limits or hotreads" >&2; exit 2 ;;
esac
if ! command -v mvn >/dev/null || ! command -v javac >/dev/null; then
  echo "run.sh: installing maven and openjdk-17-jdk-headless with apt-get" >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven openjdk-17-jdk-headless >/dev/null
fi
stamp=target/.cqlguard-built
sum=$(find pom.xml src -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$sum" ]; then
  rm -rf target
  log=$(mktemp)
  if ! mvn -q -B compile dependency:copy-dependencies >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "run.sh: the Maven build failed" >&2
    exit 1
  fi
  rm -f "$log"
  echo "$sum" >"$stamp"
fi
exec java -XX:+UseSerialGC -cp "target/classes:target/lib/*" "$main"
