"""The cross-layer lookups a fleet makes thousands of times are indexed once per snapshot (issue 9):
these check that each still joins exactly what it joined when it scanned, in the shapes a fleet has
(pids repeated in every pod, names repeated across namespaces, many KubeRay clusters)."""

from __future__ import annotations

from diag.facts import gpu as gpu_facts
from diag.facts import kubernetes, ray
from diag.link.join import join
from diag.snapshot.clock import Clock
from diag.snapshot.model import (
    GPU,
    HPA,
    Container,
    EngineArgs,
    Event,
    GPUProcess,
    Pod,
    RayActor,
    RayClusterSpec,
    RayNode,
    RayWorkerGroup,
    Snapshot,
    SourceStatus,
    VllmServer,
)

NODES = 6  # GPU nodes, one KubeRay worker pod on each
PID = 42  # the same pid in every pod, as containers number their processes


def _worker(i: int) -> Pod:
    return Pod(
        namespace="llm",
        name=f"rc-{i % 2}-worker-{i}",
        node_name=f"gpu-{i}",
        phase="Running",
        pod_ip=f"10.0.0.{i + 1}",
        labels={"ray.io/cluster": f"rc-{i % 2}", "ray.io/group": "gpu"},
        ray_cluster=f"rc-{i % 2}",
        ray_group="gpu",
        containers=[
            Container(
                name="ray-worker", limits={"nvidia.com/gpu": "2"}, requests={"nvidia.com/gpu": "2"}, state="running"
            )
        ],
    )


def _fleet() -> Snapshot:
    snap = Snapshot(
        sources={name: SourceStatus("ok") for name in ("k8s/pods.json", "k8s/events.json", "k8s/nodes.json")}
    )
    for i in range(NODES):
        worker = _worker(i)
        snap.pods.append(worker)
        node_id = f"{i:056x}"
        snap.ray_nodes.append(
            RayNode(
                node_id=node_id,
                node_ip=worker.pod_ip,
                state="ALIVE",
                resources_total={"GPU": 2.0},
                resources_available={"GPU": 1.0},
            )
        )
        # the actor on this node holds GPU 1; an actor of the same pid on every other node too
        snap.ray_actors.append(
            RayActor(
                actor_id=f"actor-{i}",
                class_name="RayWorkerWrapper",
                state="ALIVE",
                node_id=node_id,
                pid=PID,
                gpu_ids=["1"],
            )
        )
        for index in range(2):
            processes = [GPUProcess(pid=PID)] if index == 1 else []
            snap.gpus.append(
                GPU(host=worker.name, index=index, node=worker.node_name, uuid=f"GPU-{i}-{index}", processes=processes)
            )
    return join(snap)


def test_a_gpu_process_is_the_actor_of_its_own_node_though_every_pod_has_its_pid() -> None:
    snap = _fleet()
    for gpu in snap.gpus:
        if gpu.processes:
            i = int(gpu.host.rsplit("-", 1)[1])
            assert gpu.processes[0].ray_actor_id == f"actor-{i}"
            assert gpu.processes[0].pod == f"llm/{_worker(i).name}"


def test_each_gpu_has_the_ray_node_of_its_capture_pod_and_that_nodes_free_gpus() -> None:
    snap = _fleet()
    facts = gpu_facts.scopes(snap, {}, Clock.of(snap))["gpu"]
    assert len(facts) == 2 * NODES
    for fact in facts:
        i, index = fact["_subject"].split("/")[1].rsplit("-", 1)[1], fact["index"]
        assert fact["ray_node_id"] == f"{int(i):056x}"
        assert fact["ray_counts_free"] is (index == 0)  # its node's actor holds GPU 1, whatever other nodes hold


