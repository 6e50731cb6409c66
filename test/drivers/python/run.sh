#!/usr/bin/env bash
# Runs a driver test script (driver_test.py unless named) with the DataStax
# Python driver, or with ScyllaDB's fork when CQL_PY_DRIVER=scylla, from a
# local virtualenv per driver, created on first use. Both install the
# `cassandra` module, hence two virtualenvs. Settings come from the
# environment (see the scripts).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
script="${1:-driver_test.py}"
case "${CQL_PY_DRIVER:-datastax}" in
  datastax) venv="$here/.venv" req="$here/requirements.txt" ;;
  scylla)   venv="$here/.venv-scylla" req="$here/requirements-scylla.txt" ;;
  *) echo "CQL_PY_DRIVER=$CQL_PY_DRIVER: want datastax or scylla" >&2; exit 2 ;;
esac
if [ ! -f "$venv/.installed" ] || ! cmp -s "$req" "$venv/.installed"; then
  python3 -m venv "$venv"
  # The driver's C extensions take minutes to build and are not needed here.
  CASS_DRIVER_NO_CYTHON=1 CASS_DRIVER_NO_EXTENSIONS=1 "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
  cp "$req" "$venv/.installed"
fi
exec "$venv/bin/python" "$here/$script"
