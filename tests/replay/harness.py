"""The recorded cluster of tests/replay/cluster, with the exec outputs recorded for it, and a way to
run llmdiag's live collection against it over real HTTP."""

from __future__ import annotations

from pathlib import Path

from diag.bundle.files import Bundle
from diag.collect.base import SourceResult, Target
from diag.collect.gpu import NVIDIA_SMI_CSV, NVIDIA_SMI_XML
from diag.collect.ray import CLI_FILES
from diag.collect.runner import collect, default_collectors
from tests.replay.server import ExecAnswer, ReplayCluster, ReplayServer

REPO = Path(__file__).resolve().parents[2]
CLUSTER = Path(__file__).with_name("cluster")
NAMESPACE = "llm"  # the kubeconfig context's namespace

# The pods that hold GPUs on each node, and the real captures their nvidia-smi answers with.
H200 = REPO / "fixtures" / "real" / "h200"
GPU_PODS = {
    "gpu-node-a": ("llm", "llama-3-8b-7c9d6b5f4-abcde", H200 / "load" / "gpu" / "h200-load"),
    "gpu-node-b": ("llm", "qwen-ray-gpu-group-worker-9zt4q", H200 / "idle" / "gpu" / "h200-idle"),
}
RAY_HEAD = ("llm", "qwen-ray-head-x7k2p")
RAY_LIVE = REPO / "tests" / "fixtures" / "ray-live"
# bundle file the Ray collector writes from `ray` in the head pod -> our Ray 2.60 capture of that command
RAY_CLI_CAPTURES = {
    "ray/status.txt": "ray_status.txt",
    "ray/actors.json": "ray_list_actors_detail.json",
    "ray/placement_groups.json": "ray_list_placement_groups_detail.json",
    "ray/nodes.json": "ray_list_nodes_detail.json",
}
VLLM_POD = ("llm", "llama-3-8b-7c9d6b5f4-abcde", "8000")


def recorded_cluster() -> ReplayCluster:
    """The cluster bundle as an API, nvidia-smi answering in the GPU pods and `ray` in the head."""
    cluster = ReplayCluster.from_bundle(Bundle.open(CLUSTER))
    for namespace, pod, capture in GPU_PODS.values():
        xml, csv = capture.with_suffix(".xml").read_text(), capture.with_suffix(".csv").read_text()
        cluster.exec_answers[(namespace, pod, tuple(NVIDIA_SMI_XML))] = ExecAnswer(stdout=xml)
        cluster.exec_answers[(namespace, pod, tuple(NVIDIA_SMI_CSV))] = ExecAnswer(stdout=csv)
    for rel, argv in CLI_FILES:
        output = (RAY_LIVE / RAY_CLI_CAPTURES[rel]).read_text()
        cluster.exec_answers[(*RAY_HEAD, tuple(argv))] = ExecAnswer(stdout=output)
    return cluster


def live_target(kubeconfig: Path, **overrides: object) -> Target:
    """A Target for the replay server: short timeouts, quick scrapes, no local GPU."""
    settings: dict = {
        "kubeconfig": str(kubeconfig),
        "local_gpu": False,
        "scrapes": 2,
        "scrape_interval_s": 0.2,
        "source_timeout_s": 15.0,
        "total_timeout_s": 90.0,
        "log_tail_lines": 100,
    }
    settings.update(overrides)
    return Target(**settings)


def collect_from(server: ReplayServer, folder: Path, **overrides: object) -> tuple[Bundle, list[SourceResult]]:
    """Every default collector against the replay server, as `llmdiag collect` runs them."""
    kubeconfig = server.write_kubeconfig(folder, namespace=NAMESPACE)
    target = live_target(kubeconfig, **overrides)
    return collect(target, default_collectors(target))
