#!/usr/bin/env bash
# Runs driver_test.py with the DataStax Python driver from a local virtualenv,
# creating it on first use. Settings come from the environment (see the script).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv="$here/.venv"
if [ ! -f "$venv/.installed" ] || ! cmp -s "$here/requirements.txt" "$venv/.installed"; then
  python3 -m venv "$venv"
  # The driver's C extensions take minutes to build and are not needed here.
  CASS_DRIVER_NO_CYTHON=1 CASS_DRIVER_NO_EXTENSIONS=1 "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements.txt"
  cp "$here/requirements.txt" "$venv/.installed"
fi
exec "$venv/bin/python" "$here/driver_test.py" "$@"
