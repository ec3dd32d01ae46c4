"""What a RayService's status says of its Serve applications and of an upgrade, as rule facts."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from diag.analyze import analyze_bundle
from diag.bundle.files import Bundle
from diag.core.rules_dir import builtin_rules_dir
from diag.engine.rules import Finding, load_rules
from diag.facts.kubernetes import _kuberay_validation, _serve_status_facts
from diag.snapshot.clock import Clock
from diag.snapshot.model import Event, RayClusterSpec, ServeStatus, Snapshot, SourceStatus
from diag.verdict.diagnosis import link_causes

NOW = datetime(2026, 12, 3, 3, 0, tzinfo=UTC)
FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"


def _service(**fields) -> RayClusterSpec:
    return RayClusterSpec(kind="RayService", namespace="ray", name="llm", **fields)


def _facts(service: RayClusterSpec) -> dict:
    return _serve_status_facts(service, Clock(now=NOW, source="test", window_s=3600))


def test_failed_and_waiting_serve_statuses_are_told_apart() -> None:
    waiting = "Deployment 'LLM' in application 'llm' has 1 replicas that have taken more than 30s to be scheduled."
    facts = _facts(
        _service(
            serve_statuses=[
                ServeStatus("active", "llm-abcde", "llm", None, "DEPLOY_FAILED", "Deploying app 'llm' failed"),
                ServeStatus("active", "llm-abcde", "llm", "LLM", "UPDATING", waiting),
                ServeStatus("active", "llm-abcde", "chat", None, "RUNNING", None),
            ]
        )
    )
    assert facts["serve_failures"] == [
        "active cluster llm-abcde: application llm: DEPLOY_FAILED: Deploying app 'llm' failed"
    ]
    assert facts["serve_waiting_for_resources"] == [
        f"active cluster llm-abcde: application llm, deployment LLM: UPDATING: {waiting}"
    ]
    assert (facts["upgrade_in_progress"], facts["upgrade_seconds"], facts["pending_not_running"]) == (False, 0.0, [])


def test_an_upgrade_is_a_pending_cluster_beside_an_active_one_not_the_first_cluster() -> None:
    first = _service(pending_cluster="llm-abcde", conditions={"UpgradeInProgress": {"status": "False"}})
    assert _facts(first)["upgrade_in_progress"] is False
    upgrade = _service(
        active_cluster="llm-abcde",
        pending_cluster="llm-fghij",
        conditions={"UpgradeInProgress": {"status": "True"}},
        condition_times={"UpgradeInProgress": "2026-12-03T02:00:00Z"},
        serve_statuses=[ServeStatus("pending", "llm-fghij", "llm", None, "DEPLOYING", None)],
    )
    facts = _facts(upgrade)
    assert (facts["upgrade_in_progress"], facts["upgrade_seconds"]) == (True, 3600.0)
    assert facts["pending_not_running"] == ["pending cluster llm-fghij: application llm: DEPLOYING"]
    # an older KubeRay without the condition: an active cluster beside the pending one is the upgrade
    assert _facts(_service(active_cluster="llm-abcde", pending_cluster="llm-fghij"))["upgrade_in_progress"] is True


def test_an_upgrade_of_unknown_start_has_unknown_age_and_a_silent_pending_cluster_is_named() -> None:
    facts = _facts(_service(active_cluster="llm-abcde", pending_cluster="llm-fghij"))
    assert facts["upgrade_seconds"] is None
    assert facts["pending_not_running"] == ["pending cluster llm-fghij: no Serve application reported yet"]


def test_kuberay_refusals_come_from_the_condition_or_from_the_event_alone() -> None:
    message = "The RayService metadata is invalid: RayService name should be no more than 47 characters"
    event = Event(
        namespace="ray",
        involved_kind="RayService",
        involved_name="llm",
        reason="InvalidRayServiceMetadata",
        message=f"ray/llm: {message}",
        type="Warning",
    )
    clock = Clock(now=NOW, source="test", window_s=None)
    only_event = Snapshot(events=[event], sources={"k8s/events.json": SourceStatus("ok")})
    facts = _kuberay_validation(only_event, clock)
    assert facts == {
        "kuberay_refusals": [f"rayservice event InvalidRayServiceMetadata: ray/llm: {message}"],
        "kuberay_refusal_links": ["raycluster:ray/llm"],
    }
    refused = _service(conditions={"Ready": {"status": "False", "reason": "ValidationFailed", "message": message}})
    only_status = Snapshot(ray_clusters=[refused], sources={"k8s/rayservices.json": SourceStatus("ok")})
    assert _kuberay_validation(only_status, clock)["kuberay_refusals"] == [
        f"rayservice ray/llm: Ready=False (ValidationFailed): {message}"
    ]
    assert _kuberay_validation(Snapshot(), clock) == {"kuberay_refusals": None, "kuberay_refusal_links": []}
    read_nothing_wrong = Snapshot(sources={"k8s/events.json": SourceStatus("ok")})
    assert _kuberay_validation(read_nothing_wrong, clock)["kuberay_refusals"] == []


def test_a_rayservice_finding_is_about_the_pods_of_the_raycluster_it_runs() -> None:
    # The fixture's pods carry ray.io/cluster=vllm-raycluster-k8x2p, the RayService's active cluster; the
    # RayService (named vllm) has no pod of its own name. Its Serve failure must reach a finding in those pods.
    report = analyze_bundle(Bundle.open(FIXTURES / "incident-ray-serve-deploy-failed"))
    serve_failed = next(f for f in report.findings if f.rule == "RAY-205")
    assert serve_failed.subject.startswith("rayservice/")
    assert "raycluster:llm-serving/vllm-raycluster-k8x2p" in serve_failed.links
    assert "pod:llm-serving/vllm-raycluster-k8x2p-head-x7k2p" in serve_failed.links
    assert not any(link.startswith("pod:kube-system/") for link in serve_failed.links)
    health = Finding(
        "VLLM-112",
        "vllm",
        "critical",
        "vLLM /health failing",
        "vllm/llm-serving/head",
        [],
        "",
        links=["vllm:head", "pod:llm-serving/vllm-raycluster-k8x2p-head-x7k2p"],
    )
    findings = [serve_failed, health]
    link_causes(findings, {r.id: r for r in load_rules([builtin_rules_dir()])})
    assert health.explained_by == "RAY-205"


# ---------------------------------------------------------------- a replica larger than any node (RAY-215)

from diag.facts.ray_pods import serve_replicas_too_big  # noqa: E402
from diag.snapshot.model import RayWorkerGroup  # noqa: E402


def _serving(deployment: dict, *groups: RayWorkerGroup, head_params: dict | None = None) -> RayClusterSpec:
    config = {"applications": [{"name": "llm", "deployments": [{"name": "VLLMDeployment", **deployment}]}]}
    return _service(
        serve_config=config, worker_groups=list(groups), head_ray_start_params=head_params or {"num-gpus": "0"}
    )


def test_a_replica_asking_more_gpus_than_the_largest_worker_is_named() -> None:
    one_gpu = RayWorkerGroup("gpu-group", replicas=4, gpu_limit_per_pod=1)
    [found] = serve_replicas_too_big(_serving({"ray_actor_options": {"num_gpus": 2}}, one_gpu))
    assert "asks 2 GPU(s) on one node (ray_actor_options.num_gpus)" in found
    assert "the largest node of the cluster has 1 (worker group gpu-group: nvidia.com/gpu 1 per pod)" in found
    two_gpus = RayWorkerGroup("big", replicas=1, gpu_limit_per_pod=2)
    assert serve_replicas_too_big(_serving({"ray_actor_options": {"num_gpus": 2}}, one_gpu, two_gpus)) == []


def test_bundles_count_together_only_under_strict_pack() -> None:
    one_gpu = RayWorkerGroup("gpu-group", replicas=4, gpu_limit_per_pod=1)
    bundles = {"ray_actor_options": {"num_gpus": 0}, "placement_group_bundles": [{"CPU": 1, "GPU": 1}, {"GPU": 1}]}
    assert serve_replicas_too_big(_serving(bundles, one_gpu)) == []  # PACK: one bundle per node is allowed
    [found] = serve_replicas_too_big(_serving(bundles | {"placement_group_strategy": "STRICT_PACK"}, one_gpu))
    assert "asks 2 GPU(s)" in found and "STRICT_PACK" in found


def test_num_gpus_in_ray_start_params_is_what_ray_counts() -> None:
    hidden = RayWorkerGroup("gpu-group", replicas=2, gpu_limit_per_pod=2, ray_start_params={"num-gpus": "1"})
    assert len(serve_replicas_too_big(_serving({"ray_actor_options": {"num_gpus": 2}}, hidden))) == 1
    templated = RayWorkerGroup("gpu-group", replicas=2, gpu_limit_per_pod=2, ray_start_params={"num-gpus": "$(GPUS)"})
    assert serve_replicas_too_big(_serving({"ray_actor_options": {"num_gpus": 2}}, templated)) is None
    assert serve_replicas_too_big(RayClusterSpec(kind="RayCluster", namespace="ray", name="c")) == []
