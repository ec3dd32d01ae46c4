"""The analysis runs without the cyclic garbage collector (diag.analyze): it must be on again after."""

import gc
from pathlib import Path

import pytest

from diag.analyze import analyze_bundle
from diag.bundle.files import Bundle

DEMO = Path(__file__).parents[2] / "fixtures" / "healthy-k8s-vllm"


def test_the_collector_is_on_again_after_an_analysis_and_after_one_that_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    assert gc.isenabled()
    analyze_bundle(Bundle.open(DEMO))
    assert gc.isenabled()

    def fails(*args: object) -> None:
        assert not gc.isenabled()  # the analysis itself ran without it
        raise RuntimeError("a parser broke")

    monkeypatch.setattr("diag.analyze.load_bundle", fails)
    with pytest.raises(RuntimeError):
        analyze_bundle(Bundle.open(DEMO))
    assert gc.isenabled()
