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


FREED_AGAIN = """
import sys
from diag.serve import memory

def resident_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

if sys.argv[1] == "apart" and not memory.keep_large_blocks_apart():
    sys.exit(3)
first = b"x" * (8 << 20)  # glibc's own threshold: freeing it raises the threshold to its size
del first
before = resident_mb()
second = b"y" * (8 << 20)  # then from the heap, where freeing it gives nothing back
del second
print(resident_mb() - before)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads /proc")
def test_a_large_block_freed_is_given_back_at_once_with_large_blocks_apart() -> None:
    import subprocess
    import sys

    kept = {}
    for mode in ("default", "apart"):
        run = subprocess.run([sys.executable, "-c", FREED_AGAIN, mode], capture_output=True, text=True)
        if run.returncode == 3:
            pytest.skip("no glibc mallopt here")
        assert run.returncode == 0, run.stderr
        kept[mode] = float(run.stdout)
    assert kept["default"] > 6 and kept["apart"] < 1, kept
