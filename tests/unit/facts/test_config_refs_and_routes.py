"""A pod's missing ConfigMaps and Secrets, an Ingress's TLS Secrets, a route's backends, Gateways and
status: said only from lists read whole, for the namespaces they cover."""

from __future__ import annotations

from diag.facts.kubernetes_network import config_ref_facts, names_read, scopes
from diag.snapshot.model import (
    ConfigRef,
    Gateway,
    Ingress,
    ObjectName,
    Pod,
    Route,
    RouteParentStatus,
    RouteRef,
    Service,
    ServicePort,
    Snapshot,
    SourceStatus,
)

REFS = [
    ConfigRef("Secret", "hf-token", "env HF_TOKEN of container vllm"),
    ConfigRef("ConfigMap", "chat-template", "volume template"),
    ConfigRef("ConfigMap", "extra", "envFrom of container vllm", optional=True),
    ConfigRef("Secret", "regcred", "imagePullSecrets"),
]


def _snap(**lists: list[ObjectName]) -> Snapshot:
    snap = Snapshot(configmaps=lists.get("configmaps", []), secrets=lists.get("secrets", []))
    for kind in lists:
        snap.sources[f"k8s/{kind}.json"] = SourceStatus("ok", f"{len(lists[kind])} items")
    return snap


def _facts(snap: Snapshot, namespace: str = "llm") -> dict:
    names = {kind: names_read(snap, kind) for kind in ("ConfigMap", "Secret")}
    return config_ref_facts(Pod(namespace, "vllm-0", config_refs=REFS), names)


def test_missing_references_are_named_and_an_optional_one_never() -> None:
    snap = _snap(configmaps=[ObjectName("llm", "kube-root-ca.crt")], secrets=[ObjectName("llm", "other")])
    found = _facts(snap)
    assert found["missing_config_refs"] == [
        'secret "hf-token" does not exist in namespace llm (env HF_TOKEN of container vllm)',
        'configmap "chat-template" does not exist in namespace llm (volume template)',
    ]
    assert found["missing_config_names"] == ["secret/hf-token", "configmap/chat-template"]
    assert found["missing_pull_secrets"] == ['imagePullSecret "regcred" does not exist in namespace llm']


def test_nothing_is_said_without_the_lists_or_for_a_namespace_they_do_not_cover() -> None:
    assert _facts(Snapshot())["missing_config_refs"] == []
    snap = _snap(configmaps=[ObjectName("llm", "kube-root-ca.crt")], secrets=[ObjectName("llm", "other")])
    assert _facts(snap, namespace="research")["missing_config_refs"] == []  # a hand-made list of llm only
    snap.manifest = {"kubernetes": {"namespaces": ["llm", "research"]}}  # the collector read both
    assert len(_facts(snap, namespace="research")["missing_config_refs"]) == 2


def test_a_capped_list_says_nothing_of_a_name_not_in_it() -> None:
    snap = _snap(configmaps=[ObjectName("llm", "kube-root-ca.crt")], secrets=[ObjectName("llm", "other")])
    snap.sources["k8s/secrets.json"] = SourceStatus("ok", "5000 items (capped; more exist)")
    assert _facts(snap)["missing_config_refs"] == [
        'configmap "chat-template" does not exist in namespace llm (volume template)'
    ]


def test_ingress_tls_secret_missing_only_where_secrets_were_read() -> None:
    snap = _snap(secrets=[ObjectName("llm", "hf-token")])
    snap.ingresses = [Ingress("llm", "chat", tls_secrets=["chat-tls", "hf-token"])]
    (ingress,) = scopes(snap)["ingress"]
    assert ingress["tls_problems"] == ['spec.tls secretName chat-tls: secret "chat-tls" not found in llm']
    del snap.sources["k8s/secrets.json"]
    assert scopes(snap)["ingress"][0]["tls_problems"] is None


def _route_snap(*gateways: tuple[str, str]) -> Snapshot:
    snap = Snapshot(
        services=[Service("llm", "qwen", ports=[ServicePort(8000, "http", "http")])],
        pods=[Pod("llm", "qwen-0", labels={"app": "qwen"})],
        gateways=[Gateway(ns, name) for ns, name in gateways],
    )
    snap.services[0].selector = {"app": "qwen"}
    snap.sources["k8s/services.json"] = SourceStatus("ok")
    snap.sources["k8s/gateways.json"] = SourceStatus("ok")
    return snap


