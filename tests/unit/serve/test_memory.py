"""diag/serve/memory.py: what a cycle's thread freed goes back to the system."""

from __future__ import annotations

import os
import threading

import pytest

from diag.serve import memory


def resident_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads /proc")
def test_what_a_finished_thread_freed_is_returned_after_release() -> None:
    kept: list[list[bytes]] = []

    def cycle() -> None:
        transient = [bytes(1000) for _ in range(150_000)]  # 150 MB of objects too large for pymalloc
        kept.append([bytes(2000) for _ in range(1000)])  # allocated after them: the arena cannot shrink
        del transient

    worker = threading.Thread(target=cycle)
    worker.start()
    worker.join()
    held = resident_mb()
    if not memory.release():
        pytest.skip("no glibc malloc_trim here")
    assert resident_mb() < held - 100, (held, resident_mb())
