"""Growth of the cross-layer joins on a KubeRay fleet, the shape the tiled bundles of generate.py lack.

Built in code (the parsers are measured by bench_analyze.py): N GPU nodes, each with a KubeRay worker
pod whose nvidia-smi capture shows 8 GPUs, a Ray node with 4 live actors of 2 GPUs each (the same pids
in every pod, as containers number their processes), a vLLM Deployment with its HPA, 100 events, and a
RayCluster per 10 nodes. Prints the CPU seconds of join, facts, rules and the history pass per size,
and how each grew against the size before it (1.0: linear).

    python bench/bench_kuberay_joins.py [N ...]      (default: 125 250 500 1000)
"""

from __future__ import annotations

import gc
import sys
import time

from diag.analyze import settings_with_overrides
from diag.core.rules_dir import builtin_rules_dir
from diag.engine.catalogue import load_rules
from diag.engine.config import Config
from diag.engine.rules import evaluate
from diag.facts import build_facts
from diag.link.join import join
from diag.snapshot.clock import Clock
from diag.snapshot.model import (
    GPU,
    HPA,
    Container,
    Event,
    GPUProcess,
    Node,
    Pod,
    RayActor,
    RayClusterSpec,
    RayNode,
    RayWorkerGroup,
    Snapshot,
    SourceStatus,
    VllmServer,
    Workload,
)
from diag.verdict.history import find_history

SOURCES = (
    "k8s/pods.json",
    "k8s/nodes.json",
    "k8s/events.json",
    "k8s/hpa.json",
    "k8s/rayclusters.json",
    "ray/nodes.json",
    "ray/actors.json",
)


def fleet(nodes: int) -> Snapshot:
    snap = Snapshot(
        sources={name: SourceStatus("ok") for name in SOURCES}, manifest={"collected_at": "2026-12-01T14:00:00Z"}
    )
    for i in range(nodes):
        node, namespace, cluster = f"gpu-node-{i}", f"team-{i % 50}", f"rc-{i // 10}"
        gpus = {"nvidia.com/gpu": "8"}
        snap.nodes.append(Node(name=node, capacity=gpus, allocatable=gpus, conditions={"Ready": {"status": "True"}}))
        worker = Pod(
            namespace=namespace,
            name=f"{cluster}-worker-{i}",
            node_name=node,
            phase="Running",
            pod_ip=f"10.{i // 250}.{i % 250}.1",
            labels={"ray.io/cluster": cluster, "ray.io/group": "gpu"},
            ray_cluster=cluster,
            ray_group="gpu",
            containers=[
                Container(name="ray-worker", image="rayproject/ray:2.49.0", limits=gpus, requests=gpus, state="running")
            ],
        )
        server = Pod(
            namespace=namespace,
            name=f"vllm-{i}-7f8d9c6b5d-8q7hc",
            node_name=node,
            phase="Running",
            owner_kind="ReplicaSet",
            owner_name=f"vllm-{i}-7f8d9c6b5d",
            labels={"app": f"vllm-{i}"},
            containers=[
                Container(
                    name="vllm", image="vllm/vllm-openai:v0.10.1", command=["vllm", "serve", "m"], state="running"
                )
            ],
        )
        snap.pods += [worker, server]
        snap.workloads.append(
            Workload(
                kind="Deployment",
                namespace=namespace,
                name=f"vllm-{i}",
                replicas=1,
                ready_replicas=1,
                template_labels={"app": f"vllm-{i}"},
            )
        )
        snap.hpas.append(
            HPA(
                namespace=namespace,
                name=f"vllm-{i}",
                target_kind="Deployment",
                target_name=f"vllm-{i}",
                min_replicas=1,
                max_replicas=4,
                current_replicas=1,
            )
        )
        snap.vllm_servers.append(VllmServer(name=server.name, namespace=namespace))
        node_id = f"{i:056x}"
        snap.ray_nodes.append(
            RayNode(
                node_id=node_id,
                node_ip=worker.pod_ip,
                state="ALIVE",
                resources_total={"GPU": 8.0, "CPU": 64.0},
                resources_available={"GPU": 0.0, "CPU": 8.0},
            )
        )
        for a in range(4):
            snap.ray_actors.append(
                RayActor(
                    actor_id=f"{i:024x}{a:08x}",
                    class_name="RayWorkerWrapper",
                    state="ALIVE",
                    node_id=node_id,
                    pid=1000 + a,
                    gpu_ids=[str(2 * a), str(2 * a + 1)],
                )
            )
        for g in range(8):
            snap.gpus.append(
                GPU(
                    host=worker.name,
                    index=g,
                    uuid=f"GPU-{i:08x}-0000-4000-8000-{g:012x}",
                    memory_used_mib=70000.0,
                    memory_total_mib=81559.0,
                    processes=[GPUProcess(pid=1000 + g // 2)],
                )
            )
        for e in range(100):
            snap.events.append(
                Event(
                    namespace=namespace,
                    involved_kind="Pod",
                    involved_name=(worker if e % 2 else server).name,
                    reason="Pulled",
                    message=f'Container image "{server.containers[0].image}" already present on machine',
                    type="Normal",
                    last_seen="2026-11-30T08:00:00Z",
                )
            )
    for c in range((nodes + 9) // 10):
        snap.ray_clusters.append(
            RayClusterSpec(
                kind="RayCluster",
                namespace=f"team-{(c * 10) % 50}",
                name=f"rc-{c}",
                worker_groups=[RayWorkerGroup(name="gpu", replicas=10)],
            )
        )
    return snap


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [125, 250, 500, 1000]
    rules = load_rules([builtin_rules_dir()])
    settings = settings_with_overrides(builtin_rules_dir(), Config())
    gc.disable()  # as the analysis runs (diag.analyze)
    print(f"{'nodes':>6} {'join s':>7} {'facts s':>8} {'rules s':>8} {'history s':>9} {'total s':>8} {'growth':>7}")
    before: tuple[int, float] | None = None
    for nodes in sizes:
        snap = fleet(nodes)
        started = time.process_time()
        snap = join(snap)
        joined = time.process_time()
        clock = Clock.of(snap, settings["history_window_seconds"])
        facts = build_facts(snap, clock, settings)
        built = time.process_time()
        found = evaluate(rules, facts, settings)
        evaluated = time.process_time()
        find_history(snap, clock, facts, found.findings, rules, settings, lambda f: f)
        done = time.process_time()
        total = done - started
        growth = f"{(total / before[1]) / (nodes / before[0]):.2f}" if before else ""
        print(
            f"{nodes:>6} {joined - started:>7.2f} {built - joined:>8.2f} "
            f"{evaluated - built:>8.2f} {done - evaluated:>9.2f} {total:>8.2f} {growth:>7}"
        )
        before = (nodes, total)
        gc.collect()


if __name__ == "__main__":
    main()
