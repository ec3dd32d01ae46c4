"""diag.collect.ray against a REAL Ray head (fake GPUs) with an infeasible actor and placement group.

Read directly (--ray-address), and through the real `kubernetes` client talking to the replay API
server (tests/replay), whose service proxy forwards to the real dashboard and whose exec answers
are what the real `ray` CLI printed for this cluster.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from live_services import LOOPBACK, REPO, free_port, ray_env, ray_python
from live_services import RayHead as LiveRayHead

from diag.bundle.files import Bundle
from diag.collect.base import Sink
from diag.collect.kube import KubeAccess
from diag.collect.ray import CLI_FILES, DASHBOARD_FILES, DASHBOARD_PORT, RayHead, collect_ray_address, collect_ray_head
from diag.parsers.ray_state import parse_actors, parse_nodes, parse_nodes_summary, parse_placement_groups
from diag.parsers.ray_status import parse_cluster_status_json, parse_ray_status
from tests.replay.server import ExecAnswer, ReplayCluster, ReplayServer

pytestmark = pytest.mark.live

K8S_NAMESPACE = "serving"
RAY_CLUSTER = "llama"
HEAD_POD = "llama-head-x7k2p"


@pytest.fixture(scope="module")
def dashboard_bundle(ray_head: LiveRayHead) -> tuple[Bundle, dict]:
    bundle = Bundle()
    results = collect_ray_address(ray_head.dashboard_url, Sink(bundle), timeout_s=15)
    return bundle, {r.name: r for r in results}


def test_every_dashboard_answer_is_kept_verbatim_under_its_bundle_name(dashboard_bundle, ray_head: LiveRayHead) -> None:
    bundle, results = dashboard_bundle
    assert set(results) == {rel for rel, _ in DASHBOARD_FILES}
    assert all(r.status == "ok" for r in results.values()), results
    assert set(bundle.files) == {rel for rel, _ in DASHBOARD_FILES}
    version = json.loads(bundle.files["ray/version.json"])
    assert version["ray_version"].startswith("2.")
    for rel in ("ray/actors.json", "ray/placement_groups.json", "ray/nodes.json", "ray/cluster_status.json"):
        assert json.loads(bundle.files[rel])["result"] is True


def test_actors_and_placement_group_parse_with_their_states(dashboard_bundle) -> None:
    bundle, _ = dashboard_bundle
    actors = {a.name: a for a in parse_actors(bundle.text("ray/actors.json"))}
    assert actors["gpu1_actor"].state == "ALIVE"
    assert actors["gpu1_actor"].required_resources["GPU"] == 1.0
    assert actors["gpu4_actor_infeasible"].state == "PENDING_CREATION"
    assert actors["gpu4_actor_infeasible"].required_resources["GPU"] == 4.0
    assert actors["gpu4_actor_infeasible"].node_id is None
    assert {a.namespace for a in actors.values()} == {"llmdiag-live"}
    [group] = parse_placement_groups(bundle.text("ray/placement_groups.json"))
    assert (group.name, group.state, group.scheduling_state) == ("pg_infeasible_4gpu", "PENDING", "INFEASIBLE")
    assert group.bundles == [{"CPU": 1.0, "GPU": 4.0}]


def test_nodes_and_cluster_status_show_two_gpus_and_the_unmet_demands(dashboard_bundle) -> None:
    bundle, _ = dashboard_bundle
    [node] = parse_nodes(bundle.text("ray/nodes.json"))
    assert node.is_head and node.state == "ALIVE" and node.node_ip == LOOPBACK
    assert node.resources_total["GPU"] == 2.0
    [summary] = parse_nodes_summary(bundle.text("ray/nodes_summary.json"))
    assert summary.node_id == node.node_id
    status = parse_cluster_status_json(bundle.text("ray/cluster_status.json"))
    assert status.usage["GPU"] == (1.0, 2.0)
    kinds = {(d.kind, d.resources.get("GPU")) for d in status.demands}
    assert ("task_or_actor", 4.0) in kinds
    assert ("placement_group", 4.0) in kinds


def test_an_unreachable_dashboard_fails_every_file_in_one_line() -> None:
    bundle = Bundle()
    results = collect_ray_address(f"{LOOPBACK}:{free_port()}", Sink(bundle), timeout_s=5)
    assert len(results) == len(DASHBOARD_FILES)
    assert all(r.status == "failed" and r.detail.endswith("connection refused") for r in results)
    assert bundle.files == {}


# --------------------------------------------------------------------------- through the API server


def head_pod() -> dict:
    """A KubeRay head pod as `kubectl get pod -o json` shows it (the fields the replay server reads)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": HEAD_POD,
            "namespace": K8S_NAMESPACE,
            "labels": {"ray.io/cluster": RAY_CLUSTER, "ray.io/node-type": "head", "ray.io/group": "headgroup"},
        },
        "spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.40.0-gpu"}]},
        "status": {"phase": "Running", "podIP": "10.244.0.17"},
    }


