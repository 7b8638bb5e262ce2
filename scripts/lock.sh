#!/usr/bin/env bash
# Writes requirements.lock: every package the image installs (`noetl-jetstream[all]`, the
# Dockerfile's default EXTRAS), pinned with hashes, for the image's Python (3.11, Linux).
#   scripts/lock.sh            regenerate after changing pyproject.toml's dependencies
#   scripts/lock.sh --upgrade  take the newest versions pyproject allows
# tests/unit/test_lock.py checks the lock pins every direct dependency within pyproject's bounds.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || ./scripts/setup.sh
[ -x .venv/bin/uv ] || .venv/bin/python -m pip install -q --disable-pip-version-check uv
.venv/bin/uv pip compile pyproject.toml --extra all \
  --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
  --generate-hashes --no-header --annotation-style line --quiet \
  "$@" -o requirements.lock.tmp
{
  echo "# The image's dependencies (noetl-jetstream[all]), pinned with hashes: written by scripts/lock.sh"
  echo "# from pyproject.toml, installed by the Dockerfile with pip --require-hashes. Do not edit by hand."
  cat requirements.lock.tmp
} > requirements.lock
rm requirements.lock.tmp
echo "requirements.lock: $(grep -c '^[a-z0-9]' requirements.lock) packages"
