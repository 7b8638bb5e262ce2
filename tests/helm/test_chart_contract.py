"""The chart against the rest of the repository: the commands it runs are ones the CLI accepts, the
environment it sets is what the processes read, and every value is documented (`## @param` in
values.yaml, a row in docs/helm.md with the same description and default)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from noetl.cli.main import build_parser
from noetl.events import streams, subjects
from noetl.server import leases
from tests.helm.chart import (
    CHART_DIR,
    ROOT,
    container,
    manifests,
    named,
    plain_env,
    production_values,
    render,
    worker_pools,
)

PARAM = re.compile(r"^\s*## @param (\S+) ", re.M)


def _expand(args: list[str], env: dict[str, str]) -> list[str]:
    """Kubernetes' $(VAR) expansion of container args."""
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in args]


def test_rendered_commands_parse_with_the_cli() -> None:
    docs = manifests(render(production_values()))
    env = named(docs, "ConfigMap", "noetl")["data"]
    parser = build_parser()
    for pool, deployment in worker_pools(docs).items():
        args = parser.parse_args(_expand(container(deployment)["args"], env))
        assert (args.command, args.pool, args.nats_url) == ("worker", pool, env["NOETL_NATS_URL"])
    args = parser.parse_args(_expand(container(named(docs, "Deployment", "noetl-server"))["args"], env))
    assert (args.command, args.partitions, args.nats_url) == ("server", 12, env["NOETL_NATS_URL"])
    assert (args.http_port, args.http_host) == (8080, "0.0.0.0")


@pytest.mark.parametrize(
    ("values", "replicas", "ttl"),
    [({}, 1, 6.0), ({"nats": {"enabled": True}, "server": {"leaseTtlSeconds": 10}}, 3, 10.0)],
    ids=["default", "bundled-nats"],
)
def test_the_environment_is_what_the_processes_read(
    values: dict[str, Any], replicas: int, ttl: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = manifests(render(values))
    server = named(docs, "Deployment", "noetl-server")
    for deployment in [server, *worker_pools(docs).values()]:
        env = plain_env(docs, deployment)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        args = build_parser().parse_args(_expand(container(deployment)["args"], env))
        assert args.replicas == replicas  # --replicas defaults to NOETL_REPLICAS
        assert streams.replicas_wanted() == replicas
        for name in env:
            monkeypatch.delenv(name)
    for name, value in plain_env(docs, server).items():
        monkeypatch.setenv(name, value)
    assert leases.lease_ttl() == ttl


def test_the_default_partition_count_is_the_servers() -> None:
    defaults = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    assert defaults["server"]["partitions"] == subjects.DEFAULT_PARTITIONS


def _leaves(values: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for k, v in values.items():
        path = f"{prefix}{k}"
        out.extend(_leaves(v, path + ".") if isinstance(v, dict) and v else [path])
    return out


def _documented() -> list[str]:
    return PARAM.findall((CHART_DIR / "values.yaml").read_text())


def test_every_value_has_a_param_comment() -> None:
    params = set(_documented())
    defaults = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    undocumented = [
        leaf for leaf in _leaves(defaults) if not any(leaf == p or leaf.startswith(p + ".") for p in params)
    ]
    assert undocumented == []
    for p in params:  # and every comment names a real value
        node: Any = defaults
        for part in p.split("."):
            assert isinstance(node, dict) and part in node, f"@param {p} is not in values.yaml"
            node = node[part]


def test_every_param_is_in_the_docs_table() -> None:
    docs = (ROOT / "docs" / "helm.md").read_text()
    assert [p for p in _documented() if f"| `{p}` |" not in docs] == []


def _default_cell(value: Any) -> str:
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value is None:
        return "`null`"
    if value == "":
        return '`""`'
    if isinstance(value, (dict, list)):
        return "see values.yaml" if value else f"`{yaml.safe_dump(value, default_flow_style=True).strip()}`"
    return f"`{value}`"


def test_the_docs_table_says_what_values_yaml_says() -> None:
    """Each row of docs/helm.md carries the `## @param` description and the default of values.yaml."""
    text = (CHART_DIR / "values.yaml").read_text()
    defaults = yaml.safe_load(text)
    rows: dict[str, str] = {}
    for line in (ROOT / "docs" / "helm.md").read_text().splitlines():
        if line.startswith("| `"):  # the values table comes first; later tables name values too
            rows.setdefault(line.split(" | ")[0].removeprefix("| `").removesuffix("`"), line)
    wrong = []
    for param, description in re.findall(r"^\s*## @param (\S+) (.*)$", text, re.M):
        node: Any = defaults
        for part in param.split("."):
            node = node[part]
        want = f"| `{param}` | {description} | {_default_cell(node)} |"
        if rows.get(param) != want:
            wrong.append((rows.get(param), want))
    assert wrong == []
