#!/usr/bin/env bash
# Sets up, then runs lint, the type checker, the whole test suite and the conformance suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh test,helm
export NOETL_TEST_PG_DSN=${NOETL_TEST_PG_DSN:-postgresql://postgres@127.0.0.1:5432/test}
# PostgreSQL runs on this kind of machine; start it when it is down (best effort elsewhere).
if command -v pg_ctlcluster >/dev/null 2>&1 && ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start || true
fi
.venv/bin/ruff check .
.venv/bin/mypy                      # [tool.mypy] in pyproject.toml: files, strictness, exceptions
.venv/bin/python scripts/any_count.py   # functions with Any in their signature, per package (a report)
status=0
report=$(mktemp -d)
trap 'rm -rf "$report"' EXIT
.venv/bin/python -m pytest -q -p no:cacheprovider --junitxml="$report/pytest.xml" || status=$?
# tested minimum versions: the lowest direct dependencies pyproject allows, in a throwaway venv
if [ "${CI:-}" = true ] || [ "${NOETL_MIN_DEPS:-}" = 1 ]; then
  ./scripts/min_deps.sh || status=$?
fi
CONFORMANCE=${CONFORMANCE:-../shared/conformance/run.py}
if [ -f "$CONFORMANCE" ]; then
  PATH="$PWD/.venv/bin:$PATH" .venv/bin/python "$CONFORMANCE" --known-failures conformance-known-failures.txt \
    | tee "$report/conformance.txt" || status=$?
else
  echo "conformance runner not found at $CONFORMANCE: skipped"
fi
# one closing line for everything that ran: the test suite and the conformance cases
.venv/bin/python scripts/totals.py "$report/pytest.xml" "$report/conformance.txt" || status=$?
exit $status
