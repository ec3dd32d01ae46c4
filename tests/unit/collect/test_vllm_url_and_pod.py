"""A vLLM pod that --vllm-url also names by its address is read once, by URL (the join puts that server
in its pod: tests/unit/link/test_url_server_join.py); other pods are still read through the proxy."""

from __future__ import annotations

import json

import pytest

from diag.bundle.files import Bundle
from diag.collect import runner
from diag.collect.base import Sink, Target
from diag.parsers.kubernetes import parse_pods_document


def _pod(name: str, ip: str) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "serving", "uid": name},
        "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
                                 "args": ["--model", "m", "--port", "8080"]}]},
        "status": {"phase": "Running", "podIP": ip},
    }  # fmt: skip


class _NoKube:
    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"the pod was read through the API server ({name})")


def _context(urls: list[str], pods: list[dict]) -> runner.CollectContext:
    ctx = runner.CollectContext(Target(vllm_urls=urls), Sink(Bundle()), _NoKube())  # type: ignore[arg-type]
    ctx.publish_pods(parse_pods_document(json.loads(json.dumps({"kind": "List", "items": pods}))))
    return ctx


def test_a_pod_the_url_names_is_not_read_again_through_the_proxy() -> None:
    for url in ("http://10.0.0.5:8080", "10.0.0.5:8080", "http://10.0.0.5:8080/"):
        assert runner._vllm_in_pods(_context([url], [_pod("qwen-0", "10.0.0.5")])) == []


def test_the_addresses_of_urls_are_their_host_and_port() -> None:
    assert runner._addresses(["http://10.0.0.5:8080", "https://vllm.example", "10.0.0.6", "http://h:notaport"]) == {
        ("10.0.0.5", 8080), ("vllm.example", 443), ("10.0.0.6", 80)}  # fmt: skip


def test_a_pod_at_another_address_is_still_read_through_the_proxy() -> None:
    ctx = _context(["http://10.0.0.5:8080"], [_pod("qwen-0", "10.0.0.5"), _pod("qwen-1", "10.0.0.6")])
    with pytest.raises(AssertionError, match="through the API server"):
        runner._vllm_in_pods(ctx)
