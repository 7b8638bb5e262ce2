"""Chart options of issue 30, each rendered by the real Helm engine and validated against the
Kubernetes 1.30 schemas (the Prometheus Operator's and KEDA's kinds, which have no schema there,
are checked field by field)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helm.chart import (
    KUBE_VERSION,
    arg_after,
    container,
    helm,
    manifests,
    named,
    of_kind,
    render,
    worker_pools,
)

kubernetes_validate = pytest.importorskip("kubernetes_validate")
CRDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule", "ScaledObject"}


def valid(values: dict[str, Any]) -> list[dict[str, Any]]:
    docs = manifests(render(values))
    for doc in docs:
        if doc["kind"] not in CRDS:
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
    return docs


OPTIONS: dict[str, dict[str, Any]] = {
    "keda": {"worker": {"keda": {"enabled": True, "natsMonitoringEndpoint": "nats-headless.nats:8222"}}},
    "keda-bundled-nats": {
        "nats": {"enabled": True},
        "worker": {"pools": [{"name": "etl", "keda": {"enabled": True}}]},
    },
    "hpa": {"worker": {"autoscaling": {"enabled": True, "maxReplicas": 6}}},
    "monitoring": {
        "metrics": {
            "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
            "prometheusRule": {"enabled": True},
        }
    },
    "ingress": {
        "server": {
            "ingress": {
                "enabled": True,
                "className": "nginx",
                "tls": [{"hosts": ["noetl.local"], "secretName": "noetl-tls"}],
            }
        }
    },
    "networkpolicy": {
        "networkPolicy": {
            "enabled": True,
            "ingressFrom": [{"namespaceSelector": {}}],
            "egress": [{"ports": [{"port": 4222}]}],
        }
    },
    "pool-image-volumes": {
        "worker": {
            "extraVolumes": [{"name": "shared", "emptyDir": {}}],
            "extraVolumeMounts": [{"name": "shared", "mountPath": "/shared"}],
            "pools": [
                {
                    "name": "etl_jobs",
                    "image": {
                        "repository": "registry.local/noetl-duckdb",
                        "tag": "1.2",
                        "pullPolicy": "Always",
                    },
                    "extraVolumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
                    "extraVolumeMounts": [{"name": "data", "mountPath": "/data"}],
                    "extraEnv": [{"name": "NOETL_ACK_WAIT", "value": "2m"}],
                }
            ],
        },
        "server": {
            "extraVolumes": [{"name": "ca", "configMap": {"name": "ca"}}],
            "extraVolumeMounts": [{"name": "ca", "mountPath": "/ca"}],
        },
    },
    "no-worker-port": {"worker": {"httpPort": 0}},
}


@pytest.mark.parametrize("values", OPTIONS.values(), ids=OPTIONS.keys())
def test_each_option_renders_valid_kubernetes(values: dict[str, Any]) -> None:
    assert valid(values)


def test_keda_scales_a_pool_on_its_consumer_lag() -> None:
    docs = valid(OPTIONS["keda"])
    (so,) = of_kind(docs, "ScaledObject")
    assert (
        so["apiVersion"] == "keda.sh/v1alpha1"
        and so["spec"]["scaleTargetRef"]["name"] == "noetl-worker-default"
    )
    (trigger,) = so["spec"]["triggers"]
    assert trigger["type"] == "nats-jetstream"
    meta = trigger["metadata"]
    assert meta["stream"] == "NOETL_COMMANDS" and meta["consumer"] == "noetl-worker-default"
    assert meta["natsServerMonitoringEndpoint"] == "nats-headless.nats:8222" and meta["account"] == "$G"
    assert all(isinstance(v, str) for v in meta.values())  # KEDA's metadata is a map of strings
    # the autoscaler owns the count: an upgrade must not reset it
    assert "replicas" not in worker_pools(docs)["default"]["spec"]
    bundled = valid(OPTIONS["keda-bundled-nats"])
    (so,) = of_kind(bundled, "ScaledObject")
    assert so["spec"]["triggers"][0]["metadata"]["natsServerMonitoringEndpoint"] == (
        "noetl-nats-headless.noetl.svc.cluster.local:8222"
    )
    with pytest.raises(helm.HelmRenderError, match="natsMonitoringEndpoint is required"):
        render({"worker": {"keda": {"enabled": True}}})
    with pytest.raises(helm.HelmRenderError, match="choose one"):
        render(
            {
                "worker": {
                    "keda": {"enabled": True, "natsMonitoringEndpoint": "x:8222"},
                    "autoscaling": {"enabled": True},
                }
            }
        )


def test_hpa_targets_each_pool() -> None:
    docs = valid(
        {
            **OPTIONS["hpa"],
            "worker": {
                **OPTIONS["hpa"]["worker"],
                "pools": [{"name": "a"}, {"name": "b", "autoscaling": {"enabled": False}}],
            },
        }
    )
    (hpa,) = of_kind(docs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "noetl-worker-a",
    }
    assert hpa["spec"]["maxReplicas"] == 6
    pools = worker_pools(docs)
    assert "replicas" not in pools["a"]["spec"] and pools["b"]["spec"]["replicas"] == 2


def test_workers_serve_probes_and_metrics_on_their_port() -> None:
    docs = valid({})
    c = container(worker_pools(docs)["default"])
    assert arg_after(c["args"], "--http-port") == "9090" and arg_after(c["args"], "--http-host") == "0.0.0.0"
    assert c["ports"] == [{"name": "http", "containerPort": 9090, "protocol": "TCP"}]
    assert c["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert c["livenessProbe"]["httpGet"]["path"] == "/live"
    assert c["startupProbe"]["httpGet"]["path"] == "/live"
    server = container(named(docs, "Deployment", "noetl-server"))
    assert server["startupProbe"]["failureThreshold"] * server["startupProbe"]["periodSeconds"] >= 60
    off = container(worker_pools(valid(OPTIONS["no-worker-port"]))["default"])
    assert "--http-port" not in off["args"] and "readinessProbe" not in off and "ports" not in off


def test_a_dsl_pool_name_with_an_underscore_is_accepted() -> None:
    docs = valid(OPTIONS["pool-image-volumes"])
    deployment = named(docs, "Deployment", "noetl-worker-etl-jobs")
    assert deployment["metadata"]["labels"]["noetl.io/pool"] == "etl_jobs"
    c = container(deployment)
    assert arg_after(c["args"], "--pool") == "etl_jobs"
    assert c["image"] == "registry.local/noetl-duckdb:1.2" and c["imagePullPolicy"] == "Always"
    assert {"/shared", "/data", "/tmp"} <= {m["mountPath"] for m in c["volumeMounts"]}
    volumes = {v["name"] for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert {"shared", "data", "tmp"} <= volumes
    assert {"name": "NOETL_ACK_WAIT", "value": "2m"} in c["env"]
    named(docs, "PodDisruptionBudget", "noetl-worker-etl-jobs")
    server = container(named(docs, "Deployment", "noetl-server"))
    assert {"name": "ca", "mountPath": "/ca"} in server["volumeMounts"]
    with pytest.raises(helm.HelmRenderError, match="collide"):
        render({"worker": {"pools": [{"name": "etl_jobs"}, {"name": "etl-jobs"}]}})


def test_monitoring_objects_and_alert_rules() -> None:
    docs = valid(OPTIONS["monitoring"])
    sm = named(docs, "ServiceMonitor", "noetl-server")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1" and sm["metadata"]["labels"]["release"] == "prom"
    assert sm["spec"]["endpoints"][0]["port"] == "http" and sm["spec"]["endpoints"][0]["path"] == "/metrics"
    service = named(docs, "Service", "noetl-server")
    assert sm["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    pm = named(docs, "PodMonitor", "noetl-worker")
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] == "http"
    pod_labels = worker_pools(docs)["default"]["spec"]["template"]["metadata"]["labels"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    (rule,) = of_kind(docs, "PrometheusRule")
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert {
        "NoetlPartitionsWithoutReader",
        "NoetlExecutionsQueuedWithoutWorker",
        "NoetlWorkerBacklog",
    } <= set(alerts)
    for r in alerts.values():
        assert r["expr"].count("(") == r["expr"].count(")") and "noetl_" in r["expr"]
    assert "{{ $labels.consumer }}" in alerts["NoetlWorkerBacklog"]["annotations"]["summary"]


def test_metric_names_in_the_rules_are_ones_the_processes_export() -> None:
    """Every metric an alert reads is in what a server or a worker exposes (their own renderings)."""
    import re
    from types import SimpleNamespace

    from prometheus_client.parser import text_string_to_metric_families

    from noetl.events.histogram import Histogram
    from noetl.host.prom import Exposition
    from noetl.server.api.metrics import Metrics
    from noetl.worker.http import WorkerCollector

    live = {
        "streams": {"NOETL_EVENTS": 1},
        "stream_bytes": {"NOETL_EVENTS": 1},
        "consumers": [{"stream": "S", "consumer": "c", "pending": 1, "ack_pending": 0, "redelivered": 0}],
        "runtime": {"worker": 1},
        "server": {"partitions_owned": [0], "partitions_without_reader": [], "reader_restarts": 0},
        "loop_restarts": {"x": 1},
    }
    m = Metrics()
    m.observe_http("GET", "health", 200, 0.01)
    text = m.render(live)
    worker = SimpleNamespace(
        busy=0, concurrency=4, pool="p", completed=0, task_durations={"ok": Histogram()}
    )
    text += Exposition(WorkerCollector(SimpleNamespace(worker=worker))).text()  # type: ignore[arg-type]
    exported = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    (rule,) = of_kind(manifests(render(OPTIONS["monitoring"])), "PrometheusRule")
    for r in rule["spec"]["groups"][0]["rules"]:
        for name in re.findall(r"\b(noetl_[a-z_]+)", r["expr"]):
            assert name in exported, (r["alert"], name)


def test_ingress_and_network_policy() -> None:
    docs = valid({**OPTIONS["ingress"], **OPTIONS["networkpolicy"]})
    ing = named(docs, "Ingress", "noetl-server")
    assert ing["spec"]["ingressClassName"] == "nginx"
    backend = ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "noetl-server", "port": {"name": "http"}}
    server, worker = (
        named(docs, "NetworkPolicy", "noetl-server"),
        named(docs, "NetworkPolicy", "noetl-worker"),
    )
    assert server["spec"]["ingress"][0]["ports"] == [{"port": 8080, "protocol": "TCP"}]
    assert worker["spec"]["ingress"][0]["ports"] == [{"port": 9090, "protocol": "TCP"}]
    assert server["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert {"port": 4222} in [p for rule in server["spec"]["egress"] for p in rule["ports"]]


def test_renders_are_stable_with_an_existing_secret() -> None:
    """GitOps (Argo CD renders with `helm template`, where `lookup` finds nothing): with
    auth.existingSecret nothing is generated, so every render is the same and no pod restarts."""
    values = {"auth": {"existingSecret": "noetl-api"}}
    assert render(values) == render(values)
    # without it, each `helm template` makes new tokens (an install or upgrade keeps them)
    assert render({}) != render({})


def test_the_vendored_nats_chart_installs_offline_with_a_valid_config(tmp_path) -> None:
    """`helm install` from the repository: the declared dependency is in charts/ (Helm's check
    ignores `condition:`), nats-server 2.15.1 by default, and its rendered nats.conf is one
    nats-server accepts (`nats-server -t`)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.helm.chart import CHART_DIR

    deps = {d["name"]: d["status"] for d in helm.dependency_list(str(CHART_DIR))}
    assert deps == {"nats": "unpacked"}, deps
    for values in (
        {"nats": {"enabled": True}},
        {"nats": {"enabled": True, "config": {"jetstream": {"merge": {"sync_interval": "always"}}}}},
        {
            "nats": {
                "enabled": True,
                "config": {
                    "cluster": {"enabled": False},
                    "jetstream": {"memoryStore": {"enabled": True, "maxSize": "2Gi"}},
                },
            }
        },
    ):
        docs = valid(values)
        sts = named(docs, "StatefulSet", "noetl-nats")
        assert container(sts)["image"] == "nats:2.15.1-alpine"
        conf = named(docs, "ConfigMap", "noetl-nats-config")["data"]["nats.conf"]
        conf = conf.replace("/var/run/nats/nats.pid", str(tmp_path / "nats.pid")).replace(
            '"/data"', f'"{tmp_path}"'
        )
        (tmp_path / "nats.conf").write_text(conf)
        binary = Path(sys.executable).with_name("nats-server")
        env = {**os.environ, "SERVER_NAME": "noetl-nats-0"}
        check = subprocess.run(
            [str(binary), "-c", str(tmp_path / "nats.conf"), "-t"],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        )
        assert check.returncode == 0, check.stderr
