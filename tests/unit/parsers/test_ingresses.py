"""Ingresses as `kubectl get ingresses.networking.k8s.io -o json` prints them (networking.k8s.io/v1)."""

from __future__ import annotations

import json

import pytest

from diag.core.errors import ParseError
from diag.parsers.kubernetes_network import parse_ingresses
from diag.snapshot.model import IngressBackend


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
