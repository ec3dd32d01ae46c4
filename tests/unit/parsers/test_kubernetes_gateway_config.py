"""Gateway API lists and ConfigMap/Secret names, and the ConfigMaps and Secrets a pod spec names."""

from __future__ import annotations

import json

import pytest

from diag.core.errors import ParseError
from diag.parsers.kubernetes import parse_pods
from diag.parsers.kubernetes_config import parse_configmaps, parse_secrets
from diag.parsers.kubernetes_gateway import parse_gateways, parse_grpcroutes, parse_httproutes
from diag.parsers.kubernetes_network import parse_ingresses
from diag.snapshot.model import ConfigRef, ObjectName, RouteRef

GROUP = "gateway.networking.k8s.io"


def _list(*items: dict) -> str:
    return json.dumps({"apiVersion": "v1", "items": list(items), "kind": "List", "metadata": {"resourceVersion": ""}})


def test_a_route_defaults_its_refs_as_the_api_does_and_keeps_its_parents_conditions() -> None:
    route = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "chat", "namespace": "llm"},
        "spec": {
            "parentRefs": [{"name": "inference-gateway", "namespace": "gateway-system", "sectionName": "https"}],
            "rules": [
                {"backendRefs": [{"name": "qwen", "port": 8000}]},
                {"backendRefs": [{"kind": "InferencePool", "group": "inference.networking.k8s.io", "name": "pool"}]},
            ],
        },
        "status": {
            "parents": [
                {
                    "parentRef": {"name": "inference-gateway", "namespace": "gateway-system"},
                    "controllerName": "example.net/gateway-controller",
                    "conditions": [
                        {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "ok"},
                        {"type": "ResolvedRefs", "status": "False", "reason": "BackendNotFound", "message": "no qwen"},
                    ],
                }
            ]
        },
    }
    (parsed,) = parse_httproutes(_list(route))
    assert parsed.parents == [RouteRef("Gateway", "gateway-system", "inference-gateway", None, "https")]
    assert parsed.backends == [RouteRef("Service", "llm", "qwen", 8000), RouteRef("InferencePool", "llm", "pool")]
    (status,) = parsed.status
    assert status.controller == "example.net/gateway-controller"
    assert status.conditions["ResolvedRefs"] == {"status": "False", "reason": "BackendNotFound", "message": "no qwen"}


def test_a_grpcroute_list_and_a_gateway_list_of_their_own_kinds() -> None:
    grpc = {
        "kind": "GRPCRoute",
        "metadata": {"name": "g", "namespace": "llm"},
        "spec": {"parentRefs": [{"name": "gw"}]},
    }
    gateway = {
        "kind": "Gateway",
        "metadata": {"name": "gw", "namespace": "llm"},
        "spec": {"gatewayClassName": "eg"},
        "status": {"conditions": [{"type": "Programmed", "status": "True", "reason": "Programmed", "message": ""}]},
    }
    assert parse_grpcroutes(_list(grpc))[0].parents == [RouteRef("Gateway", "llm", "gw")]
    (gw,) = parse_gateways(json.dumps({"kind": "GatewayList", "items": [gateway]}))
    assert (gw.gateway_class, gw.conditions["Programmed"]["status"]) == ("eg", "True")
    with pytest.raises(ParseError, match="not a HTTPRoute"):
        parse_httproutes(_list(grpc))


def test_configmap_and_secret_lists_give_names_only_whatever_they_hold() -> None:
    secret = {"kind": "Secret", "metadata": {"name": "hf-token", "namespace": "llm"}, "data": {"token": "aGY="}}
    metadata_only = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": secret["metadata"]}
    assert parse_secrets(_list(secret)) == [ObjectName("llm", "hf-token")]
    assert parse_secrets(json.dumps({"kind": "PartialObjectMetadataList", "items": [metadata_only]})) == [
        ObjectName("llm", "hf-token")
    ]
    with pytest.raises(ParseError, match="not a ConfigMap"):
        parse_configmaps(_list(secret))


def test_ingress_tls_secret_names() -> None:
    item = {
        "kind": "Ingress",
        "metadata": {"name": "chat", "namespace": "llm"},
        "spec": {"tls": [{"hosts": ["a"], "secretName": "a-tls"}, {"hosts": ["b"]}]},
    }
    assert parse_ingresses(_list(item))[0].tls_secrets == ["a-tls"]


def test_every_place_a_pod_spec_names_a_configmap_or_secret() -> None:
    pod = {
        "kind": "Pod",
        "metadata": {"name": "vllm-0", "namespace": "llm"},
        "spec": {
            "initContainers": [{"name": "fetch", "envFrom": [{"secretRef": {"name": "s3-creds"}}]}],
            "containers": [
                {
                    "name": "vllm",
                    "env": [
                        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}},
                        {
                            "name": "EXTRA",
                            "valueFrom": {"configMapKeyRef": {"name": "extra", "key": "x", "optional": True}},
                        },
                        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    ],
                    "envFrom": [{"configMapRef": {"name": "vllm-env"}}],
                }
            ],
            "volumes": [
                {"name": "template", "configMap": {"name": "chat-template"}},
                {"name": "certs", "secret": {"secretName": "tls", "optional": True}},
                {
                    "name": "kube-api-access",
                    "projected": {
                        "sources": [{"serviceAccountToken": {}}, {"configMap": {"name": "kube-root-ca.crt"}}]
                    },
                },
            ],
            "imagePullSecrets": [{"name": "regcred"}],
        },
        "status": {},
    }
    (parsed,) = parse_pods(_list(pod))
    assert parsed.config_refs == [
        ConfigRef("Secret", "s3-creds", "envFrom of init container fetch"),
        ConfigRef("Secret", "hf-token", "env HF_TOKEN of container vllm"),
        ConfigRef("ConfigMap", "extra", "env EXTRA of container vllm", optional=True),
        ConfigRef("ConfigMap", "vllm-env", "envFrom of container vllm"),
        ConfigRef("ConfigMap", "chat-template", "volume template"),
        ConfigRef("Secret", "tls", "volume certs", optional=True),
        ConfigRef("ConfigMap", "kube-root-ca.crt", "volume kube-api-access (projected)"),
        ConfigRef("Secret", "regcred", "imagePullSecrets"),
    ]
