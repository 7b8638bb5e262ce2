"""Rendering deploy/helm/noetl the way `helm template` does, and picking manifests out of it.

The real Helm v4 SDK renders (helm-python-sdk), so what the tests see is what a cluster gets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

helm = pytest.importorskip("helm_python", reason="chart tests need the `helm` extra: pip install '.[helm]'")

ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = ROOT / "deploy" / "helm" / "noetl"
PRODUCTION_VALUES = Path(__file__).with_name("values-production.yaml")
KUBE_VERSION = "1.30.0"
NOTES = "noetl/templates/NOTES.txt"


def production_values() -> dict[str, Any]:
    return yaml.safe_load(PRODUCTION_VALUES.read_text())


def render(
    values: dict[str, Any] | None = None,
    *,
    name: str = "noetl",
    namespace: str = "noetl",
    chart_dir: Path = CHART_DIR,
) -> dict[str, str]:
    """Template path -> rendered text, NOTES.txt included (`helm template` of an install)."""
    with helm.Chart.load(chart_dir) as chart:
        return chart.render(values or {}, name=name, namespace=namespace, is_install=True)


def manifests(out: dict[str, str]) -> list[dict[str, Any]]:
    """Every Kubernetes object of a render, in template order."""
    docs: list[dict[str, Any]] = []
    for path in sorted(out):
        if path.endswith(".yaml"):
            docs.extend(d for d in yaml.safe_load_all(out[path]) if d)
    return docs


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def named(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    for d in of_kind(docs, kind):
        if d["metadata"]["name"] == name:
            return d
    raise AssertionError(f"no {kind} {name!r}; have {[d['metadata']['name'] for d in of_kind(docs, kind)]}")


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    return c


def env_of(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in c.get("env", [])}


def plain_env(docs: list[dict[str, Any]], deployment: dict[str, Any]) -> dict[str, str]:
    """The environment a container starts with, as Kubernetes builds it: every ConfigMap of
    `envFrom`, then `env` (its plain values; those read from Secrets are left out)."""
    c = container(deployment)
    env: dict[str, str] = {}
    for source in c.get("envFrom", []):
        env.update(named(docs, "ConfigMap", source["configMapRef"]["name"])["data"])
    env.update({e["name"]: e["value"] for e in c.get("env", []) if "value" in e})
    return env


def worker_pools(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Pool name -> its worker Deployment."""
    return {
        d["metadata"]["labels"]["noetl.io/pool"]: d
        for d in of_kind(docs, "Deployment")
        if d["metadata"]["labels"].get("app.kubernetes.io/component") == "worker"
    }


def arg_after(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]