def real_cli_answers(ray_head: LiveRayHead) -> dict[tuple[str, ...], ExecAnswer]:
    """What the real `ray` CLI prints for the collector's fixed argv, run here against the live head."""
    ray_cli = str(ray_python().parent / "ray")

    def run(argv: tuple[str, ...]) -> tuple[tuple[str, ...], ExecAnswer]:
        address = ray_head.gcs_address if argv[1] == "status" else ray_head.dashboard_url
        done = subprocess.run(
            [ray_cli, *argv[1:], "--address", address], env=ray_env(), capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return argv, ExecAnswer(stdout=done.stdout)

    with ThreadPoolExecutor(max_workers=len(CLI_FILES)) as pool:
        return dict(pool.map(run, [argv for _, argv in CLI_FILES]))


@pytest.fixture(scope="module")
def kube_replay(ray_head: LiveRayHead, tmp_path_factory: pytest.TempPathFactory):
    """Yields (cluster, KubeAccess): the replay API server holds the head pod; tests add upstreams."""
    cluster = ReplayCluster(objects={"pods": [head_pod()]})
    for argv, answer in real_cli_answers(ray_head).items():
        cluster.exec_answers[(K8S_NAMESPACE, HEAD_POD, argv)] = answer
    with ReplayServer(cluster) as server:
        kubeconfig = server.write_kubeconfig(tmp_path_factory.mktemp("kube"), namespace=K8S_NAMESPACE)
        yield cluster, server, KubeAccess(str(kubeconfig))


def head() -> RayHead:
    return RayHead(K8S_NAMESPACE, RAY_CLUSTER, HEAD_POD, "ray-head")


def test_dashboard_through_the_service_proxy(kube_replay, ray_head: LiveRayHead) -> None:
    cluster, server, kube = kube_replay
    upstream = ("services", K8S_NAMESPACE, f"{RAY_CLUSTER}-head-svc", DASHBOARD_PORT)
    cluster.upstreams[upstream] = ray_head.dashboard_url
    try:
        bundle = Bundle()
        results = collect_ray_head(kube, head(), Sink(bundle), timeout_s=15)
    finally:
        del cluster.upstreams[upstream]
    assert {r.name for r in results} == {rel for rel, _ in DASHBOARD_FILES}
    assert all(r.status == "ok" for r in results), results
    actors = {a.name: a.state for a in parse_actors(bundle.text("ray/actors.json"))}
    assert actors == {"gpu1_actor": "ALIVE", "gpu4_actor_infeasible": "PENDING_CREATION"}
    proxied = [r.path for r in server.seen() if "/proxy/" in r.path]
    assert any(p.endswith(f"services/{RAY_CLUSTER}-head-svc:dashboard/proxy/api/v0/actors") for p in proxied), proxied
    assert not any(r.upgrade for r in server.seen())  # no exec when the dashboard answers


def test_no_dashboard_behind_the_service_falls_back_to_ray_cli_in_the_head_pod(kube_replay) -> None:
    _, server, kube = kube_replay
    bundle = Bundle()
    results = {r.name: r for r in collect_ray_head(kube, head(), Sink(bundle), timeout_s=60)}
    dashboard = results.pop("ray/dashboard")
    assert dashboard.status == "failed" and "no endpoints available" in dashboard.detail
    assert f"pod {K8S_NAMESPACE}/{HEAD_POD}" in dashboard.detail
    assert set(results) == {rel for rel, _ in CLI_FILES}
    assert all(r.status == "ok" for r in results.values()), results
    status = parse_ray_status(bundle.text("ray/status.txt"))
    assert any(d.kind == "task_or_actor" and d.resources.get("GPU") == 4.0 for d in status.demands)
    assert any(d.kind == "placement_group" for d in status.demands)
    actors = {a.name: a for a in parse_actors(bundle.text("ray/actors.json"))}
    assert actors["gpu4_actor_infeasible"].required_resources["GPU"] == 4.0  # --detail columns are filled
    [group] = parse_placement_groups(bundle.text("ray/placement_groups.json"))
    assert group.scheduling_state == "INFEASIBLE"
    assert parse_nodes(bundle.text("ray/nodes.json"))[0].resources_total["GPU"] == 2.0
    execs = [r for r in server.seen() if r.upgrade]
    assert len(execs) == len(CLI_FILES)
    assert all(r.method == "GET" for r in server.seen())
    fired = verdict_and_rules(bundle)
    assert fired[0] == "ray" and {"RAY-102", "RAY-103"} <= fired[1], fired


def test_no_head_pod_known_means_no_exec(kube_replay) -> None:
    _, _, kube = kube_replay
    bundle = Bundle()
    results = collect_ray_head(kube, RayHead(K8S_NAMESPACE, "other"), Sink(bundle), timeout_s=10)
    assert results[-1].name == "ray/cli" and results[-1].status == "skipped"
    assert all(r.status == "failed" for r in results[:-1])
    assert bundle.files == {}


def json_of_analysis(bundle: Bundle) -> dict:
    from diag.analyze import analyze_bundle
    from diag.report.json_report import to_dict

    return to_dict(analyze_bundle(bundle))


def verdict_and_rules(bundle: Bundle) -> tuple[str | None, set[str]]:
    report = json_of_analysis(bundle)
    return report["verdict"]["layer"], {f["rule"] for f in report["findings"]}


def test_the_analyzer_names_the_ray_layer_with_the_infeasible_actor_and_placement_group(dashboard_bundle) -> None:
    bundle, _ = dashboard_bundle
    report = json_of_analysis(bundle)
    assert report["verdict"]["layer"] == "ray", report["verdict"]
    assert report["verdict"]["rule"] in ("RAY-102", "RAY-103")
    fired = {f["rule"]: f for f in report["findings"]}
    assert {"RAY-102", "RAY-103"} <= set(fired), sorted(fired)
    assert "gpu4_actor_infeasible" in json.dumps(fired["RAY-102"])
    assert "pg_infeasible_4gpu" in json.dumps(fired["RAY-103"])


def test_collected_files_load_into_a_snapshot(dashboard_bundle, tmp_path: Path) -> None:
    from diag.bundle.load import load_bundle

    bundle, _ = dashboard_bundle
    snapshot = load_bundle(Bundle.open(bundle.save(tmp_path / "bundle")))
    for rel, _ in DASHBOARD_FILES:
        assert snapshot.sources[rel].status == "ok", snapshot.sources[rel]
    assert {a.name for a in snapshot.ray_actors} == {"gpu1_actor", "gpu4_actor_infeasible"}
    assert [pg.scheduling_state for pg in snapshot.placement_groups] == ["INFEASIBLE"]
    assert snapshot.ray_status is not None and snapshot.ray_status.demands


# --------------------------------------------------------------------------- end to end through the CLI


def llmdiag(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "diag.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=300
    )


def json_report(done: subprocess.CompletedProcess) -> dict:
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"exit {done.returncode}, no JSON report:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


def outside_kubernetes(ray_head: LiveRayHead, vllm_url: str) -> list[str]:
    return ["--ray-address", ray_head.dashboard_url, "--vllm-url", vllm_url, "--no-local-gpu",
            "--scrapes", "2", "--scrape-interval", "1"]  # fmt: skip


def test_triage_and_collect_then_analyze_agree(ray_head: LiveRayHead, vllm_standin, tmp_path: Path) -> None:
    triage = json_report(
        llmdiag("triage", *outside_kubernetes(ray_head, vllm_standin("healthy").url), "--output", "json")
    )

    bundle_dir = tmp_path / "bundle"
    collected = llmdiag("collect", "--out", str(bundle_dir), *outside_kubernetes(ray_head, vllm_standin("healthy").url))
    assert collected.returncode == 0, collected.stderr[-2000:]
    analyzed = json_report(llmdiag("analyze", str(bundle_dir), "--output", "json"))

    assert triage["schema"] == analyzed["schema"] == "llmdiag/report/v1"
    assert triage["verdict"]["layer"] == "ray", triage["verdict"]
    assert {"RAY-102", "RAY-103"} <= {f["rule"] for f in triage["findings"]}
    assert triage["verdict"] == analyzed["verdict"]
    assert sorted(f["rule"] for f in triage["findings"]) == sorted(f["rule"] for f in analyzed["findings"])
    for report in (triage, analyzed):
        sources = report["sources"]
        for rel in ("ray/actors.json", "ray/placement_groups.json", "ray/nodes.json", "ray/cluster_status.json"):
            assert sources[rel]["status"] == "ok", sources[rel]
        assert any(name.startswith("vllm/") and s["status"] == "ok" for name, s in sources.items()), sources
    saved = sorted(p.relative_to(bundle_dir).as_posix() for p in bundle_dir.rglob("*") if p.is_file())
    assert "manifest.json" in saved and "ray/actors.json" in saved
    assert any(name.endswith(".cmdline.txt") for name in saved)
