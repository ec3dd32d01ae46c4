"""Ways real bundles differ from clean fixtures, each a function from a bundle's files to new files.

A bundle is a dict of `relative path -> bytes` (diag.bundle.files.Bundle.files). Every perturbation returns
a new dict and leaves the one it was given alone.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone

Files = dict[str, bytes]

SKIP = ("expected.json", "SOURCE.md", "README.md")
UNRELATED_NAMESPACE = "team-web"
TWIN_NAMESPACE = "other-team"
_TIMESTAMP = re.compile(rb'"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?Z)"')


def bundle_files(files: Files) -> list[str]:
    return sorted(name for name in files if not name.endswith(SKIP))


def damaged(files: Files) -> Iterator[tuple[str, str, Files]]:
    """(file, how, files) for every file deleted, emptied and cut in half."""
    for name in bundle_files(files):
        for how in ("delete", "empty", "truncate"):
            changed = dict(files)
            if how == "delete":
                del changed[name]
            elif how == "empty":
                changed[name] = b""
            else:
                changed[name] = files[name][: len(files[name]) // 2]
            yield name, how, changed


def with_unrelated_crashloop(files: Files) -> Files | None:
    """A web app's pod, no GPU, crash-looping in its own namespace; None when there is no pod list."""
    pods = _list(files, "k8s/pods.json")
    if pods is None:
        return None
    pods["items"].append(_crashlooping_web_pod())
    changed = dict(files)
    changed["k8s/pods.json"] = json.dumps(pods).encode()
    events = _list(files, "k8s/events.json")
    if events is not None:
        events["items"].append(_backoff_event())
        changed["k8s/events.json"] = json.dumps(events).encode()
    return changed


def with_healthy_twins(files: Files) -> Files | None:
    """Every placed pod again, Running and Ready, in another namespace under the same name (StatefulSet
    names such as vllm-0 repeat across namespaces), on the same nodes."""
    pods = _list(files, "k8s/pods.json")
    if pods is None:
        return None
    twins = [_healthy_twin(pod) for pod in pods["items"] if isinstance(pod, dict)]
    pods["items"] += [t for t in twins if t is not None]
    changed = dict(files)
    changed["k8s/pods.json"] = json.dumps(pods).encode()
    return changed


def aged(files: Files, days: int = 10) -> Files | None:
    """Every event's timestamps moved `days` back; None when there is no event list."""
    if "k8s/events.json" not in files:
        return None
    shift = timedelta(days=days)

    def back(match: re.Match[bytes]) -> bytes:
        text = match.group(1).decode()
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00")) - shift
        return b'"' + stamp.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ").encode() + b'"'

    changed = dict(files)
    changed["k8s/events.json"] = _TIMESTAMP.sub(back, files["k8s/events.json"])
    return changed


def _list(files: Files, name: str) -> dict | None:
    try:
        data = json.loads(files[name])
    except (KeyError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("items"), list) else None


def _healthy_twin(pod: dict) -> dict | None:
    twin = copy.deepcopy(pod)
    meta = twin.get("metadata") or {}
    meta["namespace"] = TWIN_NAMESPACE
    meta["uid"] = "0000" + str(meta.get("uid", ""))[4:]
    status = twin.setdefault("status", {})
    if not (twin.get("spec") or {}).get("nodeName"):
        return None  # a twin of an unplaced pod would itself be a pending pod
    status["phase"] = "Running"
    status.pop("reason", None)
    status.pop("message", None)
    status["conditions"] = [
        {"type": t, "status": "True"} for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
    ]
    status["containerStatuses"] = [
        {
            "name": c.get("name"),
            "image": c.get("image", ""),
            "ready": True,
            "restartCount": 0,
            "started": True,
            "state": {"running": {"startedAt": "2026-11-28T09:14:30Z"}},
        }
        for c in twin["spec"].get("containers") or []
    ]
    return twin


def _crashlooping_web_pod() -> dict:
    name = "web-frontend-6d4cf56db6-x2x9z"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": UNRELATED_NAMESPACE,
            "uid": "5b0e3c1a-77d2-4a4f-9c1e-0d6b2f8e41aa",
            "labels": {"app": "web-frontend", "pod-template-hash": "6d4cf56db6"},
            "creationTimestamp": "2026-11-28T09:10:02Z",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "web-frontend-6d4cf56db6",
                    "controller": True,
                    "uid": "9f1d2c3b-1111-4a4f-8c1e-0d6b2f8e4100",
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "web",
                    "image": "nginx:1.27",
                    "resources": {
                        "limits": {"cpu": "500m", "memory": "256Mi"},
                        "requests": {"cpu": "100m", "memory": "128Mi"},
                    },
                }
            ],
            "nodeName": "cpu-pool-7",
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
                {"type": "PodScheduled", "status": "True"},
            ],
            "containerStatuses": [
                {
                    "name": "web",
                    "image": "nginx:1.27",
                    "ready": False,
                    "restartCount": 14,
                    "started": False,
                    "state": {
                        "waiting": {
                            "reason": "CrashLoopBackOff",
                            "message": "back-off 5m0s restarting failed container=web "
                            f"pod={name}_{UNRELATED_NAMESPACE}(5b0e3c1a-77d2-4a4f-9c1e-0d6b2f8e41aa)",
                        }
                    },
                    "lastState": {
                        "terminated": {
                            "exitCode": 1,
                            "reason": "Error",
                            "startedAt": "2026-11-28T10:01:10Z",
                            "finishedAt": "2026-11-28T10:01:11Z",
                        }
                    },
                }
            ],
        },
    }


