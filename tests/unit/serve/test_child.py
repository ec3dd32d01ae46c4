"""diag/serve/child.py: work in a forked child answers as in-process, its failures come back by name,
and what it changes stays in the child."""

from __future__ import annotations

import os
import signal

import pytest

from diag.serve import child

pytestmark = pytest.mark.skipif(not child.FORKS, reason="fork is used on Linux only")
held: list[int] = []


def test_the_answer_comes_back_and_what_the_work_changed_stays_in_the_child() -> None:
    def work() -> dict:
        held.extend(range(1000))  # the parent's list, changed in the child's memory only
        return {"pid": os.getpid(), "big": "x" * 5_000_000}

    answer = child.run(work)
    assert answer["pid"] != os.getpid() and len(answer["big"]) == 5_000_000
    assert held == []


def test_an_exception_comes_back_as_its_line() -> None:
    def work() -> None:
        raise ValueError("not a bundle")

    with pytest.raises(child.ChildFailed, match="ValueError: not a bundle"):
        child.run(work)


def test_a_child_that_dies_is_said_so_and_the_next_runs() -> None:
    def work() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    with pytest.raises(child.ChildFailed, match="ended without an answer: killed by SIGKILL"):
        child.run(work)
    assert child.run(lambda: 42) == 42


def test_without_fork_the_work_runs_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(child, "FORKS", False)
    assert child.run(os.getpid) == os.getpid()
