"""The Ray layer's derived facts: resource fits under the dashboard's camelCase, why a placement group
can never be placed, failed versus intended actor deaths, GPU overrides on KubeRay pods, version skew,
and the collector's word on an unreachable dashboard."""

from __future__ import annotations

import pytest

from diag.facts import ray, ray_pods
from diag.link.join import join
from diag.snapshot.clock import Clock
from diag.snapshot.model import (
    Container,
    PlacementGroup,
    Pod,
    RayActor,
    RayClusterSpec,
    RayDemand,
    RayNode,
    RayStatus,
    RayWorkerGroup,
    Snapshot,
)

NS = "llm-serving"


def node(node_id: str, **resources: float) -> RayNode:
    return RayNode(node_id=node_id, state="ALIVE", resources_total=dict(resources))


@pytest.mark.parametrize(
    ("name", "camel"),
    [  # the renames seen in the Ray 2.60 capture (shared/reference/ray-live/README.md)
        ("llama3_8b_gpu", "llama38BGpu"),
        ("node:__internal_head__", "node:InternalHead"),
        ("object_store_memory", "objectStoreMemory"),
        ("GPU", "GPU"),
    ],
)
def test_dashboard_camel_case_of_resource_names(name: str, camel: str) -> None:
    assert ray.dashboard_name(name) == camel


def test_a_request_fits_totals_under_either_spelling() -> None:
    camel_totals = {"CPU": 16.0, "GPU": 2.0, "llama38BGpu": 1.0}
    assert ray.fits({"GPU": 1.0, "llama3_8b_gpu": 1.0}, camel_totals)
    assert not ray.fits({"llama3_70b_gpu": 1.0}, camel_totals)
    assert ray.fits({"node:10.0.0.1": 0.0}, camel_totals)  # a zero request asks for nothing


def test_capacity_per_node_names_the_largest_offer() -> None:
    capacity = ray.Capacity.of(Snapshot(), [node("a", CPU=8.0, GPU=2.0), node("b", CPU=8.0, GPU=1.0)])
    assert capacity is not None and capacity.per_node
    assert not capacity.fits({"GPU": 4.0})
    assert capacity.shortfall({"GPU": 4.0, "CPU": 1.0}) == "GPU 4 asked, at most 2 on one node"
    assert capacity.shortfall({"h200_gpu": 1.0}) == "h200_gpu 1 asked, none offered"
    # each resource exists, but not together on one node
    split = ray.Capacity.of(Snapshot(), [node("a", CPU=8.0), node("b", GPU=1.0)])
    assert not split.fits({"CPU": 1.0, "GPU": 1.0})
    assert "no single node has them all" in split.shortfall({"CPU": 1.0, "GPU": 1.0})


def test_capacity_falls_back_on_the_cluster_totals_of_ray_status() -> None:
    status = RayStatus(usage={"GPU": (1.0, 2.0), "llama38BGpu": (0.0, 1.0)})
    capacity = ray.Capacity.of(Snapshot(ray_status=status), [])
    assert capacity is not None and not capacity.per_node
    assert capacity.fits({"llama3_8b_gpu": 1.0})
    assert capacity.shortfall({"GPU": 3.0}) == "GPU 3 asked, at most 2 in the whole cluster"
    assert ray.Capacity.of(Snapshot(), []) is None  # nothing to compare with: unknown


