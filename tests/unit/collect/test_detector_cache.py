"""detect-secrets' detectors come from the cache file when it was built from the same installation, and
from the library otherwise; the redaction is the same either way."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from diag.collect import detector_cache, redact

SKIPPED = redact._SKIPPED_DETECTORS
SAMPLES = (
    "AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE and a JWT eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
    "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB slack xoxb-123456789012-123456789012-abcdefghijklmnopqrstuvwx",
    "nothing secret here: pod qwen-0 on node gpu-1",
)


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "llmdiag" / detector_cache.FILE


def test_the_first_run_writes_what_the_library_gives_and_later_runs_read_it(
    cache_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = detector_cache.denylist(SKIPPED)
    assert built == detector_cache.from_library(SKIPPED) and len(built) > 10
    assert json.loads(cache_home.read_text())["detectors"] == [list(d) for d in built]

    def no_library(skipped: frozenset[str]) -> list[tuple[str, int]]:
        raise AssertionError("the library was loaded although the cache holds the detectors")

    monkeypatch.setattr(detector_cache, "from_library", no_library)
    assert detector_cache.denylist(SKIPPED) == built


def test_a_cache_of_another_installation_or_skip_list_is_built_again(cache_home: Path) -> None:
    detector_cache.denylist(SKIPPED)
    fewer = detector_cache.denylist(SKIPPED | {"AWSKeyDetector"})
    assert len(fewer) < len(detector_cache.from_library(SKIPPED))
    assert json.loads(cache_home.read_text())["detectors"] == [list(d) for d in fewer]


@pytest.mark.parametrize(
    "content",
    ["not json", "[]", '{"key": "x", "detectors": []}', "{}", None],
)
def test_a_cache_that_cannot_be_trusted_is_passed_over(cache_home: Path, content: str | None) -> None:
    detector_cache.denylist(SKIPPED)
    data = json.loads(cache_home.read_text())
    if content is None:  # the right key, but no pattern list
        cache_home.write_text(json.dumps({"key": data["key"], "detectors": [["(", "not flags"]]}))
    else:
        cache_home.write_text(content)
    assert detector_cache.denylist(SKIPPED) == detector_cache.from_library(SKIPPED)


def test_a_home_that_cannot_be_written_still_redacts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    assert detector_cache.denylist(SKIPPED) == detector_cache.from_library(SKIPPED)
    assert list(tmp_path.iterdir()) == [blocked]


def test_redaction_is_the_same_from_the_cache_as_from_the_library(tmp_path: Path) -> None:
    script = (
        "from diag.collect.redact import redact_text; import json, sys; "
        "print(json.dumps([redact_text(s) for s in sys.argv[1:]]))"
    )
    env = {"XDG_CACHE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    argv = [sys.executable, "-c", script, *SAMPLES]
    runs = [subprocess.run(argv, capture_output=True, text=True, env=env, check=True) for _ in range(2)]
    first, second = (json.loads(r.stdout) for r in runs)
    assert first == second
    assert "AKIAIOSFODNN7EXAMPLE" not in first[0] and "ghp_" not in first[1] and first[2] == SAMPLES[2]
    assert (tmp_path / "llmdiag" / detector_cache.FILE).is_file()
