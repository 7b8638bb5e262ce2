#!/usr/bin/env bash
# Creates .venv and installs noetl (editable) with its test extras. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]"
