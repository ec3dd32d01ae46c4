"""A history fixture whose events, log lines and names carry markup an attacker could write into a
cluster: script elements, attribute breakouts, a closing style tag, SVG with handlers, matplotlib's
math, a CDATA end. The HTML report must show every one of them as text."""

from __future__ import annotations

import json
from pathlib import Path

from diag.bundle.files import Bundle
from tests.hostile import hostile_bundle

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
FIXTURE = "history-kv-storm-ended"  # its timeline draws the pods, their node and their events
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
    """The fixture with hostile event messages and reasons in the window, and an Xid log line; with
    `name_payload`, its first scheduled pod, that pod's node and namespace renamed with it too."""
    folder = FIXTURES / FIXTURE
    bundle = hostile_bundle(folder, name_payload) if name_payload else Bundle.open(folder)
    assert bundle is not None
    files = dict(bundle.files)
    pods = json.loads(files["k8s/pods.json"])["items"]
    events = json.loads(files["k8s/events.json"])
    scheduled = [p for p in pods if p.get("spec", {}).get("nodeName")]
    for (n, message), pod in ((m, p) for m in enumerate(MESSAGES) for p in scheduled):
        for kind, name, namespace in (
            ("Pod", pod["metadata"]["name"], pod["metadata"]["namespace"]),
            ("Node", pod["spec"]["nodeName"], None),
        ):
            events["items"].append(
                {
                    "kind": "Event",
                    "metadata": {"name": f"hostile-{n}-{name}", "namespace": namespace or "default"},
                    "involvedObject": {"kind": kind, "name": name, "namespace": namespace},
                    "reason": f"Hostile{message}",
                    "message": message,
                    "type": "Warning",
                    "count": 2,
                    "lastTimestamp": f"2026-12-03T16:{40 + n:02d}:00Z",
                }
            )
    events["items"].append(
        {
            "kind": "Event",
            "metadata": {"name": "hostile-xid", "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": pods[0]["spec"]["nodeName"]},
            "reason": "KernelXid",
            "message": f"NVRM: Xid (PCI:0000:18:00): 79, pid=1, name={MESSAGES[1]}",
            "type": "Warning",
            "lastTimestamp": "2026-12-03T16:50:30Z",
        }
    )
    files["k8s/events.json"] = json.dumps(events).encode()
    return Bundle(files, origin=f"{FIXTURE} {MESSAGES[0]}", refused=dict(bundle.refused))
