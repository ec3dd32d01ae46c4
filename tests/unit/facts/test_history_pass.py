"""The history pass builds only the window's facts again: what it takes over must be what a whole
build without a window gives, on every fixture."""

from pathlib import Path

import pytest

from diag.bundle.files import Bundle
from diag.bundle.load import load_bundle
from diag.facts import build_facts
from diag.facts.history_pass import without_window
from diag.link.join import join
from diag.snapshot.clock import Clock

FIXTURES = sorted(p for p in (Path(__file__).parents[3] / "fixtures").iterdir() if (p / "expected.json").exists())


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name)
def test_facts_rebuilt_without_the_window_equal_a_whole_build(fixture: Path) -> None:
    snap = join(load_bundle(Bundle.open(fixture)))
    clock = Clock.of(snap, 3600)
    windowed = build_facts(snap, clock)
    whole = build_facts(snap, clock.without_window())
    rebuilt = without_window(snap, windowed, clock.without_window())
    assert list(rebuilt.scopes) == list(whole.scopes)
    assert rebuilt.cluster == whole.cluster
    assert rebuilt.scopes == whole.scopes
