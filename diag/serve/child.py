"""Work done in a child process forked for it, so that the memory it takes goes when it ends.

A triage's analysis parses its whole bundle again into objects of a few dozen bytes each: at fleet size
a few hundred MB that live for seconds. Python's allocator gives memory back to the system only in
whole arenas, and what the server keeps from a cycle (a watched change, a kept report's record) lands
among those objects and holds their arenas for good: the server's memory rose with every cycle
(bench/serve.md). In a child, the analysis' memory is the child's, and it goes with it.

The child is forked from a process with threads (the watches, the HTTP server). It runs only `work`,
which must take no lock another thread may hold (the analyses take turns; they neither log nor read
the network), sends its result back pickled through a pipe and leaves with `os._exit`, running no
clean-up of the parent's. Where there is no fork, or one unsafe with threads (macOS), `work` runs
in-process.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
FORKS = sys.platform == "linux"


class ChildFailed(RuntimeError):
    """The work raised in the child (its line), or the child ended without an answer."""


def run(work: Callable[[], T]) -> T:
    """`work()`, in a child process where FORKS; its exception comes back as ChildFailed."""
    if not FORKS:
        return work()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        _child(work, read_fd, write_fd)
    os.close(write_fd)
    try:
        with os.fdopen(read_fd, "rb") as pipe:
            answer = pipe.read()
    finally:
        _, status = os.waitpid(pid, 0)
    if not answer:
        raise ChildFailed(f"the process it ran in ended without an answer: {_ended(status)}")
    ok, value = pickle.loads(answer)
    if not ok:
        raise ChildFailed(value)
    return value


def _child(work: Callable[[], object], read_fd: int, write_fd: int) -> None:
    code = 0
    try:
        os.close(read_fd)
        try:
            answer = pickle.dumps((True, work()), protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException as e:  # every failure goes back as its line
            answer, code = pickle.dumps((False, f"{type(e).__name__}: {e}")), 1
        with os.fdopen(write_fd, "wb") as pipe:
            pipe.write(answer)
    finally:
        os._exit(code)


def _ended(status: int) -> str:
    code = os.waitstatus_to_exitcode(status)
    if code >= 0:
        return f"exit code {code}"
    name = signal.Signals(-code).name
    return f"killed by {name}" + (" (out of memory?)" if -code == signal.SIGKILL else "")
