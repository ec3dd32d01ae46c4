"""Every parser, fed damaged versions of the fixtures' files and arbitrary text: it returns, or raises
ParseError (one line). Any other exception is a parser bug (the loader's guard would hide it as
"unexpected content", but the parser contract is ParseError)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from diag.core.errors import ParseError
from diag.parsers import (
    engine_args,
    kubernetes,
    logs,
    nvidia_smi,
    nvml,
    prom_text,
    prometheus_api,
    ray_state,
    ray_status,
    vllm,
)
from tests.fuzz.corpus import files_named
from tests.fuzz.mutate import MUTATIONS, mutate
from tests.fuzz.profiles import scaled

# parser name -> (the parser on a file's text, the bundle paths whose files it reads)
PARSERS: dict[str, tuple[Callable[[str], object], str]] = {
    "kubernetes.parse_pods": (kubernetes.parse_pods, "k8s/pods.json"),
    "kubernetes.parse_events": (kubernetes.parse_events, "k8s/events.json"),
    "kubernetes.parse_nodes": (kubernetes.parse_nodes, "k8s/nodes.json"),
    "kubernetes.parse_services": (kubernetes.parse_services, "k8s/services.json"),
    "kubernetes.parse_endpoints": (kubernetes.parse_endpoints, "k8s/endpoints.json"),
    "kubernetes.parse_endpointslices": (kubernetes.parse_endpointslices, "k8s/endpointslices.json"),
    "kubernetes.parse_workloads": (lambda t: kubernetes.parse_workloads(t, "Deployment"), "k8s/deployments.json"),
    "kubernetes.parse_hpas": (kubernetes.parse_hpas, "k8s/hpa.json"),
    "kubernetes.parse_daemonsets": (kubernetes.parse_daemonsets, "k8s/daemonsets.json"),
    "kubernetes.parse_rayclusters": (kubernetes.parse_rayclusters, "k8s/rayclusters.json"),
    "kubernetes.parse_rayservices": (kubernetes.parse_rayservices, "k8s/rayservices.json"),
    "kubernetes.recover_truncated_list": (kubernetes.recover_truncated_list, "k8s/pods.json"),
    "logs.scan_log": (logs.scan_log, ".log"),
    "ray_status.parse_ray_status": (ray_status.parse_ray_status, "ray/status.txt"),
    "ray_status.parse_cluster_status_json": (ray_status.parse_cluster_status_json, "ray/cluster_status.json"),
    "ray_state.parse_actors": (ray_state.parse_actors, "ray/actors.json"),
    "ray_state.parse_placement_groups": (ray_state.parse_placement_groups, "ray/placement_groups.json"),
    "ray_state.parse_nodes": (ray_state.parse_nodes, "ray/nodes.json"),
    "ray_state.parse_nodes_summary": (ray_state.parse_nodes_summary, "ray/nodes_summary.json"),
    "ray_state.parse_logical_actors": (ray_state.parse_logical_actors, "ray/logical_actors.json"),
    "nvml.parse_nvml_json": (lambda t: nvml.parse_nvml_json(t, "host"), ".nvml.json"),
    "nvidia_smi.parse_xml": (lambda t: nvidia_smi.parse_xml(t, "host"), ".xml"),
    "nvidia_smi.parse_csv": (lambda t: nvidia_smi.parse_csv(t, "host"), ".csv"),
    "prom_text.parse_exposition": (prom_text.parse_exposition, ".txt"),
    "prometheus_api.parse_prom_answer": (lambda t: prometheus_api.parse_prom_answer(t, "q"), "prometheus/"),
    "vllm.parse_models": (vllm.parse_models, ".models.json"),
    "vllm.parse_health": (vllm.parse_health, ".health.txt"),
    "engine_args.parse_engine_args": (lambda t: engine_args.parse_engine_args(t.splitlines(), []), ".cmdline.txt"),
}


def _inputs(suffix: str) -> st.SearchStrategy[bytes]:
    corpus = [f for f in files_named(suffix) if len(f) < 2_000_000] or [b""]
    damaged = st.builds(mutate, st.sampled_from(corpus), st.sampled_from(sorted(MUTATIONS)), st.integers(0, 2**32))
    return st.one_of(damaged, st.binary(max_size=300), st.sampled_from(corpus))


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_a_parser_returns_or_raises_parse_error(name: str) -> None:
    parse, suffix = PARSERS[name]

    @scaled(12)
    @given(_inputs(suffix))
    def check(data: bytes) -> None:
        try:
            parse(data.decode("utf-8", errors="replace"))
        except ParseError as e:
            assert "\n" not in str(e).strip(), f"a ParseError is one line: {e!r}"

    check()