def test_infeasible_actors_leave_out_those_waiting_in_a_placement_group() -> None:
    snap = Snapshot(
        ray_nodes=[node("n1", CPU=8.0, GPU=1.0)],
        ray_actors=[
            RayActor("a" * 32, "Big", name="big", state="PENDING_CREATION", required_resources={"GPU": 2.0}),
            RayActor(
                "b" * 32,
                "InGroup",
                state="PENDING_CREATION",
                required_resources={"GPU": 2.0},
                placement_group_id="p" * 36,
            ),
            RayActor("c" * 32, "Fits", state="PENDING_CREATION", required_resources={"GPU": 1.0}),
        ],
        ray_status=RayStatus(
            demands=[RayDemand({"GPU": 2.0}, 1, "task_or_actor"), RayDemand({"GPU": 2.0}, 1, "placement_group", "PACK")]
        ),
    )
    facts = ray.cluster_facts(snap)
    assert facts["infeasible_actors"] == [
        "actor big (Big, aaaaaaaa) requires {GPU: 2}: GPU 2 asked, at most 1 on one node"
    ]
    assert facts["infeasible_demands"] == [
        "ray status: {GPU: 2}: 1+ pending tasks/actors (GPU 2 asked, at most 1 on one node)"
    ]


def pg(strategy: str | None, bundles: list[dict[str, float]], scheduling_state: str | None = None) -> PlacementGroup:
    return PlacementGroup(
        "f" * 36, state="PENDING", strategy=strategy, bundles=bundles, scheduling_state=scheduling_state
    )


def test_strict_pack_larger_than_any_node() -> None:
    nodes = [node("a", CPU=4.0, GPU=2.0), node("b", CPU=4.0, GPU=2.0)]
    reasons = ray._never_placeable(pg("STRICT_PACK", [{"GPU": 2.0}, {"GPU": 1.0, "CPU": 1.0}]), nodes)
    assert reasons == [
        "STRICT_PACK puts all bundles on one node, {CPU: 1, GPU: 3} in all: GPU 3 asked, at most 2 on one node"
    ]
    assert ray._never_placeable(pg("PACK", [{"GPU": 2.0}, {"GPU": 1.0, "CPU": 1.0}]), nodes) == []


def test_strict_spread_counts_only_nodes_that_can_hold_a_bundle() -> None:
    nodes = [node("head", CPU=8.0), node("w1", CPU=16.0, GPU=1.0), node("w2", CPU=16.0, GPU=1.0)]
    reasons = ray._never_placeable(pg("STRICT_SPREAD", [{"GPU": 1.0}] * 3), nodes)
    assert reasons == ["STRICT_SPREAD puts each of its 3 bundles on its own node; 2 of the 3 node(s) can hold one"]
    assert ray._never_placeable(pg("STRICT_SPREAD", [{"GPU": 1.0}] * 2), nodes) == []


def test_the_scheduler_word_stands_without_node_totals() -> None:
    assert ray._never_placeable(pg(None, [{"GPU": 4.0}], "INFEASIBLE"), []) == [
        "Ray's scheduler marks it INFEASIBLE (stats.scheduling_state)"
    ]
    assert ray._never_placeable(pg(None, [{"GPU": 4.0}]), [node("a", GPU=2.0)]) == [
        "bundle {GPU: 4} fits no node: GPU 4 asked, at most 2 on one node"
    ]


@pytest.mark.parametrize(
    ("cause", "failure"),
    [
        (
            "actor died (WORKER_DIED): The actor is dead because its "
            "worker process has died. Worker exit type: SYSTEM_ERROR",
            True,
        ),
        ("creation task failed: ModuleNotFoundError: No module named 'vllm'", True),
        ("actor died: The actor is dead because its node has died. Node Id: 8cbc70", True),
        ("actor died: The actor is dead because it was killed by `ray.kill`.", False),
        ("actor died: The actor is dead because all references to the actor were removed.", False),
        (
            "actor died: The actor is dead because its worker process has died. Worker exit type: INTENDED_USER_EXIT",
            False,
        ),
    ],
)
def test_failed_and_intended_deaths(cause: str, failure: bool) -> None:
    assert ray._died_of_failure(RayActor("a" * 32, "C", state="DEAD", death_cause=cause)) is failure


