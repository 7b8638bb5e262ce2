"""The chart against the rest of the repository: the commands it runs are ones the CLI accepts,
and every value is documented (`## @param` in values.yaml, a row in docs/helm.md)."""

from __future__ import annotations

import re
from typing import Any

import yaml

from noetl.cli.main import build_parser
from tests.helm.chart import (
    CHART_DIR,
    ROOT,
    container,
    manifests,
    named,
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
    assert (args.command, args.partitions, args.nats_url) == ("server", 4, env["NOETL_NATS_URL"])
    assert (args.http_port, args.http_host) == (8080, "0.0.0.0")


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
