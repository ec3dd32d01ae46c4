"""facts.common.plain: a model object as the plain dict CEL reads, the same as dataclasses.asdict."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest

from diag.bundle.files import Bundle
from diag.bundle.load import load_bundle
from diag.facts.common import plain
from diag.link.join import join
from diag.snapshot.model import JSON_ONLY, Pod

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
BUNDLES = sorted(p for p in FIXTURES.iterdir() if (p / "expected.json").exists())


@pytest.mark.parametrize("fixture", BUNDLES, ids=lambda p: p.name)
def test_plain_is_asdict_for_every_object_of_a_bundle(fixture: Path) -> None:
    snap = join(load_bundle(Bundle.open(fixture)))
    objects = [*snap.pods, *snap.nodes, *snap.gpus, *snap.vllm_servers, *snap.ray_nodes, *snap.ray_actors,
               *snap.placement_groups, *snap.events, *snap.hpas, *snap.ray_clusters, *snap.daemonsets, *snap.workloads,
               *snap.services]  # fmt: skip
    for obj in objects:
        assert plain(obj) == dataclasses.asdict(obj)
    for summary in (s.summary for s in snap.vllm_servers if s.summary is not None):
        assert plain(summary) == dataclasses.asdict(summary)


def test_plain_leaves_out_the_dropped_fields_and_copies_the_rest() -> None:
    snap = join(load_bundle(Bundle.open(FIXTURES / "demo")))
    pod = snap.pods[0]
    facts = plain(pod, drop=("containers", "events"))
    assert "containers" not in facts and "events" not in facts and facts["name"] == pod.name
    facts["labels"]["changed"] = "yes"
    assert "changed" not in pod.labels


def _json_only_fields(cls: type) -> list[str]:
    hints = typing.get_type_hints(cls, include_extras=True)
    return [
        name
        for name, hint in hints.items()
        if typing.get_origin(hint) is typing.Annotated and JSON_ONLY in hint.__metadata__
    ]


def _json_types_only(value: object) -> bool:
    if isinstance(value, dict):
        return all(type(k) is str and _json_types_only(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_json_types_only(v) for v in value)
    return type(value) in (str, int, float, bool, type(None))


@pytest.mark.parametrize("fixture", BUNDLES, ids=lambda p: p.name)
def test_the_json_only_fields_hold_json_types_alone_and_are_shared(fixture: Path) -> None:
    snap = join(load_bundle(Bundle.open(fixture)))
    for obj in [*snap.pods, *snap.nodes, *snap.hpas, *snap.ray_clusters, *snap.workloads]:
        names = _json_only_fields(type(obj))
        assert names, type(obj)
        facts = plain(obj)
        for name in names:
            assert _json_types_only(getattr(obj, name)), (type(obj).__name__, name)
            assert facts[name] is getattr(obj, name)


def test_only_the_json_only_fields_are_shared() -> None:
    pod = join(load_bundle(Bundle.open(FIXTURES / "demo"))).pods[0]
    facts = plain(pod)
    shared = {name for name, value in facts.items() if isinstance(value, (dict, list)) and value is getattr(pod, name)}
    assert shared == set(_json_only_fields(Pod))
