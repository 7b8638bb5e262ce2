"""What `noetl run` of a noop playbook imports (issue 29: the whole process ≤ 1.5 times its floor).

Each heavy package below cost a one-step run tens of milliseconds when something imported it
eagerly; the run does not use them, so a change that brings one back fails here rather than
showing up, hours later, as a slower start-up in the bench.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support import loaded_by

# never needed by a noop run: task kinds, the HTTP API, the cron parser, urllib's HTTP client,
# the settings model (every setting of a noop run is at its default: ``settings.DEFAULTS``), the
# whole playbook document model (the run's is built for its one kind: ``dsl.document_variants``),
# cryptography (the credentials' cipher is made when a credential is first stored or read), the
# browser opener (--ui only)
HEAVY = (
    "duckdb",
    "asyncpg",
    "httpx",
    "uvicorn",
    "starlette",
    "croniter",
    "urllib.request",
    "pydantic_settings",
    "noetl.events.settings_model",
    "noetl.dsl.document",
    "cryptography",
    "webbrowser",
)

RUN = """
import json, sys
from noetl.cli.main import main
rc = main(["run", sys.argv[1]])
print(json.dumps({"rc": rc, "loaded": [m for m in sys.argv[2:] if m in sys.modules]}))
"""

NOOP = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: noop-imports, path: tests/noop_imports}
workflow:
  - step: start
    tool:
      - {name: t, kind: noop, result: ok}
"""


def test_noop_run_imports_no_heavy_module(tmp_path: Path) -> None:
    playbook = tmp_path / "noop.yaml"
    playbook.write_text(NOOP)
    p = subprocess.run(
        [sys.executable, "-c", RUN, str(playbook), *HEAVY], capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out == {"rc": 0, "loaded": []}, p.stderr[-2000:]


def test_private_nats_server_imports_no_settings_model() -> None:
    """The bench's start-up floor starts one with its fsync interval given: the floor is nats-py
    and a nats-server, so nothing of ours may pull pydantic or the playbook validator into it."""
    code = "from noetl.host.natsserver import NatsServer\nwith NatsServer(sync_interval='') as srv:\n    pass"
    assert loaded_by(code, ("pydantic", "noetl.dsl.validate", "urllib.request")) == []


def test_building_the_parser_imports_no_validator() -> None:
    """Every command builds the whole parser first; the validator (pydantic, jinja2, yaml) loads
    in the commands that validate, after ``noetl run`` has held the garbage collector off."""
    code = "from noetl.cli.parser import build_parser\nbuild_parser().parse_args(['run', 'x.yaml'])"
    assert loaded_by(code, ("pydantic", "noetl.dsl.validate", "jinja2")) == []
