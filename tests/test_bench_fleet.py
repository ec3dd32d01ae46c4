"""The fleet benchmark's bundles (bench/generate.py) at size S, as a smoke test: the tiled bundle is
read whole, every injected fault is found among a copy of healthy serving cells, and the same
analysis twice gives the same report, byte for byte. Timing lives in bench/bench_analyze.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from generate import SIZES, expected_rules, generate  # noqa: E402


@pytest.fixture(scope="module")
def small_fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    bundle = tmp_path_factory.mktemp("fleet") / "S"
    generate(bundle, SIZES["S"])
    return bundle


def analyze(bundle: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "diag.cli", "analyze", str(bundle), "--output", "json"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.stdout, done.stderr[-2000:]
    return done.stdout


def test_every_injected_fault_is_found_beside_the_healthy_copies(small_fleet: Path) -> None:
    report = json.loads(analyze(small_fleet))
    fired = {f["rule"] for f in report["findings"]}
    assert set(expected_rules().values()) <= fired, sorted(fired)
    assert not [name for name, s in report["sources"].items() if s["status"] == "failed"], report["sources"]
    assert [rule for rule, s in report["rules"].items() if s["status"] == "error"] == []


def test_the_same_analysis_twice_is_the_same_report(small_fleet: Path) -> None:
    assert analyze(small_fleet) == analyze(small_fleet)
