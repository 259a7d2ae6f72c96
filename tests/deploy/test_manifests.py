"""deploy/k8s: every manifest is valid against the Kubernetes API schemas (kubernetes-validate, whose schemas
ship inside the package: checked with the network cut off), and the pieces fit together: probes on the
servers' health endpoints, Prometheus annotations on the metrics port, Services and autoscalers pointing at
the Deployments, the autoscalers' metric served by the adapter rule and exported by our server, and server
flags our own command accepts (it takes tritonserver's flags)."""

from __future__ import annotations

import socket

import pytest
import yaml

from asr_server.cli import build_parser
from tests.conftest import BUNDLED_REPO, ROOT, copy_model

kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="the dev extra installs kubernetes-validate")

K8S = ROOT / "deploy" / "k8s"
KUBERNETES_VERSIONS = ("1.27.0", "1.31.0", "1.37.0")  # oldest and newest the HPA v2 fields are checked on
QUEUE_METRIC = "nv_inference_pending_request_count"


def documents() -> list[tuple[str, dict]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        docs += [(path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return docs


def of_kind(kind: str) -> list[dict]:
    return [doc for _, doc in documents() if doc["kind"] == kind]


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("network access during manifest validation")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_manifest_is_valid_against_the_api_schemas_offline(version, no_network):
    docs = documents()
    assert {doc["kind"] for _, doc in docs} >= {"Deployment", "Service", "HorizontalPodAutoscaler", "ConfigMap"}
    for _, doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)  # raises on an unknown field or a wrong type


def test_a_wrong_manifest_is_refused(no_network):
    deployment = of_kind("Deployment")[0]
    broken = {**deployment, "spec": {**deployment["spec"], "replica": 2}}  # a misspelt field
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[-1], strict=True)


def test_deployments_probe_health_expose_metrics_and_are_served_and_scaled():
    services = {s["metadata"]["name"]: s for s in of_kind("Service")}
    autoscalers = {h["spec"]["scaleTargetRef"]["name"]: h for h in of_kind("HorizontalPodAutoscaler")}
    deployments = of_kind("Deployment")
    assert {d["metadata"]["name"] for d in deployments} == {"asr-server", "triton"}
    for deployment in deployments:
        name = deployment["metadata"]["name"]
        template = deployment["spec"]["template"]
        (container,) = template["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        flags = dict(arg.lstrip("-").split("=", 1) for arg in container["args"])
        assert ports == {"http": int(flags["http-port"]), "grpc": int(flags["grpc-port"]),
                         "metrics": int(flags["metrics-port"])}
        assert container["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert int(annotations["prometheus.io/port"]) == ports["metrics"]
        # Both servers read the same repository: the init container's copy, mounted where the flag points.
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert mounts[flags["model-repository"]] == "repository"
        (init,) = template["spec"]["initContainers"]
        assert init["image"] == "asr-model-repo:1"
        # Our command takes the same flags (it mirrors tritonserver's).
        build_parser().parse_args(container["args"])
        service = services[name]
        assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
        assert {p["targetPort"] for p in service["spec"]["ports"]} == set(ports)
        assert service["spec"]["sessionAffinity"] == "ClientIP"
        metrics = [m["pods"]["metric"]["name"] for m in autoscalers[name]["spec"]["metrics"] if m["type"] == "Pods"]
        assert metrics == [QUEUE_METRIC]


def test_adapter_rule_serves_the_queue_metric_the_autoscalers_read():
    (config_map,) = of_kind("ConfigMap")
    (rule,) = yaml.safe_load(config_map["data"]["config.yaml"])["rules"]
    assert rule["name"]["as"] == QUEUE_METRIC
    assert rule["seriesQuery"].startswith(QUEUE_METRIC + "{")
    assert rule["resources"]["overrides"]["pod"] == {"resource": "pod"}


async def test_our_server_exports_the_queue_metric(tmp_path, running):
    import aiohttp

    copy_model(tmp_path, BUNDLED_REPO / "add_sub")
    async with running(tmp_path, allow_grpc=False) as server:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{server.metrics_port}/metrics") as reply:
                text = await reply.text()
    assert f'{QUEUE_METRIC}{{model="add_sub",version="1"}} 0' in text
