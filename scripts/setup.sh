#!/usr/bin/env bash
# Creates .venv and installs noetl (editable). Safe to run again.
#   scripts/setup.sh              noetl alone (what the example needs)
#   scripts/setup.sh test,helm    plus the test tools and the chart-test packages (~350 MB)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
EXTRAS=${1:-}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
if [ -n "$EXTRAS" ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[$EXTRAS]"
else
  .venv/bin/python -m pip install -q --disable-pip-version-check -e .
fi