def test_route_backends_gateways_and_status() -> None:
    snap = _route_snap(("gateway-system", "inference-gateway"))
    snap.routes = [
        Route(
            "HTTPRoute",
            "llm",
            "chat",
            parents=[RouteRef("Gateway", "gateway-system", "inference-gw")],
            backends=[RouteRef("Service", "llm", "qwenn", 8000), RouteRef("Service", "llm", "qwen", 9000)],
            status=[
                RouteParentStatus(
                    RouteRef("Gateway", "llm", "gw"),
                    "example.net/c",
                    {"ResolvedRefs": {"status": "False", "reason": "BackendNotFound", "message": "no qwenn"}},
                )
            ],
        )
    ]
    (route,) = scopes(snap)["route"]
    assert route["backend_problems"] == [
        'backendRef Service qwenn:8000: services "qwenn" not found in llm',
        "backendRef Service qwen:9000: service qwen has no port 9000 (its ports: http=8000)",
    ]
    assert route["backend_fix"] == (
        "backendRefs name qwen in place of qwenn; backendRefs port 8000 of qwen in place of 9000"
    )
    assert route["parent_problems"] == [
        'parentRef Gateway gateway-system/inference-gw: gateways.gateway.networking.k8s.io "inference-gw" '
        "not found in gateway-system"
    ]
    assert route["status_problems"] == [
        "ResolvedRefs=False BackendNotFound: no qwenn (parent Gateway gw, controller example.net/c)"
    ]
    assert "pod:llm/qwen-0" in route["_links"]


def test_a_route_is_not_judged_against_lists_that_were_not_read() -> None:
    snap = _route_snap()
    snap.sources.clear()
    snap.routes = [
        Route("GRPCRoute", "llm", "g", [RouteRef("Gateway", "llm", "gw")], [RouteRef("Service", "llm", "x")])
    ]
    (route,) = scopes(snap)["route"]
    assert (route["backend_problems"], route["parent_problems"]) == (None, None)


PENDING = {"status": "Unknown", "reason": "Pending", "message": "Waiting for controller"}


def _gateway_route_snap(*gateways: Gateway) -> Snapshot:
    snap = _route_snap()
    snap.manifest = {"collected_at": "2026-12-07T10:00:00Z"}
    snap.gateways = list(gateways)
    snap.routes = [Route("HTTPRoute", "llm", "chat", [RouteRef("Gateway", g.namespace, g.name) for g in gateways])]
    return snap


def test_a_gateway_no_controller_took_in_minutes_is_a_problem_of_its_routes() -> None:
    old = Gateway("gateway-system", "gw", "envoy", {"Accepted": PENDING, "Programmed": PENDING}, "2026-12-07T09:40:00Z")
    (route,) = scopes(_gateway_route_snap(old))["route"]
    assert route["gateway_problems"] == [
        "gateway gateway-system/gw (gatewayClassName envoy): Accepted=Unknown Pending: Waiting for controller, "
        "20 min after its creation"
    ]
    assert (route["gateway_classes"], route["problem_gateways"]) == (
        ["envoy"],
        [{"namespace": "gateway-system", "name": "gw"}],
    )


def test_a_gateway_its_controller_refuses_is_quoted_whatever_its_age() -> None:
    refused = {"status": "False", "reason": "AddressNotAssigned", "message": "no address"}
    new = Gateway("llm", "gw", "eg", {"Accepted": {"status": "True"}, "Programmed": refused}, "2026-12-07T09:59:50Z")
    (route,) = scopes(_gateway_route_snap(new))["route"]
    assert route["gateway_problems"] == [
        "gateway llm/gw (gatewayClassName eg): Programmed=False AddressNotAssigned: no address"
    ]


def test_a_gateway_just_created_or_with_no_status_is_no_problem_yet() -> None:
    just_created = Gateway("llm", "new", "eg", {"Accepted": PENDING}, "2026-12-07T09:59:30Z")
    no_status = Gateway("llm", "bare", "eg", {}, "2026-12-01T00:00:00Z")
    accepted = Gateway(
        "llm", "ok", "eg", {"Accepted": {"status": "True"}, "Programmed": {"status": "True"}}, "2026-12-01T00:00:00Z"
    )
    (route,) = scopes(_gateway_route_snap(just_created, no_status, accepted))["route"]
    assert route["gateway_problems"] == []
