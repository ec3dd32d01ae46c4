"""The list and log requests are built on the client's ApiClient, without its generated API classes
(loading CoreV1Api cost 0.4 s of CPU at the start of each collection): their paths must be the ones
those generated methods request."""

from __future__ import annotations

import inspect
import re

import kubernetes.client
import pytest

from diag.collect.kube import KINDS

# kind -> (generated class, method within a namespace, method across namespaces or for a cluster kind)
_GENERATED = {
    "pods": ("CoreV1Api", "list_namespaced_pod", "list_pod_for_all_namespaces"),
    "events": ("CoreV1Api", "list_namespaced_event", "list_event_for_all_namespaces"),
    "nodes": ("CoreV1Api", None, "list_node"),
    "services": ("CoreV1Api", "list_namespaced_service", "list_service_for_all_namespaces"),
    "endpoints": ("CoreV1Api", "list_namespaced_endpoints", "list_endpoints_for_all_namespaces"),
    "endpointslices": ("DiscoveryV1Api", "list_namespaced_endpoint_slice", "list_endpoint_slice_for_all_namespaces"),
    "deployments": ("AppsV1Api", "list_namespaced_deployment", "list_deployment_for_all_namespaces"),
    "statefulsets": ("AppsV1Api", "list_namespaced_stateful_set", "list_stateful_set_for_all_namespaces"),
    "daemonsets": ("AppsV1Api", "list_namespaced_daemon_set", "list_daemon_set_for_all_namespaces"),
    "hpa": (
        "AutoscalingV2Api",
        "list_namespaced_horizontal_pod_autoscaler",
        "list_horizontal_pod_autoscaler_for_all_namespaces",
    ),
    "ingresses": ("NetworkingV1Api", "list_namespaced_ingress", "list_ingress_for_all_namespaces"),
    "poddisruptionbudgets": (
        "PolicyV1Api",
        "list_namespaced_pod_disruption_budget",
        "list_pod_disruption_budget_for_all_namespaces",
    ),
    "networkpolicies": ("NetworkingV1Api", "list_namespaced_network_policy", "list_network_policy_for_all_namespaces"),
    "persistentvolumeclaims": (
        "CoreV1Api",
        "list_namespaced_persistent_volume_claim",
        "list_persistent_volume_claim_for_all_namespaces",
    ),
    "configmaps": ("CoreV1Api", "list_namespaced_config_map", "list_config_map_for_all_namespaces"),
    "secrets": ("CoreV1Api", "list_namespaced_secret", "list_secret_for_all_namespaces"),
}
_CUSTOM = {
    "rayclusters": "ray.io/v1",
    "rayservices": "ray.io/v1",
    "gateways": "gateway.networking.k8s.io/v1",
    "httproutes": "gateway.networking.k8s.io/v1",
    "grpcroutes": "gateway.networking.k8s.io/v1",
}


def _resource_path(api: str, method: str) -> str:
    source = inspect.getsource(getattr(getattr(kubernetes.client, api), f"_{method}_serialize"))
    return re.search(r"resource_path='([^']+)'", source).group(1)


@pytest.mark.parametrize("kind", sorted(_GENERATED))
def test_a_list_requests_the_path_the_generated_method_requests(kind: str) -> None:
    api, namespaced, cluster = _GENERATED[kind]
    spec = KINDS[kind]
    assert spec.path(None) == _resource_path(api, cluster)
    if namespaced is None:
        assert not spec.namespaced and spec.path("llm") == spec.path(None)
    else:
        assert spec.path("llm") == _resource_path(api, namespaced).replace("{namespace}", "llm")


@pytest.mark.parametrize("kind", sorted(_CUSTOM))
def test_a_custom_resource_list_requests_the_custom_objects_paths(kind: str) -> None:
    group, version = _CUSTOM[kind].split("/")
    fill = {"{group}": group, "{version}": version, "{plural}": kind, "{namespace}": "llm"}
    expected = {}
    for scope, method in (("namespaced", "list_namespaced_custom_object"), ("cluster", "list_cluster_custom_object")):
        path = _resource_path("CustomObjectsApi", method)
        for placeholder, value in fill.items():
            path = path.replace(placeholder, value)
        expected[scope] = path
    assert (KINDS[kind].path("llm"), KINDS[kind].path(None)) == (expected["namespaced"], expected["cluster"])


def test_every_kind_listed_is_checked_here() -> None:
    assert set(KINDS) == set(_GENERATED) | set(_CUSTOM)


def test_a_namespace_is_one_path_segment() -> None:
    assert KINDS["pods"].path("a/b c") == "/api/v1/namespaces/a%2Fb%20c/pods"
