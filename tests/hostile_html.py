"""A history fixture whose events, log lines and names carry markup an attacker could write into a
cluster: script elements, attribute breakouts, a closing style tag, SVG with handlers, matplotlib's
math, a CDATA end. The HTML report must show every one of them as text."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from diag.bundle.files import Bundle

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
FIXTURE = "history-kv-storm-ended"  # its timeline draws the pods, their node and their events
SERVER_POD = "llama-70b-7f8d9c6b5d-pfnp5"  # the root cause's server: renamed, its name is on the page
MARK = "window.PWNED=1"
MESSAGES = (
    f"<script>{MARK}</script>",
    f'"><img src=x onerror="{MARK}">',
    f"'><img src=x onerror='{MARK}'>",
    f"</style><script>{MARK}</script>",
    f"</svg><svg onload={MARK}><text>$\\alpha$</text></svg>",
    f"]]><!-- --><script>{MARK}</script>",
    f"<a href=javascript:{MARK}>x</a>",
)
# a name holds no slash in the files' paths; these still break out of attributes and text
NAMES = (f'"><img src=x onerror={MARK}>', f"<svg onload={MARK}>", "$\\alpha$")


def hostile_html_bundle(name_payload: str | None = None) -> Bundle:
    """The fixture with hostile event messages and reasons in the window, and a node's Xid event; with
    `name_payload`, the root cause's pod and its node renamed with it too (in every file and path)."""
    folder = FIXTURES / FIXTURE
    bundle = Bundle.open(folder)
    files = dict(bundle.files)
    if name_payload:
        files = _renamed(files, name_payload)
    pods = json.loads(files["k8s/pods.json"])["items"]
    events = json.loads(files["k8s/events.json"])
    servers = [p for p in pods if any(f.startswith(f"vllm/{p['metadata']['name']}.") for f in files)]
    start = json.loads(files["prometheus/vllm_kv_cache_usage_perc.json"])["window"]["start"]  # the timeline's

    def at(minutes: float) -> str:
        return datetime.fromtimestamp(start + minutes * 60, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    objects = {("Pod", p["metadata"]["name"], p["metadata"]["namespace"]) for p in servers}
    objects |= {("Node", p["spec"]["nodeName"], None) for p in servers}
    for n, message in enumerate(MESSAGES):
        for kind, name, namespace in sorted(objects, key=str):
            events["items"].append(
                {
                    "kind": "Event",
                    "metadata": {"name": f"hostile-{n}-{name}", "namespace": namespace or "default"},
                    "involvedObject": {"kind": kind, "name": name, "namespace": namespace},
                    "reason": f"Hostile{message}",
                    "message": message,
                    "type": "Warning",
                    "count": 2,
                    "lastTimestamp": at(10 + n),
                }
            )
    events["items"].append(
        {
            "kind": "Event",
            "metadata": {"name": "hostile-xid", "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": servers[0]["spec"]["nodeName"]},
            "reason": "KernelXid",
            "message": f"NVRM: Xid (PCI:0000:18:00): 79, pid=1, name={MESSAGES[1]}",
            "type": "Warning",
            "lastTimestamp": at(20.5),
        }
    )
    files["k8s/events.json"] = json.dumps(events).encode()
    return Bundle(files, origin=f"{FIXTURE} {MESSAGES[0]}", refused=dict(bundle.refused))


def _renamed(files: dict[str, bytes], payload: str) -> dict[str, bytes]:
    pods = json.loads(files["k8s/pods.json"])["items"]
    pod = next(p for p in pods if p["metadata"]["name"] == SERVER_POD)
    swap = {name: f"{name}{payload}" for name in (SERVER_POD, pod["spec"]["nodeName"])}
    out = {}
    for rel, data in files.items():
        if rel.endswith(".json"):
            data = json.dumps(_swapped(json.loads(data), swap)).encode()
        out[re.sub(r"[^/_.]+", lambda m: swap.get(m.group(), m.group()), rel)] = data
    return out


def _swapped(value: Any, swap: dict[str, str]) -> Any:
    if isinstance(value, str):
        return swap.get(value, value)
    if isinstance(value, dict):
        return {k: _swapped(v, swap) for k, v in value.items()}
    if isinstance(value, list):
        return [_swapped(v, swap) for v in value]
    return value
