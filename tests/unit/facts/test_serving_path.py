"""The serving path past the pod: Service target ports, Ingress backends."""

from __future__ import annotations

from diag.facts.kubernetes_network import scopes, target_port_facts
from diag.snapshot.model import (
    Container,
    Ingress,
    IngressBackend,
    Pod,
    Service,
    ServicePort,
    Snapshot,
    SourceStatus,
)


def _pod(ports: dict[str, int], args: list[str]) -> Pod:
    return Pod("llm", "qwen-0", containers=[Container("vllm", ports=ports, args=args)], vllm_server="qwen-0")


def test_named_target_port_resolves_on_a_named_container_port_only() -> None:
    svc = Service("llm", "qwen", ports=[ServicePort(80, "api", "http")])
    assert target_port_facts(svc, [_pod({"api": 8000}, [])])["target_port_problems"] == []
    found = target_port_facts(svc, [_pod({"http": 8000}, [])])
    assert found["target_port_problems"] == [
        'port http (80) -> targetPort "api": no container of qwen-0 has a port named api (their ports: http=8000)'
    ]
    assert found["target_port_fixes"] == ["spec.ports[0].targetPort: http"]


def test_a_number_is_judged_against_vllm_s_port_where_no_container_port_declares_it() -> None:
    svc = Service("llm", "qwen", ports=[ServicePort(80, 8080)])
    serving = ["vllm", "serve", "Qwen/Qwen2.5-7B", "--port", "8080"]
    assert target_port_facts(svc, [_pod({}, serving)])["target_port_problems"] == []
    wrong = target_port_facts(svc, [_pod({}, ["vllm", "serve", "Qwen/Qwen2.5-7B"])])
    assert wrong["target_port_problems"] == [
        "port 80 -> targetPort 8080: no container of qwen-0 declares containerPort 8080, and vLLM listens on 8000"
        " (their ports: none declared)"
    ]
    assert wrong["target_port_fixes"] == ["spec.ports[0].targetPort: 8000"]
    # a pod that is not a vLLM server: an undeclared number may be served, so it is not judged
    other = Pod("llm", "web-0", containers=[Container("web", ports={"metrics": 9090})])
    assert target_port_facts(svc, [other])["target_port_problems"] == []


def test_an_ingress_backend_names_a_missing_service_or_a_port_its_service_lacks() -> None:
    backends = [
        IngressBackend("qwen-chat", None, "http", "llm.example.internal", "/v1"),
        IngressBackend("qwen", 9000),
        IngressBackend("qwen", None, "http", "llm.example.internal", "/ok"),
    ]
    snap = Snapshot(
        services=[Service("llm", "qwen", {"app": "qwen"}, [ServicePort(8000, "http", "http")])],
        pods=[Pod("llm", "qwen-0", labels={"app": "qwen"})],
        ingresses=[Ingress("llm", "chat", "nginx", backends)],
    )
    snap.sources["k8s/services.json"] = SourceStatus("ok")
    [ing] = scopes(snap)["ingress"]
    assert ing["backend_problems"] == [
        'llm.example.internal/v1 -> service qwen-chat:http: services "qwen-chat" not found in llm',
        "default backend -> service qwen:9000: service qwen has no port 9000 (its ports: http=8000)",
    ]
    assert ing["backend_fix"] == (
        "llm.example.internal/v1: service qwen in place of qwen-chat;"
        " default backend: port http of qwen in place of 9000"
    )
    assert "pod:llm/qwen-0" in ing["_links"]


def test_ingress_backends_are_unknown_without_the_services() -> None:
    snap = Snapshot(ingresses=[Ingress("llm", "chat", None, [IngressBackend("qwen", 80)])])
    assert scopes(snap)["ingress"][0]["backend_problems"] is None
