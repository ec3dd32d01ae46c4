"""Ingresses as `kubectl get ingresses.networking.k8s.io -o json` prints them (networking.k8s.io/v1)."""

from __future__ import annotations

import json

import pytest

from diag.core.errors import ParseError
from diag.facts.kubernetes_network import target_port_facts
from diag.parsers.kubernetes_network import parse_ingresses
from diag.snapshot.model import Container, IngressBackend, Pod, Service, ServicePort


def _ingress(spec: dict) -> str:
    item = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": "chat", "namespace": "llm"},
        "spec": spec,
        "status": {"loadBalancer": {}},
    }
    return json.dumps({"apiVersion": "v1", "items": [item], "kind": "List", "metadata": {"resourceVersion": ""}})


def test_default_backend_first_then_each_rule_path_with_port_number_or_name() -> None:
    text = _ingress(
        {
            "ingressClassName": "nginx",
            "defaultBackend": {"service": {"name": "fallback", "port": {"number": 80}}},
            "rules": [
                {
                    "host": "llm.example.internal",
                    "http": {
                        "paths": [
                            {
                                "path": "/v1",
                                "pathType": "Prefix",
                                "backend": {"service": {"name": "qwen", "port": {"name": "http"}}},
                            },
                            {
                                "pathType": "Prefix",
                                "backend": {"resource": {"apiGroup": "k8s.example.io", "kind": "Bucket", "name": "b"}},
                            },
                        ]
                    },
                }
            ],
        }
    )
    [ing] = parse_ingresses(text)
    assert (ing.namespace, ing.name, ing.ingress_class) == ("llm", "chat", "nginx")
    assert ing.backends == [
        IngressBackend("fallback", 80, None, None, None),
        IngressBackend("qwen", None, "http", "llm.example.internal", "/v1"),
    ]


def test_another_kind_is_refused() -> None:
    with pytest.raises(ParseError, match="Ingress"):
        parse_ingresses(json.dumps({"apiVersion": "v1", "kind": "ServiceList", "items": []}))


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
