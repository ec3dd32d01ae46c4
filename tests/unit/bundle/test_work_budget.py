"""The work budget (diag/bundle/budget.py): a bundle within the byte limits whose files would cost far
more to parse than real ones (amplification) has those files failed by name, each in one line, and the
rest analyzed, in bounded time and memory. Time and memory are asserted loosely (a shared 2-core
machine); docs/security.md has the measured figures."""

from __future__ import annotations

import io
import json
import os
import resource
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from diag.analyze import analyze_bundle
from diag.bundle import load
from diag.bundle.budget import AnswerWatch, OverBudget, WorkBudget, WorkLimits
from diag.bundle.files import Bundle
from diag.bundle.layout import KUBE_LISTS

REPO = Path(__file__).resolve().parents[3]
HEALTHY = REPO / "fixtures" / "healthy-k8s-vllm"
RAY = REPO / "fixtures" / "ray-infeasible-actor"
# one for each list of the layout, all of them within the bundle's total budget (1 GiB)
FORTY_MB_OF_EMPTY_OBJECTS = b'{"kind":"List","items":[' + b"{}," * 13_000_000 + b"{}]}"


def _fixture_files(*folders: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for folder in folders
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "expected.json"
    }


def _archive(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        for rel, data in files.items():
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _analyze_in_a_child(archive: Path) -> tuple[dict, float, float]:
    """`llmdiag analyze --output json` in a process of its own: (report, its CPU seconds, its peak RSS in
    MB). CPU, not wall time: the machine is shared."""
    out = archive.with_suffix(".report.json")
    with out.open("wb") as stdout:
        child = subprocess.Popen(["llmdiag", "analyze", str(archive), "--output", "json"], stdout=stdout)
        _, _, usage = os.wait4(child.pid, 0)
    return json.loads(out.read_text()), usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def test_forty_mb_documents_of_empty_objects_fail_by_name_and_the_rest_is_analyzed(tmp_path: Path) -> None:
    lists = [row.path for row in KUBE_LISTS]
    assert len(lists) * len(FORTY_MB_OF_EMPTY_OBJECTS) < 1_000_000_000  # every list, under bundle_max_total_bytes
    files = {rel: data for rel, data in _fixture_files(HEALTHY).items() if not rel.startswith("k8s/")}
    files |= {rel: FORTY_MB_OF_EMPTY_OBJECTS for rel in lists}
    archive = _archive(tmp_path / "amplified.tar.gz", files)
    assert archive.stat().st_size < 5_000_000  # over 800 MB of JSON in a few MB

    report, cpu_s, rss_mb = _analyze_in_a_child(archive)

    sources = report["sources"]
    for rel in lists:
        assert sources[rel]["status"] == "failed"
        assert sources[rel]["detail"] == (
            f"{rel}: over the work budget: 13,000,003 JSON objects and arrays, more than 2,000,000 in one file; "
            "not parsed"
        )
    others = [rel for rel in files if rel not in lists]
    assert others and all(sources[rel]["status"] == "ok" for rel in others), {r: sources[r] for r in others}
    assert report["verdict"]["status"] == "inconclusive"
    assert cpu_s < 30  # 231 s before the budget
    assert rss_mb < 1800  # 2.3 GB before; the bytes read are over 800 MB of it


def test_deep_nesting_fails_its_source_by_name(tmp_path: Path) -> None:
    files = _fixture_files(RAY) | {
        "k8s/pods.json": b"[" * 60_000_000,  # sixty million arrays, one a byte
        "ray/placement_groups.json": b'{"nest":' * 100_000 + b"1" + b"}" * 100_000,  # within the budget, too deep
    }
    report = analyze_bundle(Bundle(files=files))
    assert report.sources["k8s/pods.json"].detail == (
        "k8s/pods.json: over the work budget: 60,000,000 JSON objects and arrays, more than 2,000,000 in one file; "
        "not parsed"
    )
    assert (
        report.sources["ray/placement_groups.json"].detail
        == "ray/placement_groups.json: not valid JSON: nested too deeply"
    )
    assert all(report.sources[rel].status == "ok" for rel in ("ray/actors.json", "ray/nodes.json", "ray/status.txt"))
    assert report.verdict.status != "healthy"


def test_a_list_of_minimal_items_fails_on_its_item_count() -> None:
    items = ",".join(f'{{"metadata":{{"name":"p{i}","namespace":"a"}}}}' for i in range(200_000))
    files = _fixture_files(HEALTHY) | {"k8s/pods.json": f'{{"kind":"List","items":[{items}]}}'.encode()}
    started, before = time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    report = analyze_bundle(Bundle(files=files))
    assert report.sources["k8s/pods.json"].detail == (
        "k8s/pods.json: over the work budget: 200,000 items (metadata keys), more than 120,000 in one list; not parsed"
    )
    assert report.sources["k8s/events.json"].status == "ok"
    assert time.process_time() - started < 20  # about a minute before, every one a pod
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 500 * 1024


def test_dense_documents_fail_past_the_free_nodes_and_small_ones_never() -> None:
    budget = WorkBudget()
    assert budget.refuse("ray/actors.json", "[" + "{}," * 49_000 + "{}]") is None  # small: free
    why = budget.refuse("ray/actors.json", "[" + "{}," * 100_000 + "{}]")
    assert why == (
        "over the work budget: 100,002 JSON objects and arrays in 300,004 bytes (one per 3.0 bytes; "
        "real files spend 8 or more); not parsed"
    )
    assert budget.refuse("gpu/h.xml", "<a/>" * 60_000) is not None
    assert budget.refuse("vllm/s.metrics.txt", "a 1\n" * 60_000) is not None
    assert budget.refuse("k8s/logs/a.log", "\n" * 10_000_000) is None  # logs cost their bytes only


def test_the_bundle_total_is_spent_file_by_file() -> None:
    budget = WorkBudget(WorkLimits(nodes_per_bundle=250))
    doc = '{"items":[' + ",".join(['{"name": "a long enough name"}'] * 98) + "]}"
    assert budget.refuse("k8s/pods.json", doc) is None
    assert budget.refuse("k8s/nodes.json", doc) is None
    assert budget.refuse("k8s/events.json", doc) == (
        "over the work budget: the bundle's 250 nodes are spent (200 by the files before it, 100 in this one); "
        "not parsed"
    )


@pytest.mark.parametrize("fixture", ["healthy-k8s-vllm", "ray-infeasible-actor", "gpu-xid-application"])
def test_real_bundles_spend_far_below_every_ceiling(fixture: str) -> None:
    budget = WorkBudget()
    bundle = Bundle.open(REPO / "fixtures" / fixture)
    assert all(budget.refuse(rel, bundle.text(rel)) is None for rel in bundle.files)


def _answer(series: int) -> str:
    result = ",".join(f'{{"metric":{{"gpu":"{i}"}},"values":[[1700000000,"1"]]}}' for i in range(series))
    return f'{{"status":"success","data":{{"resultType":"matrix","result":[{result}]}}}}'


def test_a_prometheus_answer_in_a_bundle_fails_on_its_series() -> None:
    files = _fixture_files(HEALTHY) | {"prometheus/dcgm_gpu_util.json": _answer(60_000).encode()}
    report = analyze_bundle(Bundle(files=files))
    assert report.sources["prometheus/dcgm_gpu_util.json"].detail == (
        "prometheus/dcgm_gpu_util.json: over the work budget: 60,000 series, more than 50,000 in one answer; not parsed"
    )
    assert report.sources["k8s/pods.json"].status == "ok"


@pytest.mark.parametrize("chunk", [1, 7, 64 * 1024])
def test_an_answer_watched_as_it_streams_counts_every_series_whatever_the_chunks(chunk: int) -> None:
    data = _answer(300).encode()
    watch = AnswerWatch()
    for start in range(0, len(data), chunk):
        watch(data[start : start + chunk])
    assert watch.series == 300
    with pytest.raises(OverBudget, match=r"more than 250 series in one answer \(stopped reading at 0\.0 MB\)"):
        small = AnswerWatch(WorkLimits(series_per_answer=250))
        for start in range(0, len(data), chunk):
            small(data[start : start + chunk])


def test_a_parse_that_runs_past_its_cpu_seconds_fails_by_name_and_the_rest_is_read() -> None:
    """What the counts let through is still watched: a list whose parse runs past the CPU seconds a file
    may take stops there, fails by name, and the other files are read."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "", "namespace": "llm", "labels": {"app": "llama"}},
        "spec": {"nodeName": "gpu-node-a", "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.10.1"}]},
        "status": {"phase": "Running"},
    }
    items = [json.loads(json.dumps(pod).replace('"name": ""', f'"name": "llama-{i}"', 1)) for i in range(60_000)]
    files = {
        "k8s/pods.json": json.dumps({"apiVersion": "v1", "kind": "List", "items": items}).encode(),
        "ray/actors.json": b"[]",
    }
    loader = load._Loader(Bundle(files))
    loader.budget = WorkBudget(WorkLimits(cpu_seconds_per_file=0.1))
    started = time.process_time()
    snap = loader.load()
    status = snap.sources["k8s/pods.json"]
    assert status.status == "failed" and "took more than 0.1 s of CPU" in status.detail, status
    assert status.recovered is None  # not read a second time for its complete items
    assert snap.sources["ray/actors.json"].status == "ok"
    assert time.process_time() - started < 5


def test_a_budget_overrun_swallowed_inside_the_block_still_fails_it() -> None:
    """The timer's exception can land inside a garbage-collector callback or a broad `except`; the block
    is over its budget all the same when it ends."""
    from diag.bundle.budget import cpu_limited

    swallowed = 0
    with pytest.raises(OverBudget, match="took more than 0.05 s of CPU"), cpu_limited(0.05, "spinning"):
        started = time.process_time()
        while swallowed < 2 and time.process_time() - started < 5:
            try:
                sum(range(1000))
            except OverBudget:
                swallowed += 1
    assert swallowed == 2  # raised again after it was swallowed
    stopped = time.process_time()
    with pytest.raises(OverBudget), cpu_limited(0.05, "spinning"):
        try:
            while True:
                sum(range(1000))
        except OverBudget:
            while True:  # the first is swallowed; the next stops the block
                sum(range(1000))
    assert time.process_time() - stopped < 2
