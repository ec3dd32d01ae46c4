"""Secrets are read by name only: asked for as metadata, and cut to their names whatever comes back;
the Gateway API lists are "skipped" where their CRDs are not installed. Through the real collector,
the real `kubernetes` client and the replay API server over HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diag.collect.kube import METADATA_ONLY_ACCEPT
from tests.replay.harness import NAMESPACE, collect_from, recorded_cluster
from tests.replay.server import ReplayCluster, ReplayServer

SECRET_VALUE = "cGxhbnRTZWNyZXQwMDcw"  # base64 of a planted value
APPLIED_VALUE = "plantAppliedAnnotation0071"


def _secret(name: str) -> dict:
    applied = {"apiVersion": "v1", "kind": "Secret", "stringData": {"token": APPLIED_VALUE}}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"uid-{name}",
            "creationTimestamp": "2026-11-28T09:40:10Z",
            "labels": {"app": "llama"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": json.dumps(applied)},
        },
        "type": "Opaque",
        "data": {"token": SECRET_VALUE},
    }


def _cluster() -> ReplayCluster:
    cluster = recorded_cluster()
    cluster.objects["secrets"] = [_secret("hf-token"), _secret("regcred")]
    cluster.objects["configmaps"] = [
        {"metadata": {"name": "kube-root-ca.crt", "namespace": NAMESPACE}, "data": {"ca.crt": "-----BEGIN ..."}}
    ]
    return cluster


@pytest.mark.parametrize("server_honours_accept", [True, False], ids=["metadata answer", "whole objects"])
def test_secrets_reach_the_bundle_as_names_and_nothing_else(tmp_path: Path, server_honours_accept: bool) -> None:
    with ReplayServer(_cluster(), metadata_only_lists=server_honours_accept) as server:
        bundle, results = collect_from(server, tmp_path)
        asked = [r for r in server.seen() if r.info is not None and r.info.resource == "secrets"]
    assert [(r.info.verb, r.accept) for r in asked if r.info is not None] == [("list", METADATA_ONLY_ACCEPT)]
    raw = bundle.files["k8s/secrets.json"]
    assert SECRET_VALUE.encode() not in raw and APPLIED_VALUE.encode() not in raw
    assert all(
        SECRET_VALUE.encode() not in data and APPLIED_VALUE.encode() not in data for data in bundle.files.values()
    )
    items = json.loads(raw)["items"]
    assert [(i["kind"], sorted(i), sorted(i["metadata"])) for i in items] == [
        ("Secret", ["apiVersion", "kind", "metadata"], ["creationTimestamp", "name", "namespace", "uid"])
    ] * 2
    assert [i["metadata"]["name"] for i in items] == ["hf-token", "regcred"]
    assert "ok" == next(r.status for r in results if r.name == "k8s/secrets.json")


def test_a_hand_made_secrets_list_is_read_for_its_names_alone(tmp_path: Path) -> None:
    """`kubectl get secrets -o json` holds the data: the parser keeps names; no report can show data."""
    from diag.parsers.kubernetes_config import parse_secrets

    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": [_secret("hf-token")]})
    assert [(s.namespace, s.name) for s in parse_secrets(text)] == [(NAMESPACE, "hf-token")]


def test_gateway_api_lists_are_skipped_where_the_crds_are_not_installed(tmp_path: Path) -> None:
    with ReplayServer(_cluster()) as server:
        bundle, results = collect_from(server, tmp_path)
    status = {r.name: (r.status, r.detail) for r in results}
    for kind in ("gateways", "httproutes", "grpcroutes"):
        assert status[f"k8s/{kind}.json"] == ("skipped", "the gateway.networking.k8s.io/v1 CRDs are not installed")
        assert f"k8s/{kind}.json" not in bundle.files


def test_gateway_api_lists_are_read_where_installed_and_gateways_in_every_namespace(tmp_path: Path) -> None:
    cluster = _cluster()
    gateway = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": "inference-gateway", "namespace": "gateway-system"},
        "spec": {"gatewayClassName": "eg", "listeners": []},
    }
    route = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "llama", "namespace": NAMESPACE},
        "spec": {"parentRefs": [{"name": "inference-gateway", "namespace": "gateway-system"}], "rules": []},
    }
    cluster.objects.update({"gateways": [gateway], "httproutes": [route], "grpcroutes": []})
    with ReplayServer(cluster) as server:
        bundle, results = collect_from(server, tmp_path)
    status = {r.name: r.status for r in results}
    assert [status[f"k8s/{k}.json"] for k in ("gateways", "httproutes", "grpcroutes")] == ["ok"] * 3
    gateways = json.loads(bundle.files["k8s/gateways.json"])["items"]
    assert [g["metadata"]["namespace"] for g in gateways] == ["gateway-system"]  # listed across namespaces
