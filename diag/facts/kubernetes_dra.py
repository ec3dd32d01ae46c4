"""Dynamic Resource Allocation (resource.k8s.io) refusals on one pod, read from what the cluster says:
the scheduler's DynamicResources plugin in the FailedScheduling message, the resource-claim controller's
FailedResourceClaimCreation event and the kubelet's FailedPrepareDynamicResources event.

Wordings: kube-scheduler pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go (PreFilter,
Filter), k8s.io/dynamic-resource-allocation/resourceclaim (ErrClaimNotFound), the API server's NotFound
error, kubelet pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go (GetPlugin)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from diag.snapshot.model import Event

# kind -> the scheduler's wording; named groups carry the claim, device class or request it names
SCHEDULER_REASONS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("cannot_allocate", re.compile(r"cannot allocate all claims")),
    ("allocation_timed_out", re.compile(r"timed out trying to allocate devices")),
    ("claim_in_use", re.compile(r"resourceclaim in use")),
    ("claim_not_on_node", re.compile(r"resourceclaim not available on the node")),
    ("allocation_in_progress", re.compile(r"resource claim (?P<claim>\S+) is in the process of being allocated")),
    (
        "device_class_missing",
        re.compile(r"request (?P<request>\S+): device class (?P<device_class>\S+) does not exist"),
    ),
    ("claim_being_deleted", re.compile(r'resourceclaim "(?P<claim>[^"]+)" is being deleted')),
    ("claim_not_created", re.compile(r'pod "[^"]+": ResourceClaim not created yet')),
    ("claim_not_found", re.compile(r'resourceclaims?\.resource\.k8s\.io "(?P<claim>[^"]+)" not found')),
)
CLAIM_CREATION_FAILED = "FailedResourceClaimCreation"  # resource-claim controller, on the pod
PREPARE_FAILED = "FailedPrepareDynamicResources"  # kubelet, on the pod
_TEMPLATE = re.compile(r'resource claim template "(?P<template>[^"]+)"')
_DRIVER_NOT_REGISTERED = re.compile(r"DRA driver (?P<driver>\S+) is not registered")


def dra_refusals(scheduling: dict | None, events: list[Event], events_read: bool) -> dict | None:
    """What DRA refused this pod: `scheduler` (the scheduler's reasons), `claim_creation` and `node_prepare`
    (the controller's and the kubelet's event messages), with the claims, device classes, templates and
    drivers they name. None when neither the scheduling verdict nor the events could be read."""
    if scheduling is None and not events_read:
        return None
    message = (scheduling or {}).get("message") or ""
    scheduler_kinds, names = [], _Names()
    for kind, pattern in SCHEDULER_REASONS if message else ():
        found = list(pattern.finditer(message))
        if found:
            scheduler_kinds.append(kind)
            for m in found:
                names.add(m.groupdict())
    creation = [e.message for e in events if e.reason == CLAIM_CREATION_FAILED] if events_read else None
    prepare = [e.message for e in events if e.reason == PREPARE_FAILED] if events_read else None
    for text in creation or []:
        names.add(_groups(_TEMPLATE, text))
    for text in prepare or []:
        names.add(_groups(_DRIVER_NOT_REGISTERED, text))
    return {
        "scheduler": scheduler_kinds,
        "scheduler_message": message if scheduler_kinds else None,
        "claim_creation": creation,
        "node_prepare": prepare,
        "driver_not_registered": names.drivers,
        "claims": names.claims,
        "device_classes": names.device_classes,
        "templates": names.templates,
    }


def _groups(pattern: re.Pattern[str], text: str) -> dict[str, str]:
    return {k: v for m in pattern.finditer(text) for k, v in m.groupdict().items()}


class _Names:
    def __init__(self) -> None:
        self.claims: list[str] = []
        self.device_classes: list[str] = []
        self.templates: list[str] = []
        self.drivers: list[str] = []

    def add(self, groups: Mapping[str, str | None]) -> None:
        for key, into in (
            ("claim", self.claims),
            ("device_class", self.device_classes),
            ("template", self.templates),
            ("driver", self.drivers),
        ):
            value = groups.get(key)
            if value and value not in into:
                into.append(value)
