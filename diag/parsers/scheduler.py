"""kube-scheduler's FailedScheduling message ("0/3 nodes are available: 1 Insufficient nvidia.com/gpu, ...").

The filter reasons end with ". "; the PostFilter plugins' messages follow, joined by ", ": since
Kubernetes 1.32 DynamicResources' ("no new claims to deallocate") comes before DefaultPreemption's
("preemption: 0/3 nodes are available: ...")."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_HEAD = re.compile(r"^0/(?P<nodes>\d+) nodes are available:\s*(?P<body>.*)$", re.DOTALL)
_REASON = re.compile(r"^(?P<count>\d+)\s+(?P<reason>.+)$")


@dataclass
class FitError:
    nodes: int
    reasons: dict[str, int] = field(default_factory=dict)  # reason text -> how many nodes said it
    preemption: dict[str, int] = field(default_factory=dict)


def parse_fit_error(message: str) -> FitError | None:
    """None when the message is not the scheduler's fit error (e.g. a volume-binding one-liner)."""
    head = _HEAD.match(message.strip())
    if head is None:
        return None
    body, _, post_filter = head["body"].partition(". ")
    result = FitError(nodes=int(head["nodes"]), reasons=_reasons(body))
    _, _, preemption = post_filter.partition("preemption: ")
    if preemption:
        tail = _HEAD.match(preemption.strip())
        result.preemption = _reasons(tail["body"]) if tail else {}
    return result


def _reasons(body: str) -> dict[str, int]:
    """Split "1 A, 2 B {k: v}." on the commas that separate reasons (a taint's braces may hold none)."""
    found: dict[str, int] = {}
    for part in re.split(r",\s+(?=\d+\s)", body.strip().rstrip(".")):
        m = _REASON.match(part.strip())
        if m:
            found[m["reason"].strip().rstrip(".")] = int(m["count"])
    return found


# The PersistentVolume controller's words on a claim whose StorageClass does not exist (its
# ProvisioningFailed event): storageclass.storage.k8s.io "premium-rwo" not found
_NO_STORAGE_CLASS = re.compile(r'storageclass\.storage\.k8s\.io "(?P<name>[^"]+)" not found')


def missing_storage_class(message: str) -> str | None:
    """The StorageClass an event says does not exist, if it says so."""
    found = _NO_STORAGE_CLASS.search(message)
    return found["name"] if found else None