def test_deaths_of_one_class_and_cause_are_one_failure() -> None:
    same = "creation task failed: ModuleNotFoundError: No module named 'vllm'"
    actors = [RayActor(c * 32, "ServeReplica:qa:App", state="DEAD", death_cause=same) for c in "abc"]
    actors.append(
        RayActor("d" * 32, "ServeReplica:qa:App", state="DEAD", death_cause="creation task failed: OSError: disk full")
    )
    snap = Snapshot(ray_actors=actors)
    subjects = ray.scopes(snap, Clock.of(snap))["actor"]
    assert [s["first_of_same_deaths"] for s in subjects] == [True, False, False, True]
    assert [s["same_deaths"] for s in subjects] == [3, 3, 3, 1]


def kuberay_pod(
    name: str,
    cluster: str,
    group: str,
    *,
    args: str,
    image: str = "rayproject/ray:2.46.0-py311-gpu",
    env: dict[str, str] | None = None,
    gpus: str = "1",
    node_type: str = "worker",
    ip: str = "10.0.0.2",
) -> Pod:
    container = Container(
        "ray-worker",
        image=image,
        command=["/bin/bash", "-c", "--"],
        args=[args],
        env=env or {},
        limits={"nvidia.com/gpu": gpus},
    )
    return Pod(
        NS,
        name,
        pod_ip=ip,
        containers=[container],
        ray_cluster=cluster,
        ray_group=group,
        ray_node_type=node_type,
        phase="Running",
    )


def test_gpu_overrides_name_the_spec_the_start_line_and_the_environment() -> None:
    service = RayClusterSpec(
        "RayService", NS, "llama", worker_groups=[RayWorkerGroup("gpu-group", ray_start_params={"num-gpus": "0"})]
    )
    pod = kuberay_pod(
        "llama-x7k2p-gpu-group-worker-abcde",
        "llama-x7k2p",
        "gpu-group",
        args="ulimit -n 65536; ray start  --address=llama-head-svc:6379  --block  --num-gpus=0 ",
        env={"CUDA_VISIBLE_DEVICES": ""},
    )
    snap = Snapshot(pods=[pod], ray_clusters=[service])
    assert ray_pods.gpu_overrides(pod, snap) == [
        'RayService llm-serving/llama workerGroupSpecs[gpu-group].rayStartParams num-gpus: "0"',
        "container ray-worker runs ray start --num-gpus=0",
        'container ray-worker sets CUDA_VISIBLE_DEVICES=""',
    ]
    assert ray_pods.kuberay_object(pod, snap) == "rayservice/llama"


def test_a_ray_node_with_fewer_gpus_than_its_pod() -> None:
    pod = kuberay_pod(
        "c-gpu-group-worker-1",
        "c",
        "gpu-group",
        args="ulimit -n 65536; ray start  --num-gpus=0 ",
        gpus="2",
        ip="10.0.0.9",
    )
    hidden = RayNode("n" * 56, node_ip="10.0.0.9", state="ALIVE", resources_total={"CPU": 16.0})
    unknown = RayNode("u" * 56, node_ip="10.0.0.10", state="ALIVE")
    snap = join(Snapshot(pods=[pod], ray_nodes=[hidden, unknown]))
    subjects = {s["node_id"]: s for s in ray.scopes(snap, Clock.of(snap))["ray_node"]}
    assert subjects[hidden.node_id]["gpu_total"] == 0.0 and subjects[hidden.node_id]["pod_gpu_limit"] == 2.0
    assert subjects[unknown.node_id]["gpu_total"] is None and subjects[unknown.node_id]["pod_gpu_limit"] is None


