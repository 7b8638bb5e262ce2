"""The chart's defaults are a highly available install (docs/helm.md, "A highly available install"),
and the values that cannot work are refused at render time."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helm.chart import (
    CHART_DIR,
    NOTES,
    arg_after,
    container,
    env_of,
    helm,
    manifests,
    named,
    of_kind,
    plain_env,
    render,
    worker_pools,
)

HOSTNAME = "kubernetes.io/hostname"


def _server(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return named(docs, "Deployment", "noetl-server")


def _budgets(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in of_kind(docs, "PodDisruptionBudget")}


def _spread_term(deployment: dict[str, Any]) -> dict[str, Any]:
    """The one preferred anti-affinity term of a Deployment's pods."""
    anti = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert set(anti) == {"preferredDuringSchedulingIgnoredDuringExecution"}  # never required
    (term,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    return term["podAffinityTerm"]


# --- the server --------------------------------------------------------------------------------


def test_the_default_server_is_two_rolling_replicas_over_eight_partitions() -> None:
    docs = manifests(render())
    server = _server(docs)
    assert server["spec"]["replicas"] == 2
    assert server["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    spec = server["spec"]["template"]["spec"]
    assert spec["terminationGracePeriodSeconds"] == 30
    c = container(server)
    assert arg_after(c["args"], "--partitions") == "8"
    assert env_of(c)["NOETL_LEASE_TTL"] == {"name": "NOETL_LEASE_TTL", "value": "6"}


def test_server_values_reach_the_deployment() -> None:
    docs = manifests(
        render(
            {
                "server": {
                    "replicaCount": 3,
                    "partitions": 12,
                    "leaseTtlSeconds": 10,
                    "terminationGracePeriodSeconds": 45,
                    "strategy": {"rollingUpdate": {"maxUnavailable": 1, "maxSurge": "25%"}},
                }
            }
        )
    )
    server = _server(docs)
    assert server["spec"]["replicas"] == 3
    assert server["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 1, "maxSurge": "25%"}
    assert server["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 45
    c = container(server)
    assert arg_after(c["args"], "--partitions") == "12"
    assert env_of(c)["NOETL_LEASE_TTL"]["value"] == "10"
    for worker in worker_pools(docs).values():  # the lease TTL is the server's alone
        assert "NOETL_LEASE_TTL" not in plain_env(docs, worker)


def test_recreate_renders_no_rolling_update() -> None:
    server = _server(manifests(render({"server": {"strategy": {"type": "Recreate"}}})))
    assert server["spec"]["strategy"] == {"type": "Recreate"}


@pytest.mark.parametrize(("unavailable", "surge"), [(0, 0), ("0%", 0), (0, "0%")])
def test_a_rolling_update_that_cannot_progress_is_refused(unavailable: Any, surge: Any) -> None:
    rolling = {"maxUnavailable": unavailable, "maxSurge": surge}
    with pytest.raises(helm.HelmRenderError, match="maxUnavailable and maxSurge cannot both be 0"):
        render({"server": {"strategy": {"rollingUpdate": rolling}}})


def test_server_replicas_spread_over_nodes_by_default() -> None:
    docs = manifests(render())
    server = _server(docs)
    term = _spread_term(server)
    assert term["topologyKey"] == HOSTNAME
    selector = term["labelSelector"]["matchLabels"]
    assert selector == server["spec"]["selector"]["matchLabels"]
    assert selector["app.kubernetes.io/component"] == "server"  # not repelled by the workers
    assert selector.items() <= server["spec"]["template"]["metadata"]["labels"].items()


def test_a_configured_affinity_replaces_the_default_spread() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["ctl"]}]}
                ]
            }
        }
    }
    docs = manifests(render({"server": {"affinity": affinity}, "worker": {"affinity": affinity}}))
    assert _server(docs)["spec"]["template"]["spec"]["affinity"] == affinity
    assert worker_pools(docs)["default"]["spec"]["template"]["spec"]["affinity"] == affinity


# --- the workers -------------------------------------------------------------------------------


