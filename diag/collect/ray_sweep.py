"""The GPU sweep (`--gpu-sweep`): every alive Ray node's GPUs, read through the Ray cluster itself.

The one place llmdiag submits work to a cluster, and only when asked. A Ray job (the Jobs REST API of
the dashboard at `--ray-address`) runs a driver on the head that starts one task per alive node,
pinned there (node affinity, not soft) and asking zero CPUs and GPUs so that it runs on a full node
too. Each task runs llmdiag's own GPU collector (diag/collect/gpu.py: NVML, `nvidia-smi -q -x`, the
CSV) and reads the kernel's Xid lines where it may; the driver waits for each up to the node deadline
and prints what came back. The tasks only read. The job is deleted once it ended (stopped first if
it overran), so nothing of it stays on the cluster.

The files land where `--local-gpu` puts them (gpu/<node>.nvml.json, .xml, .csv, and
gpu/<node>.xid.txt), named after the node's Ray NodeName (its IP unless `ray start --node-name` set
one), so the analysis joins them to the Ray node like any other capture. A node that does not answer
in time is a failed source under its own name.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

from diag.collect.base import Sink, SourceResult
from diag.collect.http import normalize_base_url

MARKER = "llmdiag-gpu-sweep:"
# The modules a node task needs, in import order; all standard library and nvidia-ml-py beyond these.
_NODE_MODULES = ("diag.core.errors", "diag.parsers.gpu_common", "diag.collect.gpu")
_ROOT = Path(__file__).resolve().parents[2]
_ENDED = ("SUCCEEDED", "FAILED", "STOPPED")
SOURCE = "ray/gpu-sweep"
_POLL_S = 0.5
_REWRITE_WATCH_S = 3.0  # three of the job manager's checks of the supervisor (one a second)

# Runs on the head as the job's driver, with the cluster's own Ray and Python. Kept to what every Ray
# release since 2.9 has: ray.nodes(), NodeAffinitySchedulingStrategy, ray.wait, ray.cancel.
_DRIVER = r"""
import base64, json, socket, sys, types, zlib
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

spec = json.loads(zlib.decompress(base64.b64decode(sys.argv[1])))


def probe(modules, xid_wait_s):
    for name, source in modules:
        for i in range(1, name.count(".") + 1):
            parent = ".".join(name.split(".")[:i])
            sys.modules.setdefault(parent, types.ModuleType(parent))
        module = types.ModuleType(name)
        module.__dict__["__name__"] = name
        sys.modules[name] = module
        exec(compile(source, name.replace(".", "/") + ".py", "exec"), module.__dict__)
    gpu = sys.modules["diag.collect.gpu"]
    files, statuses = gpu.collect_local("NODE", xid_wait_s)
    xid, status = gpu.kernel_xid_lines()
    if xid is not None:
        files["gpu/NODE.xid.txt"] = xid
    statuses["gpu/NODE.xid.txt"] = status
    return {
        "files": {k: base64.b64encode(zlib.compress(v, 6)).decode() for k, v in files.items()},
        "statuses": statuses,
        "hostname": socket.gethostname(),
    }


ray.init(log_to_driver=False)
task = ray.remote(num_cpus=0, num_gpus=0, max_retries=0)(probe)
alive = [n for n in ray.nodes() if n.get("Alive")]
refs = {
    task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
        spec["modules"], spec["xid_wait_s"]
    ): n
    for n in alive
}
ready, late = ray.wait(list(refs), num_returns=len(refs), timeout=spec["node_timeout_s"])


def named(node):
    return {"node_id": node["NodeID"], "node_name": node.get("NodeName"), "node_ip": node.get("NodeManagerAddress")}