def _backoff_event() -> dict:
    name = "web-frontend-6d4cf56db6-x2x9z"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.17f3c2a1b2c3d4e5", "namespace": UNRELATED_NAMESPACE},
        "involvedObject": {
            "kind": "Pod",
            "name": name,
            "namespace": UNRELATED_NAMESPACE,
            "uid": "5b0e3c1a-77d2-4a4f-9c1e-0d6b2f8e41aa",
        },
        "reason": "BackOff",
        "message": "Back-off restarting failed container web in pod "
        f"{name}_{UNRELATED_NAMESPACE}(5b0e3c1a-77d2-4a4f-9c1e-0d6b2f8e41aa)",
        "type": "Warning",
        "count": 61,
        "firstTimestamp": "2026-11-28T09:12:40Z",
        "lastTimestamp": "2026-11-28T10:01:12Z",
        "source": {"component": "kubelet", "host": "cpu-pool-7"},
    }


# ---------------------------------------------------------------- ordinary variation of a healthy bundle
# Each returns None when the bundle has nothing it could change.

_SCRAPE = re.compile(r"^vllm/(?P<server>.+)\.metrics(?:\.(?P<n>\d+))?\.txt$")
_SAMPLE = re.compile(rb"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?P<labels>\{[^}]*\})? (?P<value>\S+)$", re.M)
_COUNTER = re.compile(rb"^vllm:.*(_total|_count|_sum|_bucket)$")
_WAITING = (b"vllm:num_requests_waiting",)
_KV = (b"vllm:kv_cache_usage_perc", b"vllm:gpu_cache_usage_perc")
_KV_NORMAL_MAX = 0.85  # below settings.kv_cache_high (0.9)


def scrapes_by_server(files: Files) -> dict[str, list[str]]:
    """vllm/<server>.metrics[.n].txt file names of each server, in time order."""
    found: dict[str, list[tuple[int, str]]] = {}
    for name in files:
        if m := _SCRAPE.match(name):
            found.setdefault(m["server"], []).append((int(m["n"] or 0), name))
    return {server: [n for _, n in sorted(names)] for server, names in found.items()}


def _number(value: float) -> bytes:
    return (f"{value:.1f}" if float(value).is_integer() else repr(round(value, 6))).encode()


def _map_samples(text: bytes, names: tuple[bytes, ...], change: Callable[[float, int], float]) -> bytes:
    """Every sample of `names` in a scrape through change(value, position among them)."""
    position = -1

    def one(m: re.Match[bytes]) -> bytes:
        nonlocal position
        if m["name"] not in names:
            return m.group(0)
        position += 1
        return m["name"] + (m["labels"] or b"") + b" " + _number(change(float(m["value"]), position))

    return _SAMPLE.sub(one, text)


def queue_shifted(files: Files, delta: int) -> Files | None:
    """vllm:num_requests_waiting moved by `delta` requests in every scrape and every sample of
    Prometheus' history (never below zero)."""
    names = [n for scrapes in scrapes_by_server(files).values() for n in scrapes]
    history = _json(files, "prometheus/vllm_num_requests_waiting.json")
    if not names and history is None:
        return None
    changed = dict(files)
    for name in names:
        changed[name] = _map_samples(files[name], _WAITING, lambda v, _: max(0.0, v + delta))
    if history is not None:
        for series in history.get("data", {}).get("result", []):
            series["values"] = [[t, _number(max(0.0, float(v) + delta)).decode()] for t, v in series.get("values", [])]
        changed["prometheus/vllm_num_requests_waiting.json"] = json.dumps(history).encode()
    return changed


