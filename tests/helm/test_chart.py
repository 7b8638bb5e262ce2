"""The Helm chart: `helm lint --strict`, `helm template` with default and production values, every
manifest checked against the Kubernetes 1.30 schemas, and what the manifests say."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.helm.chart import (
    CHART_DIR,
    KUBE_VERSION,
    NOTES,
    arg_after,
    container,
    env_of,
    helm,
    manifests,
    named,
    of_kind,
    production_values,
    render,
    worker_pools,
)

kubernetes_validate = pytest.importorskip("kubernetes_validate")

# What helm lint says of a declared dependency that `helm dependency update` has not fetched
# (real helm too); --strict turns it into an error. The chart renders without the dependency.
MISSING_NATS = "chart directory is missing these dependencies: nats"

INLINE_SECRETS = {
    "nats": {"auth": {"user": "noetl-user-x1", "password": "nats-pass-x2", "token": "nats-token-x3"}},
    "credentials": {"key": "fernet-key-x4-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="},
    "auth": {"apiToken": "api-token-x5", "adminToken": "admin-token-x6"},
}


def _secret_values(values: dict[str, Any]) -> list[str]:
    return [*values["nats"]["auth"].values(), values["credentials"]["key"], *values["auth"].values()]


def _findings(values: dict[str, Any] | None) -> list[str]:
    report = helm.lint(str(CHART_DIR), values, strict=True, kube_version=f"v{KUBE_VERSION}")
    assert report["total_charts_linted"] == 1
    absent = {d["name"] for d in helm.dependency_list(str(CHART_DIR)) if d["status"] == "missing"}
    expected = {MISSING_NATS} if absent == {"nats"} else set()
    warnings = {m["error"] for m in report["messages"] if m["severity"] >= 2}
    return sorted((warnings | set(report["errors"])) - expected)


@pytest.mark.parametrize("which", ["default", "production"])
def test_lint_strict_passes(which: str) -> None:
    assert _findings(production_values() if which == "production" else None) == []


@pytest.mark.parametrize(
    "values",
    [
        {},
        production_values(),
        {"nats": {"enabled": True}, **INLINE_SECRETS},
        {"auth": {"insecure": True}},
        {"auth": {"apiToken": "api-token-given"}},
        {
            "server": {"replicaCount": 1, "strategy": {"type": "Recreate"}},
            "podDisruptionBudget": {"enabled": False},
        },
        {
            "server": {
                "replicaCount": 4,
                "partitions": 2,
                "strategy": {"rollingUpdate": {"maxUnavailable": "25%"}},
            },
            "podDisruptionBudget": {"maxUnavailable": "50%"},
        },
    ],
    ids=[
        "default",
        "production",
        "bundled-nats-inline-secrets",
        "insecure-api",
        "given-user-token-generated-admin",
        "one-server-recreate",
        "standbys-percentages",
    ],
)
def test_every_manifest_is_valid_kubernetes(values: dict[str, Any]) -> None:
    docs = manifests(render(values))
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def test_default_values_render_the_server_and_the_default_pool() -> None:
    docs = manifests(render())
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == [
        "ConfigMap",
        "Deployment",
        "Deployment",
        "Pod",
        "PodDisruptionBudget",
        "PodDisruptionBudget",
        "Secret",  # the generated API tokens
        "Service",
        "ServiceAccount",
    ]
    (pool,) = worker_pools(docs).items()
    assert pool[0] == "default"
    args = container(pool[1])["args"]
    assert args[0] == "worker" and arg_after(args, "--pool") == "default"
    assert arg_after(args, "--concurrency") == "16"
    cm = named(docs, "ConfigMap", "noetl")
    assert cm["data"] == {
        "NOETL_NATS_URL": "nats://nats:4222",
        "NOETL_LOG_LEVEL": "INFO",
        "NOETL_REPLICAS": "1",
    }


def test_production_pools_replicas_and_concurrency() -> None:
    docs = manifests(render(production_values()))
    pools = worker_pools(docs)
    assert {p: d["spec"]["replicas"] for p, d in pools.items()} == {"default": 3, "etl": 2}
    for pool, concurrency in {"default": "32", "etl": "8"}.items():
        args = container(pools[pool])["args"]
        assert args[:2] == ["worker", "--nats-url"]
        assert arg_after(args, "--pool") == pool and arg_after(args, "--concurrency") == concurrency
        sel = pools[pool]["spec"]["selector"]["matchLabels"]
        assert sel["noetl.io/pool"] == pool
        assert pools[pool]["spec"]["template"]["metadata"]["labels"].items() >= sel.items()
    assert container(pools["etl"])["resources"]["requests"]["memory"] == "4Gi"
    assert pools["etl"]["spec"]["template"]["spec"]["nodeSelector"] == {"noetl.io/node-pool": "etl"}
    assert "nodeSelector" not in pools["default"]["spec"]["template"]["spec"]
    budgets = {d["metadata"]["name"] for d in of_kind(docs, "PodDisruptionBudget")}
    assert budgets == {"noetl-server", "noetl-worker-default", "noetl-worker-etl"}


@pytest.mark.parametrize("port", [8080, 9090])
def test_probes_and_service_use_the_http_port(port: int) -> None:
    docs = manifests(render({"server": {"httpPort": port}}))
    server = named(docs, "Deployment", "noetl-server")
    c = container(server)
    assert arg_after(c["args"], "--http-port") == str(port)
    (p,) = c["ports"]
    assert (p["name"], p["containerPort"]) == ("http", port)
    # liveness must not fail while NATS is away (/health then says 503): restarting would not help
    assert c["livenessProbe"]["httpGet"] == {"path": "/live", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    svc = named(docs, "Service", "noetl-server")
    assert svc["spec"]["ports"][0]["targetPort"] == "http"
    assert svc["spec"]["selector"].items() <= server["spec"]["template"]["metadata"]["labels"].items()
    test_pod = named(docs, "Pod", "noetl-test-health")
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert test_pod["spec"]["containers"][0]["args"][-1] == "http://noetl-server.noetl.svc:8080/health"


def test_production_secrets_come_from_existing_secrets() -> None:
    docs = manifests(render(production_values()))
    assert of_kind(docs, "Secret") == []
    server = container(named(docs, "Deployment", "noetl-server"))
    worker = container(worker_pools(docs)["etl"])
    for c in (server, worker):
        env = env_of(c)
        for var, key in {"NOETL_NATS_USER": "nats-user", "NOETL_NATS_TOKEN": "nats-token"}.items():
            ref = env[var]["valueFrom"]["secretKeyRef"]
            assert ref == {"name": "noetl-nats-auth", "key": key, "optional": True}
        assert env["NOETL_CREDENTIALS_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "noetl-credentials"
        assert env["NOETL_NATS_TLS_CA"]["value"] == "/etc/noetl/nats-tls/ca.crt"
        assert env["NOETL_NATS_TLS_KEY"]["value"] == "/etc/noetl/nats-tls/tls.key"
        assert {"name": "nats-tls", "mountPath": "/etc/noetl/nats-tls", "readOnly": True} in c["volumeMounts"]
        assert c["envFrom"] == [{"configMapRef": {"name": "noetl"}}]
    assert env_of(server)["NOETL_API_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "noetl-api-token",
        "key": "api-token",
    }
    admin = env_of(server)["NOETL_API_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert admin == {"name": "noetl-api-token", "key": "api-admin-token", "optional": True}
    assert "NOETL_API_TOKEN" not in env_of(worker)
    spec = worker_pools(docs)["etl"]["spec"]["template"]["spec"]
    tls = next(v for v in spec["volumes"] if v["name"] == "nats-tls")
    assert tls["secret"]["secretName"] == "noetl-nats-tls"


def test_inline_secrets_live_only_in_the_secret() -> None:
    out = render(INLINE_SECRETS)
    docs = manifests(out)
    (secret,) = of_kind(docs, "Secret")
    stored = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert sorted(stored.values()) == sorted(_secret_values(INLINE_SECRETS))
    for path, text in out.items():
        if path != "noetl/templates/secret.yaml":
            for value in _secret_values(INLINE_SECRETS):
                assert value not in text, f"{value!r} leaks into {path}"
    env = env_of(container(named(docs, "Deployment", "noetl-server")))
    password = env["NOETL_NATS_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert password == {"name": "noetl", "key": "nats-password"}
    assert env["NOETL_API_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "noetl", "key": "api-token"}
    assert env["NOETL_API_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "api-admin-token"


def test_pods_run_as_non_root_on_a_read_only_root() -> None:
    docs = manifests(render(production_values()))
    for d in of_kind(docs, "Deployment"):
        spec = d["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        sc = container(d)["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True and sc["capabilities"]["drop"] == ["ALL"]
        assert spec["automountServiceAccountToken"] is False


def test_notes_tell_how_to_publish_follow_and_reach_the_api() -> None:
    notes = render(production_values())[NOTES]
    url = production_values()["nats"]["url"]
    assert f"nats --server {url} pub noetl.requests.execute" in notes
    assert "sub 'noetl.events.*.<execution_id>.>'" in notes
    assert "port-forward svc/noetl-server 8080:8080" in notes
    assert "pool etl: 2 replica(s) x concurrency 8" in notes


@pytest.mark.parametrize(("release", "url"), [("rel", "nats://rel-nats:4222"), ("nats", "nats://nats:4222")])
def test_bundled_nats_is_reached_by_its_service_name(release: str, url: str) -> None:
    out = render({"nats": {"enabled": True, "url": "nats://ignored:4222"}}, name=release)
    docs = manifests(out)
    (cm,) = [d for d in of_kind(docs, "ConfigMap") if "NOETL_NATS_URL" in d["data"]]
    assert cm["data"]["NOETL_NATS_URL"] == url
    # the vendored NATS chart's client Service has that name
    named(docs, "Service", url.removeprefix("nats://").removesuffix(":4222"))
    assert "helm dependency update" not in out[NOTES]  # vendored: nothing to fetch


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"server": {"replicas": 2}}, "'replicas'"),
        ({"wokrer": {"enabled": True}}, "'wokrer'"),
        ({"worker": {"pools": [{"name": "etl", "concurency": 4}]}}, "'concurency'"),
        ({"worker": {"pools": [{"name": "etl.pool"}]}}, "/worker/pools/0/name"),
        ({"worker": {"pools": [{"name": "_etl"}]}}, "/worker/pools/0/name"),
        ({"nats": {"tls": {"enabled": True}}}, "/nats/tls/existingSecret"),
        ({"server": {"partitions": 0}}, "/server/partitions"),
        ({"server": {"partitions": 257}}, "/server/partitions"),
        ({"server": {"replicaCount": 0}}, "/server/replicaCount"),
        ({"server": {"leaseTtlSeconds": 0}}, "/server/leaseTtlSeconds"),
        ({"server": {"strategy": {"type": "BlueGreen"}}}, "/server/strategy/type"),
        ({"server": {"podDisruptionBudget": {"maxUnavailable": 1}}}, "'maxUnavailable'"),
        ({"jetstream": {"replicas": 0}}, "/jetstream/replicas"),
        ({"jetstream": {"replicas": 6}}, "/jetstream/replicas"),
        ({"jetstream": {"replica": 3}}, "'replica'"),
        ({"podDisruptionBudget": {"maxUnavailable": 0}}, "/podDisruptionBudget/maxUnavailable"),
        ({"podDisruptionBudget": {"maxUnavailable": "0%"}}, "/podDisruptionBudget/maxUnavailable"),
        (
            {"nats": {"enabled": True, "config": {"cluster": {"replicas": 1}}}},
            "/nats/config/cluster/replicas",
        ),
        ({"nats": {"url": "nats://a:4222, nats://b:4222"}}, "/nats/url"),
        ({"auth": {"insecure": "yes"}}, "/auth/insecure"),
        ({"auth": {"insecur": True}}, "'insecur'"),
    ],
)
def test_schema_rejects_typos_and_bad_values(values: dict[str, Any], where: str) -> None:
    with pytest.raises(helm.HelmValuesError, match="schema") as err:
        render(values)
    assert where in str(err.value)


def test_a_pool_listed_twice_is_refused() -> None:
    with pytest.raises(helm.HelmRenderError, match='pool "etl" is listed twice'):
        render({"worker": {"pools": [{"name": "etl"}, {"name": "etl"}]}})
