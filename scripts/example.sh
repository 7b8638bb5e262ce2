#!/usr/bin/env bash
# Sets up, then runs the example playbook on the embedded default (private nats-server, one
# server, one worker, nothing else).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec .venv/bin/noetl run examples/hello.yaml --payload '{"names": ["Ada", "Grace", "Linus"]}' "$@"
