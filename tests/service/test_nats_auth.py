"""Services connect to a secured NATS the way the Helm chart configures them: user/password and
TLS with a private CA, from NOETL_NATS_* environment variables."""

from __future__ import annotations

import datetime as dt
import ipaddress
import uuid
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from noetl.client.run import run_and_wait
from noetl.events.bus import connect
from noetl.events.nats_port import NatsBus
from noetl.host.natsserver import NatsServer
from noetl.server.service import Server
from noetl.worker.service import Worker

ONE = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: secured, path: tests/secured}
workflow:
  - step: start
    tool: {kind: noop, result: secured}
"""


async def _run_one(url: str) -> dict:  # type: ignore[type-arg]
    nc = await connect(url, name="secured-test")
    server, worker = Server(NatsBus(nc)), Worker(NatsBus(nc), concurrency=4)
    await server.start()
    await worker.start()
    try:
        return await run_and_wait(NatsBus(nc), {"request_id": uuid.uuid4().hex, "playbook": ONE}, timeout=30)
    finally:
        await worker.stop(drain=False)
        await server.stop()
        await nc.close()


async def test_user_password_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with NatsServer(extra_args=["--user", "noetl", "--pass", "s3cret-pw"]) as ns:
        monkeypatch.setenv("NOETL_NATS_USER", "noetl")
        monkeypatch.setenv("NOETL_NATS_PASSWORD", "s3cret-pw")
        out = await _run_one(ns.url)
    assert out["result"] == "secured"


def _cert_pair(tmp: Path) -> tuple[Path, Path, Path]:
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "noetl test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(2)
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = tmp / "ca.pem", tmp / "server.pem", tmp / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


async def test_tls_with_private_ca_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca, cert, key = _cert_pair(tmp_path)
    with NatsServer(extra_args=["--tls", "--tlscert", str(cert), "--tlskey", str(key)]) as ns:
        monkeypatch.setenv("NOETL_NATS_TLS_CA", str(ca))
        out = await _run_one(ns.url.replace("nats://", "tls://"))
    assert out["result"] == "secured"