def test_each_pool_defaults_to_two_workers_spread_over_nodes() -> None:
    docs = manifests(render({"worker": {"pools": [{"name": "default"}, {"name": "etl", "replicaCount": 1}]}}))
    pools = worker_pools(docs)
    assert {p: d["spec"]["replicas"] for p, d in pools.items()} == {"default": 2, "etl": 1}
    for pool, deployment in pools.items():
        term = _spread_term(deployment)
        assert term["topologyKey"] == HOSTNAME
        assert term["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
        assert term["labelSelector"]["matchLabels"]["noetl.io/pool"] == pool
    assert worker_pools(manifests(render()))["default"]["spec"]["replicas"] == 2  # the values.yaml pool


# --- disruption budgets ------------------------------------------------------------------------


def test_default_budgets_keep_a_server_and_evict_one_worker_at_a_time() -> None:
    docs = manifests(render())
    budgets = _budgets(docs)
    assert set(budgets) == {"noetl-server", "noetl-worker-default"}
    server_pdb = budgets["noetl-server"]["spec"]
    assert server_pdb["minAvailable"] == 1 and "maxUnavailable" not in server_pdb
    assert server_pdb["selector"]["matchLabels"] == _server(docs)["spec"]["selector"]["matchLabels"]
    pool_pdb = budgets["noetl-worker-default"]["spec"]
    assert pool_pdb["maxUnavailable"] == 1
    assert (
        pool_pdb["selector"]["matchLabels"]
        == worker_pools(docs)["default"]["spec"]["selector"]["matchLabels"]
    )


def test_one_server_gets_no_budget_that_would_block_drains() -> None:
    out = render({"server": {"replicaCount": 1}})
    assert "noetl-server" not in _budgets(manifests(out))
    assert "WARNING: server.replicaCount is 1" in out[NOTES]
    assert "WARNING: server.replicaCount" not in render()[NOTES]


def test_a_server_budget_that_forbids_every_eviction_is_refused() -> None:
    with pytest.raises(
        helm.HelmRenderError, match=r"minAvailable \(3\) must be less than server.replicaCount \(3\)"
    ):
        render({"server": {"replicaCount": 3, "podDisruptionBudget": {"minAvailable": 3}}})
    budgets = _budgets(
        manifests(render({"server": {"replicaCount": 3, "podDisruptionBudget": {"minAvailable": 2}}}))
    )
    assert budgets["noetl-server"]["spec"]["minAvailable"] == 2


def test_budgets_can_be_turned_off() -> None:
    docs = manifests(render({"server": {"podDisruptionBudget": {"enabled": False}}}))
    assert set(_budgets(docs)) == {"noetl-worker-default"}
    docs = manifests(render({"podDisruptionBudget": {"enabled": False}}))
    assert set(_budgets(docs)) == {"noetl-server"}


# --- JetStream replication ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "replicas"),
    [
        ({}, "1"),
        ({"jetstream": {"replicas": None}}, "1"),
        ({"jetstream": {"replicas": 3}}, "3"),
        ({"nats": {"enabled": True}}, "3"),
        ({"nats": {"enabled": True}, "jetstream": {"replicas": 1}}, "1"),
        ({"nats": {"enabled": True, "config": {"cluster": {"replicas": 5}}}}, "3"),
        (
            {"nats": {"enabled": True, "config": {"cluster": {"replicas": 5}}}, "jetstream": {"replicas": 5}},
            "5",
        ),
        ({"nats": {"enabled": True, "config": {"cluster": {"replicas": 2}}}}, "2"),
        ({"nats": {"enabled": True, "config": {"cluster": {"enabled": False}}}}, "1"),
    ],
    ids=[
        "external",
        "external-null",
        "external-3",
        "bundled",
        "bundled-1",
        "bundled-5-servers",
        "bundled-5-servers-5",
        "bundled-2-servers",
        "bundled-unclustered",
    ],
)
def test_noetl_replicas_reaches_the_server_and_every_worker(values: dict[str, Any], replicas: str) -> None:
    docs = manifests(render({**values, "worker": {"pools": [{"name": "default"}, {"name": "etl"}]}}))
    deployments = [_server(docs), *worker_pools(docs).values()]
    assert len(deployments) == 3
    for deployment in deployments:
        assert plain_env(docs, deployment)["NOETL_REPLICAS"] == replicas


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"jetstream": {"replicas": 5}},
            "jetstream.replicas is 5 but the bundled NATS cluster has 3 server(s)",
        ),
        (
            {"jetstream": {"replicas": 3}, "nats": {"config": {"cluster": {"enabled": False}}}},
            "jetstream.replicas is 3 but the bundled NATS cluster has 1 server(s)",
        ),
        (
            {"jetstream": {"replicas": 3}, "nats": {"config": {"cluster": {"replicas": 2}}}},
            "jetstream.replicas is 3 but the bundled NATS cluster has 2 server(s)",
        ),
    ],
)
def test_more_copies_than_bundled_nats_servers_is_refused(values: dict[str, Any], message: str) -> None:
    nats = {"enabled": True, **values.pop("nats", {})}
    with pytest.raises(helm.HelmRenderError) as err:
        render({**values, "nats": nats})
    assert message in str(err.value)