def test_a_ray_node_lists_its_own_lost_actors_and_its_clusters_servers() -> None:
    snap = _fleet()
    snap.ray_actors[0].state = "DEAD"
    snap.vllm_servers.append(VllmServer(name="llm.rc-1-worker-1", pod=f"llm/{_worker(1).name}"))
    nodes = ray.scopes(snap, Clock.of(snap))["ray_node"]
    assert [len(n["actors_lost"]) for n in nodes] == [1] + [0] * (NODES - 1)
    # rc-1's pods are the odd workers: each of its Ray nodes links the server, rc-0's do not
    assert [("vllm:llm.rc-1-worker-1" in n["_links"]) for n in nodes] == [i % 2 == 1 for i in range(NODES)]


def test_an_hpa_reads_its_own_events_not_those_of_its_namesake_in_another_namespace() -> None:
    snap = _fleet()
    for namespace in ("team-a", "team-b"):
        snap.hpas.append(HPA(namespace=namespace, name="vllm", target_kind="Deployment", target_name="vllm"))
    snap.events += [
        Event(
            namespace="team-a",
            involved_kind="HorizontalPodAutoscaler",
            involved_name="vllm",
            reason="FailedGetPodsMetric",
            message="unable to get metric vllm:num_requests_waiting",
            type="Warning",
            last_seen="2026-12-01T10:00:00Z",
        ),
        Event(
            namespace="team-b",
            involved_kind="HorizontalPodAutoscaler",
            involved_name="vllm",
            reason="FailedGetPodsMetric",
            message="old",
            type="Warning",
            last_seen="2026-11-20T10:00:00Z",
        ),
    ]
    snap.manifest = {"collected_at": "2026-12-01T10:05:00Z"}
    hpas = kubernetes.scopes(snap, kubernetes.lookups(snap, Clock.of(snap, 3600)))["hpa"]
    by_namespace = {h["namespace"]: h for h in hpas}
    assert by_namespace["team-a"]["warning_events"] == [
        "FailedGetPodsMetric: unable to get metric vllm:num_requests_waiting"
    ]
    assert by_namespace["team-a"]["_aged"] == []
    assert by_namespace["team-b"]["warning_events"] == []
    assert [item["what"] for item in by_namespace["team-b"]["_aged"]] == ["FailedGetPodsMetric: old"]


def test_a_rayservices_clusters_and_their_pods_and_servers() -> None:
    snap = _fleet()
    service = RayClusterSpec(kind="RayService", namespace="llm", name="rc", worker_groups=[])
    snap.ray_clusters = [
        RayClusterSpec(
            kind="RayCluster", namespace="llm", name=name, worker_groups=[RayWorkerGroup(name="gpu", replicas=3)]
        )
        for name in ("rc-0", "rc-1")
    ] + [service]
    snap.vllm_servers.append(
        VllmServer(
            name="llm.rc-0-worker-0",
            pod=f"llm/{_worker(0).name}",
            engine_args=EngineArgs(tensor_parallel_size=2, pipeline_parallel_size=1),
        )
    )
    snap = join(snap)
    assert [(g.pods_total, g.pods_running) for c in snap.ray_clusters[:2] for g in c.worker_groups] == [(3, 3), (3, 3)]
    facts = {f["name"]: f for f in kubernetes.scopes(snap, kubernetes.lookups(snap, Clock.of(snap)))["raycluster"]}
    assert facts["rc-0"]["parallel_gpus_needed"] == 2 and facts["rc-1"]["parallel_gpus_needed"] is None
    # KubeRay names a RayService's clusters <service>-<suffix>: both are its, with all their pods
    links = facts["rc"]["_links"]
    assert {"raycluster:llm/rc-0", "raycluster:llm/rc-1"} <= set(links)
    assert {link for link in links if link.startswith("pod:")} == {f"pod:llm/{_worker(i).name}" for i in range(NODES)}


