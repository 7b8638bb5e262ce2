"""Log lines carry the execution context and never a registered secret."""

from __future__ import annotations

import json
import logging

import pytest

from noetl.host import logs


def test_json_lines_carry_context_and_mask_secrets(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure("INFO", "json")
    logs.register_secrets(["tok-very-secret-1", "abc"])  # too short to mask: would mangle text
    log = logging.getLogger("noetl.test")
    with logs.bound(execution_id="e-1", step="fetch"):
        log.warning("called with tok-very-secret-1 in %s", "headers", extra={"attempt": 2})
    try:
        raise ValueError("boom tok-very-secret-1")
    except ValueError:
        log.exception("failed")
    lines = [json.loads(x) for x in capsys.readouterr().err.strip().splitlines()]
    first, second = lines
    assert first["event"] == "called with *** in headers"
    assert (first["execution_id"], first["step"], first["attempt"]) == ("e-1", "fetch", 2)
    assert "tok-very-secret-1" not in json.dumps(second) and "***" in second["exception"]
    assert "execution_id" not in second
    logging.getLogger().handlers.clear()