def test_an_external_nats_is_not_checked_but_the_notes_say_what_it_needs() -> None:
    notes = render({"jetstream": {"replicas": 5}})[NOTES]
    assert "keeps 5 copies" in notes
    assert "needs at least 5 JetStream servers: the chart cannot check it" in notes


def test_an_external_nats_may_be_a_list_of_urls() -> None:
    url = "nats://n0.nats:4222,tls://n1.nats:4222,nats://n2.nats:4222"
    docs = manifests(render({"nats": {"url": url}}))
    assert named(docs, "ConfigMap", "noetl")["data"]["NOETL_NATS_URL"] == url


# --- the bundled NATS cluster ------------------------------------------------------------------


def test_the_bundled_nats_values_are_a_spread_3_node_jetstream_cluster() -> None:
    nats = yaml.safe_load((CHART_DIR / "values.yaml").read_text())["nats"]
    assert nats["enabled"] is False
    config = nats["config"]
    assert config["cluster"] == {"enabled": True, "replicas": 3}
    assert config["jetstream"]["enabled"] is True
    assert config["jetstream"]["fileStore"]["enabled"] is True
    assert config["jetstream"]["memoryStore"]["enabled"] is False
    spread = nats["podTemplate"]["topologySpreadConstraints"]
    assert spread == {HOSTNAME: {"maxSkew": 1, "whenUnsatisfiable": "ScheduleAnyway"}}


