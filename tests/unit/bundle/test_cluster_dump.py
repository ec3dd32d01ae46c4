"""`kubectl cluster-info dump --output-directory DIR` as an input of `llmdiag analyze`: a folder or the
same folder as .tar.gz, in kubectl's real layout (tests/cluster_dump_writer.py), read onto the bundle
layout so that the rules see what they see in the fixture bundle the dump is written from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from diag.analyze import analyze_bundle
from diag.bundle.files import Bundle, BundleLimits
from diag.bundle.load import load_bundle
from tests.cluster_dump_writer import container_block, typed_list, write_dump

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "fixtures"
TOO_LARGE = FIXTURES / "k8s-gpu-request-too-large"
CRASHLOOP = FIXTURES / "k8s-crashloop-bad-flag"


def _expected(fixture: Path) -> dict:
    return json.loads((fixture / "expected.json").read_text())


def _tar(folder: Path, dest: Path) -> Path:
    with tarfile.open(dest, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return dest


def _crash_log(fixture: Path):
    """A container waiting in CrashLoopBackOff: `kubectl logs` (and the dump) gives its last run's log,
    which the fixture keeps as <pod>.previous.log."""
    logs = fixture / "k8s" / "logs"

    def log_of(ns: str, pod: str, container: str) -> str | None:
        for name in (f"{pod}.log", f"{pod}.previous.log"):
            if (logs / name).exists():
                return (logs / name).read_text()
        return None

    return log_of


@pytest.mark.parametrize("packed", [False, True], ids=["folder", "tar.gz"])
def test_a_dump_gives_the_verdict_of_the_bundle_it_was_written_from(tmp_path: Path, packed: bool) -> None:
    dump = write_dump(TOO_LARGE, tmp_path / "cluster-state")
    report = analyze_bundle(Bundle.open(_tar(dump, tmp_path / "cluster-state.tar.gz") if packed else dump))
    want = _expected(TOO_LARGE)["verdict"]
    assert (report.verdict.layer, report.verdict.rule) == (want["layer"], want["rule"]), report.verdict.summary
    assert {f.rule for f in report.findings} == set(_expected(TOO_LARGE)["fires"])


def test_the_crash_log_of_a_dump_names_the_cause(tmp_path: Path) -> None:
    dump = write_dump(CRASHLOOP, tmp_path / "dump", log_of=_crash_log(CRASHLOOP))
    report = analyze_bundle(Bundle.open(dump))
    want = _expected(CRASHLOOP)
    assert (report.verdict.layer, report.verdict.rule) == (want["verdict"]["layer"], want["verdict"]["rule"])
    # the fixture's VLLM-112 reads /health, which no dump has
    assert {f.rule for f in report.findings} == set(want["fires"]) - {"VLLM-112"}
    (crash,) = [f for f in report.findings if f.rule == want["verdict"]["rule"]]
    assert "unrecognized arguments: --max-num-batch-tokens 16384" in " ".join(crash.evidence)
    assert not [g for g in report.verdict.gaps if g.source.startswith("k8s/logs/")]


def test_files_of_the_bundle_layout_added_beside_a_dump_are_read(tmp_path: Path) -> None:
    """What the gaps of a dump ask for (k8s/statefulsets.json, vllm/ scrapes) may be added to it."""
    dump = write_dump(CRASHLOOP, tmp_path / "dump", log_of=_crash_log(CRASHLOOP))
    for rel in (
        "k8s/statefulsets.json",
        "k8s/hpa.json",
        "k8s/endpoints.json",
        "vllm/llama-70b-7f8d9c6b5d-zhgh9.health.txt",
    ):
        (dump / rel).parent.mkdir(exist_ok=True)
        (dump / rel).write_bytes((CRASHLOOP / rel).read_bytes())
    report = analyze_bundle(Bundle.open(dump))
    assert {f.rule for f in report.findings} == set(_expected(CRASHLOOP)["fires"])
    assert report.sources["k8s/statefulsets.json"].status == "ok"
    assert not [g.source for g in report.verdict.gaps if g.source.startswith("k8s/")]


def test_every_namespace_list_is_merged_and_says_where_it_came_from(tmp_path: Path) -> None:
    dump = write_dump(TOO_LARGE, tmp_path / "dump")
    bundle = Bundle.open(dump)
    snap = load_bundle(bundle)
    fixture_pods = json.loads((TOO_LARGE / "k8s" / "pods.json").read_text())["items"]
    assert sorted(p.key for p in snap.pods) == sorted(
        f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in fixture_pods
    )
    assert len(snap.events) == len(json.loads((TOO_LARGE / "k8s" / "events.json").read_text())["items"])
    assert {n.name for n in snap.nodes} == {
        n["metadata"]["name"] for n in json.loads((TOO_LARGE / "k8s" / "nodes.json").read_text())["items"]
    }
    assert {w.name for w in snap.workloads} == {"llama-70b", "llama-405b"}
    pods = snap.sources["k8s/pods.json"]
    assert pods.status == "ok"
    assert (
        pods.detail
        == "from kubectl cluster-info dump's gpu-operator/pods.json, kube-system/pods.json, llm/pods.json and 2 more"
    )
    assert snap.sources["k8s/nodes.json"].detail == "from kubectl cluster-info dump's nodes.json"
    assert snap.sources["*/replicasets.json"].status == "skipped"
    assert "k8s/statefulsets.json" not in bundle.files and "k8s/hpa.json" not in bundle.files  # not in a dump
    assert not [name for name, s in snap.sources.items() if s.status == "failed"]


def test_one_namespace_is_used_as_kubectl_wrote_it(tmp_path: Path) -> None:
    dump = write_dump(TOO_LARGE, tmp_path / "dump", namespaces=["llm"])
    bundle = Bundle.open(dump)
    assert bundle.files["k8s/pods.json"] == (dump / "llm" / "pods.json").read_bytes()
    assert {p.namespace for p in load_bundle(bundle).pods} == {"llm"}


def test_each_container_of_a_pod_gets_its_own_log(tmp_path: Path) -> None:
    """kubectl writes init containers first, then containers; a log without a final line break has the
    END line on its last line; a log it could not get is its error line."""
    dump = write_dump(TOO_LARGE, tmp_path / "dump", namespaces=["llm"])
    pods = json.loads((dump / "llm" / "pods.json").read_text())
    pod = next(p for p in pods["items"] if p["metadata"]["name"] == "llama-70b-7f8d9c6b5d-pfnp5")
    pod["spec"]["initContainers"] = [{"name": "fetch-weights", "image": "amazon/aws-cli:2.17.0"}]
    pod["spec"]["containers"].append({"name": "proxy", "image": "envoyproxy/envoy:v1.31.0"})
    (dump / "llm" / "pods.json").write_text(json.dumps(pods, indent=4) + "\n")
    name = pod["metadata"]["name"]
    vllm_log = (TOO_LARGE / "k8s" / "logs" / f"{name}.log").read_text()
    (dump / "llm" / name / "logs.txt").write_text(
        container_block("llm", name, "fetch-weights", "download: s3://weights/llama-70b to /models/llama-70b\n")
        + container_block("llm", name, "vllm", vllm_log)
        + container_block("llm", name, "proxy", "[2026-11-30 08:03:15.112][1][info][main] starting main dispatch loop")
    )  # fmt: skip
    pending = next(p for p in pods["items"] if p["status"].get("phase") == "Pending")["metadata"]["name"]
    error = f'Request log error: container "vllm" in pod "{pending}" is waiting to start: ContainerCreating\n'
    (dump / "llm" / pending / "logs.txt").write_text(container_block("llm", pending, "vllm", error))

    bundle = Bundle.open(dump)
    assert bundle.files[f"k8s/logs/llm.{name}.vllm.log"].decode() == vllm_log
    assert bundle.files[f"k8s/logs/llm.{name}.proxy.log"].endswith(b"dispatch loop")
    snap = load_bundle(bundle)
    containers = {c.name: c for c in snap.pod(f"llm/{name}").containers + snap.pod(f"llm/{name}").init_containers}
    assert containers["fetch-weights"].logs.startswith("download: s3://weights")
    assert containers["vllm"].logs == vllm_log
    assert (
        snap.sources[f"k8s/logs/llm.{name}.vllm.log"].detail == f"from kubectl cluster-info dump's llm/{name}/logs.txt"
    )
    assert (
        snap.sources[f"k8s/logs/llm.{name}.proxy.log"].status == "failed"
    )  # cut off mid-line, as `kubectl logs` would be
    skipped = snap.sources[f"k8s/logs/llm.{pending}.vllm.log"]
    assert (skipped.status, skipped.detail.endswith(error.strip())) == ("skipped", True)
    assert snap.pod(f"llm/{pending}").containers[0].logs is None


def test_a_dump_cut_off_keeps_what_was_written_and_says_so(tmp_path: Path) -> None:
    dump = write_dump(TOO_LARGE, tmp_path / "dump")
    text = (dump / "llm" / "pods.json").read_text()
    (dump / "llm" / "pods.json").write_text(text[: text.index('"name": "llama-70b-7f8d9c6b5d-8q7hc"')])
    name = "llama-70b-7f8d9c6b5d-pfnp5"
    logs = (dump / "llm" / name / "logs.txt").read_text()
    (dump / "llm" / name / "logs.txt").write_text(logs[: logs.index("==== END")])

    snap = load_bundle(Bundle.open(dump))
    pods = snap.sources["k8s/pods.json"]
    assert pods.status == "failed" and "llm/pods.json truncated after 1 complete item (those were used)" in pods.detail
    assert {p.key for p in snap.pods if p.namespace == "llm"} == {f"llm/{name}"}
    assert "research/finetune-qwen-0-xrcn6" in {p.key for p in snap.pods}  # the other namespaces are whole
    log = snap.sources[f"k8s/logs/llm.{name}.vllm.log"]
    assert log.status == "failed" and "ends inside this log (no END line)" in log.detail
    assert snap.pod(f"llm/{name}").containers[0].logs  # what was written is read


def test_the_reading_rules_of_a_bundle_hold_for_a_dump(tmp_path: Path) -> None:
    dump = write_dump(TOO_LARGE, tmp_path / "dump", namespaces=["llm"])
    (dump / "llm" / "services.json").unlink()
    (dump / "llm" / "services.json").symlink_to("/etc/passwd")
    (dump / "nodes.json").rename(tmp_path / "nodes.json")
    (dump / "nodes.json").symlink_to(tmp_path / "nodes.json")
    name = "llama-70b-7f8d9c6b5d-pfnp5"
    (dump / "llm" / name / "logs.txt").write_text(container_block("llm", name, "vllm", "INFO request done\n" * 200_000))
    bundle = Bundle.open(dump, BundleLimits(file_bytes=1024 * 1024))
    assert "services.json" not in {n.rsplit("/", 1)[-1] for n in bundle.files}
    # the list it would have gone into fails, with the dump's file and why
    assert bundle.refused["k8s/services.json"] == "llm/services.json: a symbolic link: not followed, not read"
    assert "over the limit" in bundle.refused["llm/llama-70b-7f8d9c6b5d-pfnp5/logs.txt"]
    snap = load_bundle(bundle)
    assert snap.sources["k8s/services.json"].status == "failed"
    assert (
        snap.sources["k8s/nodes.json"].detail == "k8s/nodes.json: nodes.json: a symbolic link: not followed, not read"
    )
    assert snap.pod("llm/llama-70b-7f8d9c6b5d-pfnp5").containers[0].logs is None


def test_a_list_not_read_in_one_namespace_fails_the_merged_list(tmp_path: Path) -> None:
    dump = write_dump(TOO_LARGE, tmp_path / "dump")
    (dump / "research" / "pods.json").unlink()
    (dump / "research" / "pods.json").symlink_to(dump / "llm" / "pods.json")
    bundle = Bundle.open(dump)
    snap = load_bundle(bundle)
    pods = snap.sources["k8s/pods.json"]
    assert pods.status == "failed" and "research/pods.json: a symbolic link: not followed, not read" in pods.detail
    assert "llm/llama-405b-5c7b9d8f6c-xrds5" in {p.key for p in snap.pods}
    report = analyze_bundle(bundle)
    assert "k8s/pods.json" in {g.source for g in report.verdict.gaps}


def test_names_that_would_leave_the_layout_are_not_used(tmp_path: Path) -> None:
    dump = write_dump(TOO_LARGE, tmp_path / "dump", namespaces=["llm"])
    name = "llama-70b-7f8d9c6b5d-pfnp5"
    (dump / "llm" / name / "logs.txt").write_text(
        "==== START logs for container ../../manifest of pod llm/" + name + " ====\nx\n"
        "==== END logs for container ../../manifest of pod llm/" + name + " ====\n"
    )
    (dump / "Not_A_Namespace").mkdir()
    (dump / "Not_A_Namespace" / "pods.json").write_text(typed_list("PodList", "v1", []))
    bundle = Bundle.open(dump)
    assert not [n for n in bundle.files if not n.startswith("k8s/") or ".." in n]
    assert "not a log file of kubectl cluster-info dump" in bundle.refused[f"llm/{name}/logs.txt"]
    assert "not part of kubectl cluster-info dump's layout" in bundle.skipped["Not_A_Namespace/pods.json"]


def test_a_bundle_with_a_stray_nodes_json_stays_a_bundle(tmp_path: Path) -> None:
    folder = tmp_path / "bundle"
    folder.mkdir()
    for name in ("pods", "nodes", "events"):
        (folder / "k8s").mkdir(exist_ok=True)
        (folder / "k8s" / f"{name}.json").write_bytes((TOO_LARGE / "k8s" / f"{name}.json").read_bytes())
    (folder / "nodes.json").write_bytes((TOO_LARGE / "k8s" / "nodes.json").read_bytes())
    bundle = Bundle.open(folder)
    assert set(bundle.files) == {"k8s/pods.json", "k8s/nodes.json", "k8s/events.json", "nodes.json"}
    assert bundle.derived == {}


def test_the_cli_analyzes_a_dump(tmp_path: Path) -> None:
    dump = write_dump(TOO_LARGE, tmp_path / "dump")
    result = subprocess.run([sys.executable, "-m", "diag.cli", "analyze", str(dump), "--output", "json"],
                            cwd=REPO, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "NO_COLOR": "1"})  # fmt: skip
    report = json.loads(result.stdout)
    want = _expected(TOO_LARGE)["verdict"]
    assert (report["verdict"]["layer"], report["verdict"]["rule"]) == (want["layer"], want["rule"])
    assert report["sources"]["k8s/events.json"]["detail"].startswith("from kubectl cluster-info dump's ")