def kv_jittered(files: Files, amplitude: float = 0.04) -> Files | None:
    """KV usage moved up and down by `amplitude` from scrape to scrape (and sample to sample in Prometheus'
    history), kept inside the normal range 0..0.85."""
    changed = dict(files)
    touched = False
    for scrapes in scrapes_by_server(files).values():
        for k, name in enumerate(scrapes):
            sign = 1 if k % 2 == 0 else -1
            changed[name] = _map_samples(files[name], _KV, lambda v, _, sign=sign: _kv(v, sign * amplitude))
            touched = True
    for name in ("prometheus/vllm_kv_cache_usage_perc.json", "prometheus/vllm_gpu_cache_usage_perc.json"):
        answer = _json(files, name)
        if answer is None:
            continue
        for series in answer.get("data", {}).get("result", []):
            series["values"] = [
                [t, str(_kv(float(v), amplitude if k % 2 == 0 else -amplitude))]
                for k, (t, v) in enumerate(series.get("values", []))
            ]
        changed[name] = json.dumps(answer).encode()
        touched = True
    return changed if touched else None


def _kv(value: float, delta: float) -> float:
    if value >= _KV_NORMAL_MAX:
        return value  # a cache already past the normal range is the fixture's own state, not jitter
    return round(min(_KV_NORMAL_MAX, max(0.0, value + delta)), 4)


def with_extra_scrape(files: Files) -> Files | None:
    """One more /metrics scrape of every server after its last: counters grown as between the last two
    (by 0.1 % with one scrape), gauges as in the last; its time appended in manifest.json when it has times."""
    servers = scrapes_by_server(files)
    if not servers:
        return None
    changed = dict(files)
    manifest = _json(files, "manifest.json")
    for server, scrapes in servers.items():
        last = files[scrapes[-1]]
        before = _values(files[scrapes[-2]]) if len(scrapes) > 1 else None

        def grown(m: re.Match[bytes], before: dict[bytes, float] | None = before) -> bytes:
            key = m["name"] + (m["labels"] or b"")
            if not _COUNTER.match(m["name"]):
                return m.group(0)
            value = float(m["value"])
            step = value - before[key] if before is not None and key in before else value * 0.001
            new = value + max(0.0, step)
            return key + b" " + _number(new if m["name"].endswith(b"_sum") else float(round(new)))

        changed[f"vllm/{server}.metrics.{len(scrapes)}.txt"] = _SAMPLE.sub(grown, last)
        times = (manifest or {}).get("scrapes", {}).get(server)
        if times:
            gap = times[-1] - times[-2] if len(times) > 1 else 10.0
            times.append(times[-1] + gap)
    if manifest is not None:
        changed["manifest.json"] = json.dumps(manifest).encode()
    return changed


def _values(text: bytes) -> dict[bytes, float]:
    return {m["name"] + (m["labels"] or b""): float(m["value"]) for m in _SAMPLE.finditer(text)}


def restarted_long_ago(files: Files, days: int = 3) -> Files | None:
    """The first pod of a vLLM server (else the first running pod) restarted once, `days` before the
    bundle's newest timestamp, and running since."""
    pods = _list(files, "k8s/pods.json")
    if pods is None:
        return None
    servers = set(scrapes_by_server(files))
    running = [
        p
        for p in pods["items"]
        if (p.get("status") or {}).get("phase") == "Running" and (p.get("status") or {}).get("containerStatuses")
    ]
    pod = next((p for p in running if p["metadata"].get("name") in servers), running[0] if running else None)
    if pod is None:
        return None
    newest = max(
        (
            datetime.fromisoformat(m.group(1).decode().replace("Z", "+00:00"))
            for name in bundle_files(files)
            if name.startswith("k8s/")
            for m in _TIMESTAMP.finditer(files[name])
        ),
        default=None,
    )
    if newest is None:
        return None
    finished = newest - timedelta(days=days)
    stamp = lambda t: t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    status = pod["status"]["containerStatuses"][0]
    status["restartCount"] = 1
    status["lastState"] = {
        "terminated": {
            "exitCode": 137,
            "reason": "Error",
            "startedAt": stamp(finished - timedelta(days=1)),
            "finishedAt": stamp(finished),
        }
    }
    status["state"] = {"running": {"startedAt": stamp(finished + timedelta(seconds=31))}}
    created = pod["metadata"].get("creationTimestamp")
    if created is None or datetime.fromisoformat(created.replace("Z", "+00:00")) > finished - timedelta(days=1):
        pod["metadata"]["creationTimestamp"] = stamp(finished - timedelta(days=1, seconds=20))
    changed = dict(files)
    changed["k8s/pods.json"] = json.dumps(pods).encode()
    return changed


def _json(files: Files, name: str) -> dict | None:
    try:
        data = json.loads(files[name])
    except (KeyError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def waiting_values(text: bytes) -> list[float]:
    """vllm:num_requests_waiting of each engine in one scrape."""
    return [float(m["value"]) for m in _SAMPLE.finditer(text) if m["name"] in _WAITING]


def with_waiting(text: bytes, value: float) -> bytes:
    """A scrape with vllm:num_requests_waiting set to `value` on every engine."""
    return _map_samples(text, _WAITING, lambda v, _: value)
