"""One-shot commands against a NATS that is not there, or with bad input: bounded in time, one
line on stderr, no traceback."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from noetl.host.natsserver import free_port

ROOT = Path(__file__).resolve().parents[2]


def _noetl(*args: str, timeout: float = 40) -> tuple[int, str, float]:
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "noetl.cli.main", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
    )
    return p.returncode, p.stderr, time.monotonic() - t0


@pytest.mark.parametrize(
    "args",
    [
        ("workers",),
        ("status", "0" * 32),
        ("exec", "--path", "x/y", "--timeout", "5"),
        ("exec", "--path", "x/y", "--wait", "--timeout", "5"),
        ("catalog", "list"),
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_an_unreachable_nats_is_one_line_within_seconds(args: tuple[str, ...]) -> None:
    dead = f"nats://127.0.0.1:{free_port()},nats://127.0.0.1:{free_port()}"
    rc, err, took = _noetl(*args, "--nats-url", dead)
    assert rc == 1, (rc, err)
    assert "Traceback" not in err and "cannot reach NATS" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert took < 20, f"took {took:.1f} s"


def test_catalog_register_of_an_invalid_or_missing_file_says_which(
    nats_server: object, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: b}\nworkflow: []\n")
    url = nats_server.url  # type: ignore[attr-defined]
    rc, err, _ = _noetl("catalog", "register", str(bad), str(tmp_path / "missing.yaml"), "--nats-url", url)
    assert rc == 2 and "Traceback" not in err, err
    assert f"{bad}:" in err and "missing.yaml:0: <file>: cannot read" in err, err


def test_an_api_open_to_the_network_without_a_token_is_refused(nats_server: object) -> None:
    """Secure by default: before, `--http-host 0.0.0.0` served the whole API to anyone."""
    import os

    env_token = os.environ.pop("NOETL_API_TOKEN", None)
    try:
        url = nats_server.url  # type: ignore[attr-defined]
        rc, err, took = _noetl("server", "--http-host", "0.0.0.0", "--http-port", "0", "--nats-url", url)
    finally:
        if env_token is not None:
            os.environ["NOETL_API_TOKEN"] = env_token
    assert rc == 2 and "without a token" in err and "--insecure" in err and "Traceback" not in err, err
    assert took < 30


def test_exposure_rules() -> None:
    from noetl.dsl.errors import DeploymentError
    from noetl.server.api.server import check_exposure

    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        check_exposure(host, None, False)
    check_exposure("0.0.0.0", "a-token", False)
    check_exposure("0.0.0.0", None, True)
    with pytest.raises(DeploymentError, match="NOETL_API_TOKEN"):
        check_exposure("0.0.0.0", None, False)
    with pytest.raises(DeploymentError):
        check_exposure("10.1.2.3", None, False)
