"""facts.common.plain: a model object as the plain dict CEL reads, the same as dataclasses.asdict."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from diag.bundle import Bundle
from diag.facts.common import plain
from diag.join import join
from diag.load import load_bundle

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BUNDLES = sorted(p for p in FIXTURES.iterdir() if (p / "expected.json").exists())


@pytest.mark.parametrize("fixture", BUNDLES, ids=lambda p: p.name)
def test_plain_is_asdict_for_every_object_of_a_bundle(fixture: Path) -> None:
    snap = join(load_bundle(Bundle.open(fixture)))
    objects = [*snap.pods, *snap.nodes, *snap.gpus, *snap.vllm_servers, *snap.ray_nodes, *snap.ray_actors,
               *snap.placement_groups, *snap.events, *snap.hpas, *snap.ray_clusters, *snap.daemonsets, *snap.workloads, *snap.services]  # fmt: skip
    for obj in objects:
        assert plain(obj) == dataclasses.asdict(obj)
    for server in snap.vllm_servers:
        assert plain(server.metrics()) == dataclasses.asdict(server.metrics())


def test_plain_leaves_out_the_dropped_fields_and_copies_the_rest() -> None:
    snap = join(load_bundle(Bundle.open(FIXTURES / "demo")))
    pod = snap.pods[0]
    facts = plain(pod, drop=("containers", "events"))
    assert "containers" not in facts and "events" not in facts and facts["name"] == pod.name
    facts["labels"]["changed"] = "yes"
    assert "changed" not in pod.labels