def test_version_skew_from_image_tags_and_from_rays_own_error() -> None:
    head = kuberay_pod(
        "c-head-1",
        "c",
        "headgroup",
        args="ray start --head",
        image="rayproject/ray-llm:2.46.0-py311-cu124",
        node_type="head",
    )
    worker = kuberay_pod(
        "c-gpu-group-worker-1", "c", "gpu-group", args="ray start", image="rayproject/ray-llm:2.47.1-py311-cu124"
    )
    custom = kuberay_pod(
        "c-gpu-group-worker-2", "c", "gpu-group", args="ray start", image="registry.example.com/llm/serving:v3"
    )
    worker.containers[0].previous_logs = (
        "RuntimeError: Version mismatch: The cluster was started with:\n    Ray: 2.46.0\n    Python: 3.11.11\n"
        "This process on node 10.0.0.2 was started with:\n    Ray: 2.47.1\n    Python: 3.11.11\n"
    )
    snap = Snapshot(pods=[head, worker, custom])
    assert ray_pods.image_ray_version(custom) is None
    assert ray_pods.version_mismatches(snap) == [
        (
            "llm-serving/c: head c-head-1 runs Ray 2.46.0 (rayproject/ray-llm:2.46.0-py311-cu124); "
            "workers c-gpu-group-worker-1 run Ray 2.47.1 (rayproject/ray-llm:2.47.1-py311-cu124)"
        )
    ]
    assert ray_pods.version_mismatch_errors(ray_pods.logged_version_mismatches(snap)) == [
        (
            "llm-serving/c-gpu-group-worker-1 [ray-worker]: the cluster runs Ray 2.46.0 / Python 3.11.11, "
            "this process (node 10.0.0.2) Ray 2.47.1 / Python 3.11.11"
        )
    ]


@pytest.mark.parametrize(
    ("sources", "unreachable"),
    [
        ({"ray/dashboard": "failed", "ray/status.txt": "ok"}, True),  # the collector fell back to exec
        ({"ray/cluster_status.json": "failed", "ray/actors.json": "failed"}, True),
        ({"ray/nodes_summary.json": "failed", "ray/actors.json": "ok"}, False),  # one endpoint, not the head
        ({"k8s/pods.json": "ok"}, False),
    ],
)
def test_head_unreachable_is_the_collectors_word(sources: dict[str, str], unreachable: bool) -> None:
    manifest = {
        "sources": {name: {"status": status, "detail": f"{name}: {status}"} for name, status in sources.items()}
    }
    assert ray._head_unreachable(Snapshot(manifest=manifest)) is unreachable


def test_placement_group_strategy_from_a_demand_line_of_several_bundle_shapes() -> None:
    line = [
        RayDemand({"CPU": 1.0, "GPU": 1.0}, 1, "placement_group", "STRICT_SPREAD", 1),
        RayDemand({"GPU": 1.0}, 1, "placement_group", "STRICT_SPREAD", 3),
    ]
    group = PlacementGroup(
        "g" * 36, state="PENDING", bundles=[{"CPU": 1.0, "GPU": 1.0}, {"GPU": 1.0}, {"GPU": 1.0}, {"GPU": 1.0}]
    )
    other = PlacementGroup(
        "h" * 36, state="PENDING", bundles=[{"GPU": 1.0}, {"GPU": 1.0}]
    )  # shapes do not match the line
    snap = join(Snapshot(ray_status=RayStatus(demands=line), placement_groups=[group, other]))
    assert [p.strategy for p in snap.placement_groups] == ["STRICT_SPREAD", None]


def test_unschedulable_lines_come_from_any_pods_log() -> None:
    line = (
        "2026-12-03 02:10:41,687\tWARNING worker.py:1034 -- The actor "
        "or task with ID cb230a572350ff44ffffffff01000000 cannot be "
        "scheduled right now. It requires {CPU: 1.000000}, {llama3_70b_gpu: "
        "1.000000} for placement, however the cluster currently "
        "cannot provide the requested resources."
    )
    driver = Container("driver", log_signals={"ray_cannot_schedule": [line]})
    snap = Snapshot(pods=[Pod(NS, "rayjob-eval-submitter-x2k9q", containers=[driver])])
    assert ray.cluster_facts(snap)["unschedulable_log_lines"] == [f"{NS}/rayjob-eval-submitter-x2k9q: {line}"]