def _pending_replicas() -> Snapshot:
    """GPU nodes, one tainted, and pending replicas of one template, one with a toleration of its own."""
    from diag.snapshot.model import Node

    snap = Snapshot(
        sources={name: SourceStatus("ok") for name in ("k8s/pods.json", "k8s/events.json", "k8s/nodes.json")}
    )
    gpus = {"nvidia.com/gpu": "8"}
    for i in range(NODES):
        taints = [{"key": "dedicated", "value": "training", "effect": "NoSchedule"}] if i == 0 else []
        snap.nodes.append(
            Node(
                name=f"gpu-{i}",
                labels={"nvidia.com/gpu.present": "true"},
                taints=taints,
                capacity=dict(gpus),
                allocatable=dict(gpus),
            )
        )
    for i in range(4):
        tolerations = [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}] if i == 3 else []
        snap.pods.append(
            Pod(
                namespace="llm",
                name=f"vllm-{i}",
                phase="Pending",
                tolerations=tolerations,
                node_selector={"nvidia.com/gpu.present": "true"},
                containers=[Container(name="vllm", limits=dict(gpus), requests=dict(gpus))],
            )
        )
    return join(snap)


def test_pending_replicas_share_one_placement_and_a_different_toleration_gets_its_own(monkeypatch) -> None:
    snap = _pending_replicas()
    clock = Clock.of(snap)
    placements = [pod["placement"] for pod in kubernetes.scopes(snap, kubernetes.lookups(snap, clock))["pod"]]
    assert placements[0] is placements[1] is placements[2]
    assert placements[0]["untolerated_taints"] == ["gpu-0: dedicated=training:NoSchedule"]
    assert placements[3]["untolerated_taints"] == [] and placements[3]["tolerations"] == [
        "dedicated:NoSchedule op=Exists"
    ]
    worked_out_alone = kubernetes._placement_on_nodes
    monkeypatch.setattr(kubernetes, "_placement", lambda pod, index: worked_out_alone(pod, index))
    assert [pod["placement"] for pod in kubernetes.scopes(snap, kubernetes.lookups(snap, clock))["pod"]] == placements


def test_a_vllm_server_gets_the_service_of_its_own_namespace_that_selects_its_pod() -> None:
    from diag.snapshot.model import Service, ServicePort

    snap = Snapshot(sources={"k8s/pods.json": SourceStatus("ok")})
    vllm = Container(name="vllm", command=["vllm", "serve", "m"], state="running")
    for ns in ("team-a", "team-b"):
        snap.services.append(
            Service(namespace=ns, name="other", selector={"app": "other"}, ports=[ServicePort(port=80)])
        )
        snap.services.append(Service(namespace=ns, name="llm", selector={"app": "llm"}, ports=[ServicePort(port=8000)]))
    snap.pods.append(Pod(namespace="team-b", name="llm-0", labels={"app": "llm"}, phase="Running", containers=[vllm]))
    snap = join(snap)
    assert [(s.pod, s.service) for s in snap.vllm_servers] == [("team-b/llm-0", "team-b/llm")]


def test_of_several_services_selecting_its_pod_a_vllm_server_gets_the_first_listed() -> None:
    from diag.snapshot.model import Service, ServicePort

    def service(name: str, selector: dict[str, str]) -> Service:
        return Service(namespace="llm", name=name, selector=selector, ports=[ServicePort(port=8000)])

    vllm = Container(name="vllm", command=["vllm", "serve", "m"], state="running")
    pod = Pod(namespace="llm", name="llm-0", labels={"app": "llm", "tier": "serve"}, phase="Running", containers=[vllm])
    narrower = service("narrower", {"app": "llm", "tier": "batch"})  # the pod has its first label, not its second
    by_tier = service("by-tier", {"tier": "serve"})
    by_app = service("by-app", {"app": "llm"})
    for services, expected in (
        ([narrower, by_tier, by_app], "llm/by-tier"),
        ([narrower, by_app, by_tier], "llm/by-app"),
    ):
        snap = join(
            Snapshot(sources={"k8s/pods.json": SourceStatus("ok")}, pods=[Pod(**vars(pod))], services=list(services))
        )
        assert [s.service for s in snap.vllm_servers] == [expected]