@pytest.fixture(scope="module")
def chart_with_nats(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart with a stand-in for the official NATS chart in charts/ (which `helm dependency
    update` would fetch): it renders the values it receives, in the official chart's layout."""
    root = tmp_path_factory.mktemp("chart") / "noetl"
    shutil.copytree(CHART_DIR, root, ignore=shutil.ignore_patterns("charts"))
    sub = root / "charts" / "nats"
    (sub / "templates").mkdir(parents=True)
    (sub / "Chart.yaml").write_text("apiVersion: v2\nname: nats\nversion: 1.2.0\n")
    defaults = {  # the official chart 1.x: a single server, JetStream off, unless told otherwise
        "config": {
            "cluster": {"enabled": False, "port": 6222, "replicas": 3},
            "jetstream": {
                "enabled": False,
                "fileStore": {"enabled": True, "pvc": {"enabled": True, "size": "10Gi"}},
            },
        },
        "podTemplate": {"topologySpreadConstraints": {}},
    }
    (sub / "values.yaml").write_text(yaml.safe_dump(defaults))
    (sub / "templates" / "values.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: nats-values\n"
        "data:\n  values.json: {{ .Values | toJson | quote }}\n"
    )
    return root


def _nats_values(out: dict[str, str]) -> dict[str, Any]:
    return json.loads(named(manifests(out), "ConfigMap", "nats-values")["data"]["values.json"])


def test_the_nats_chart_receives_a_3_node_jetstream_cluster(chart_with_nats: Path) -> None:
    out = render({"nats": {"enabled": True}}, chart_dir=chart_with_nats)
    got = _nats_values(out)
    assert got["config"]["cluster"]["enabled"] is True and got["config"]["cluster"]["replicas"] == 3
    assert got["config"]["jetstream"]["enabled"] is True
    assert got["config"]["jetstream"]["fileStore"]["enabled"] is True
    assert got["podTemplate"]["topologySpreadConstraints"][HOSTNAME]["maxSkew"] == 1
    docs = manifests(out)
    assert named(docs, "ConfigMap", "noetl")["data"]["NOETL_NATS_URL"] == "nats://noetl-nats:4222"
    assert named(docs, "ConfigMap", "noetl")["data"]["NOETL_REPLICAS"] == "3"
    assert "helm dependency update" not in out[NOTES]  # the dependency is there
    assert "on the bundled NATS cluster of 3 server(s)" in out[NOTES]


def test_the_size_check_sees_the_nats_charts_own_defaults(chart_with_nats: Path) -> None:
    with pytest.raises(helm.HelmRenderError, match="bundled NATS cluster has 3 server"):
        render({"nats": {"enabled": True}, "jetstream": {"replicas": 5}}, chart_dir=chart_with_nats)
    out = render(
        {"nats": {"enabled": True, "config": {"cluster": {"replicas": 5}}}, "jetstream": {"replicas": 5}},
        chart_dir=chart_with_nats,
    )
    assert _nats_values(out)["config"]["cluster"]["replicas"] == 5
    assert named(manifests(out), "ConfigMap", "noetl")["data"]["NOETL_REPLICAS"] == "5"


# --- NOTES -------------------------------------------------------------------------------------


def test_notes_show_the_ha_shape() -> None:
    notes = render({"nats": {"enabled": True}})[NOTES]
    assert "keeps 3 copies (jetstream.replicas, NOETL_REPLICAS)" in notes
    assert "Server: 2 replica(s), 8 partition(s) spread over the live replicas by leases" in notes
    assert "taken over within about 8 s" in notes
    assert "pool default: 2 replica(s) x concurrency 16" in notes
    assert "WARNING: jetstream.replicas" not in notes
    assert "stand by" not in notes
    notes = render({"server": {"leaseTtlSeconds": 10}})[NOTES]
    assert "keeps 1 copy (" in notes and "taken over within about 12 s" in notes
    assert "WARNING: jetstream.replicas is 1" in notes


def test_notes_warn_of_standbys_and_of_two_copies() -> None:
    notes = render({"server": {"replicaCount": 5, "partitions": 3}, "jetstream": {"replicas": 2}})[NOTES]
    assert "2 replica(s) beyond the 3 partition(s) own none and stand by" in notes
    assert "WARNING: jetstream.replicas is 2" in notes


# --- the bundled NATS: a version with message scheduling, and the fsync choice ----------------


def _version(tag: str) -> tuple[int, ...]:
    return tuple(int(x) for x in tag.split("-")[0].lstrip("v").split("."))


def test_the_bundled_nats_is_a_version_with_message_scheduling(chart_with_nats: Path) -> None:
    """The NATS chart 1.2 alone installs nats-server 2.11, which accepts a schedule and never fires
    it: every timer and cron schedule would silently do nothing (issue 25)."""
    defaults = yaml.safe_load((CHART_DIR / "values.yaml").read_text())["nats"]
    assert _version(defaults["container"]["image"]["tag"]) >= (2, 14, 0)
    got = _nats_values(render({"nats": {"enabled": True}}, chart_dir=chart_with_nats))
    assert got["container"]["image"] == {"repository": "nats", "tag": "2.15.1-alpine"}


@pytest.mark.parametrize("tag", ["2.11.10-alpine", "2.12.1", "v2.13.0-alpine"])
def test_an_older_bundled_nats_is_refused(tag: str) -> None:
    with pytest.raises(helm.HelmRenderError, match=r"nats-server 2\.14 or later"):
        render({"nats": {"enabled": True, "container": {"image": {"tag": tag}}}})


@pytest.mark.parametrize("tag", ["2.14.0", "2.15.1-alpine", "latest", "2.16.0-rc.1"])
def test_a_recent_or_unversioned_bundled_nats_renders(tag: str) -> None:
    render({"nats": {"enabled": True, "container": {"image": {"tag": tag}}}})
    render({"nats": {"container": {"image": {"tag": "2.9.0"}}}})  # not installed: not checked


def test_the_fsync_choice_is_stated_and_always_is_one_value(chart_with_nats: Path) -> None:
    got = _nats_values(render({"nats": {"enabled": True}}, chart_dir=chart_with_nats))
    assert got["config"]["jetstream"]["merge"] == {"sync_interval": "2m"}  # nats-server's default, explicit
    values = {"nats": {"enabled": True, "config": {"jetstream": {"merge": {"sync_interval": "always"}}}}}
    got = _nats_values(render(values, chart_dir=chart_with_nats))
    assert got["config"]["jetstream"]["merge"]["sync_interval"] == "always"
    assert got["config"]["jetstream"]["fileStore"]["enabled"] is True  # the rest of the block stays
    text = (CHART_DIR / "values.yaml").read_text()
    assert "docs/guarantees.md" in text and "`always`" in text
