"""Ways real bundles differ from clean fixtures, each a function from a bundle's files to new files.

A bundle is a dict of `relative path -> bytes` (diag.bundle.Bundle.files). Every perturbation returns
a new dict and leaves the one it was given alone.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
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
    status["conditions"] = [{"type": t, "status": "True"} for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")]
    status["containerStatuses"] = [
        {"name": c.get("name"), "image": c.get("image", ""), "ready": True, "restartCount": 0, "started": True,
         "state": {"running": {"startedAt": "2026-11-28T09:14:30Z"}}}
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
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-frontend-6d4cf56db6", "controller": True, "uid": "9f1d2c3b-1111-4a4f-8c1e-0d6b2f8e4100"}],
        },
        "spec": {
            "containers": [{"name": "web", "image": "nginx:1.27", "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "100m", "memory": "128Mi"}}}],
            "nodeName": "cpu-pool-7",
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}, {"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [{
                "name": "web", "image": "nginx:1.27", "ready": False, "restartCount": 14, "started": False,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": f"back-off 5m0s restarting failed container=web pod={name}_{UNRELATED_NAMESPACE}(5b0e3c1a-77d2-4a4f-9c1e-0d6b2f8e41aa)"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": "2026-11-28T10:01:10Z", "finishedAt": "2026-11-28T10:01:11Z"}},
            }],
        },
    }


def _backoff_event() -> dict:
    name = "web-frontend-6d4cf56db6-x2x9z"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.17f3c2a1b2c3d4e5", "namespace": UNRELATED_NAMESPACE},
        "involvedObject": {"kind": "Pod", "name": name, "namespace": UNRELATED_NAMESPACE, "uid": "5b0e3c1a-77d2-4a4f-9c1e-0d6b2f8e41aa"},
        "reason": "BackOff",
        "message": f"Back-off restarting failed container web in pod {name}_{UNRELATED_NAMESPACE}(5b0e3c1a-77d2-4a4f-9c1e-0d6b2f8e41aa)",
        "type": "Warning",
        "count": 61,
        "firstTimestamp": "2026-11-28T09:12:40Z",
        "lastTimestamp": "2026-11-28T10:01:12Z",
        "source": {"component": "kubelet", "host": "cpu-pool-7"},
    }