answers = []
for ref in ready:
    answer = named(refs[ref])
    try:
        answer.update(ray.get(ref))
    except Exception as e:
        answer["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
    answers.append(answer)
for ref in late:
    ray.cancel(ref, force=True)
    answers.append(named(refs[ref]) | {"late": True})
print("MARKER" + base64.b64encode(zlib.compress(json.dumps(answers).encode())).decode(), flush=True)
""".replace("MARKER", MARKER)


@dataclass(frozen=True)
class Sweep:
    address: str  # the dashboard, e.g. http://10.0.0.5:8265
    node_timeout_s: float  # each node's answer
    deadline_s: float  # the whole job, from submission to its answer
    xid_wait_s: float = 0.0


def sweep(spec: Sweep, sink: Sink) -> list[SourceResult]:
    import requests

    base = normalize_base_url(spec.address)
    submission = f"llmdiag-gpu-sweep-{uuid.uuid4().hex[:12]}"
    started = time.monotonic()
    try:
        answer = requests.post(
            f"{base}/api/jobs/",
            json={
                "entrypoint": f"python -c {_quoted(_DRIVER)} {_payload(spec)}",
                "submission_id": submission,
                "entrypoint_num_cpus": 0,
                "metadata": {"created_by": "llmdiag --gpu-sweep (reads only; deleted when done)"},
            },
            timeout=min(spec.deadline_s, 30.0),
        )
    except requests.RequestException as e:
        return [SourceResult(SOURCE, "failed", f"could not submit the sweep job to {base}: {_line(e)}")]
    if answer.status_code != 200:
        return [SourceResult(SOURCE, "failed", f"{base} refused the sweep job: HTTP {answer.status_code}")]
    try:
        status = _wait(base, submission, started + spec.deadline_s)
        logs = requests.get(f"{base}/api/jobs/{submission}/logs", timeout=30.0).json().get("logs", "")
    except (requests.RequestException, ValueError) as e:
        return [SourceResult(SOURCE, "failed", f"lost the sweep job {submission}: {_line(e)}")]
    finally:
        _remove(base, submission)
    answers = _answers(logs)
    if answers is None:
        return [SourceResult(SOURCE, "failed", f"the sweep job ended {status} without an answer{_last_line(logs)}")]
    return [SourceResult(SOURCE, "ok", f"{len(answers)} nodes asked"), *_write(answers, sink, spec)]


def _wait(base: str, submission: str, deadline: float) -> str:
    import requests

    while True:
        status = requests.get(f"{base}/api/jobs/{submission}", timeout=30.0).json().get("status", "")
        if status in _ENDED:
            return status
        if time.monotonic() > deadline:
            requests.post(f"{base}/api/jobs/{submission}/stop", timeout=30.0)
            return "STOPPED (past the sweep's deadline)"
        time.sleep(_POLL_S)


def _remove(base: str, submission: str) -> None:
    """Delete the job's record; a job still stopping is deleted once it has ended.

    Ray's job manager checks the job's supervisor actor once a second, and when it finds it gone while
    the record is missing it writes the record again (FAILED, "Job supervisor actor died"). A record
    deleted the moment the job ended can so come back: deletes go on until none has come back for
    _REWRITE_WATCH_S."""
    import requests

    quiet_since: float | None = None
    for _ in range(20 + int(_REWRITE_WATCH_S / _POLL_S)):
        try:
            answer = requests.delete(f"{base}/api/jobs/{submission}", timeout=10.0).status_code
            if answer == 200:
                quiet_since = time.monotonic()
            elif answer == 404 and quiet_since is None:
                quiet_since = time.monotonic()
            elif answer != 404:
                requests.post(f"{base}/api/jobs/{submission}/stop", timeout=10.0)
        except requests.RequestException:
            return
        if quiet_since is not None and time.monotonic() - quiet_since >= _REWRITE_WATCH_S:
            return
        time.sleep(_POLL_S)


def _payload(spec: Sweep) -> str:
    modules = [(name, (_ROOT / (name.replace(".", "/") + ".py")).read_text()) for name in _NODE_MODULES]
    document = {"modules": modules, "xid_wait_s": spec.xid_wait_s, "node_timeout_s": spec.node_timeout_s}
    return base64.b64encode(zlib.compress(json.dumps(document).encode(), 9)).decode()


def _quoted(text: str) -> str:
    """The driver as one shell word: base64 has no quote or space, and decodes to the source."""
    encoded = base64.b64encode(text.encode()).decode()
    return f"\"import base64;exec(base64.b64decode('{encoded}'))\""


def _answers(logs: str) -> list[dict] | None:
    for line in reversed(logs.splitlines()):
        if line.startswith(MARKER):
            try:
                decoded = json.loads(zlib.decompress(base64.b64decode(line[len(MARKER) :])))
            except (ValueError, zlib.error):
                return None
            return decoded if isinstance(decoded, list) else None
    return None


def _write(answers: list[dict], sink: Sink, spec: Sweep) -> list[SourceResult]:
    stems = _stems(answers)
    results = []
    for answer in sorted(answers, key=lambda a: stems[a["node_id"]]):
        stem = stems[answer["node_id"]]
        where = f"Ray node {answer.get('node_ip') or answer['node_id']}"
        if answer.get("late"):
            late = f"{where} did not answer within {spec.node_timeout_s:g} s (its GPU collector or the node hangs)"
            results.append(SourceResult(f"gpu/{stem}.xml", "failed", late))
            continue
        if "error" in answer:
            results.append(
                SourceResult(f"gpu/{stem}.xml", "failed", f"{where}: the sweep task failed: {answer['error']}")
            )
            continue
        for rel, data in answer.get("files", {}).items():
            sink.write(rel.replace("NODE", stem, 1), zlib.decompress(base64.b64decode(data)))
        for rel, (status, detail) in answer.get("statuses", {}).items():
            results.append(SourceResult(rel.replace("NODE", stem, 1), status, f"{where}: {detail}" if detail else ""))
    return results


def _stems(answers: list[dict]) -> dict[str, str]:
    """Each node's file stem: its NodeName where no other swept node has it, else its node id."""
    names = [a.get("node_name") for a in answers]
    return {
        a["node_id"]: a["node_name"] if a.get("node_name") and names.count(a["node_name"]) == 1 else a["node_id"]
        for a in answers
    }


def _line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[-1] if text else type(error).__name__


def _last_line(logs: str) -> str:
    lines = [line for line in logs.splitlines() if line.strip()]
    return f" (its last line: {lines[-1][:200]})" if lines else ""
