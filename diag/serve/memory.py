"""Hand the memory a triage freed back to the system, and keep large blocks out of the heap.

A process that stays up grows otherwise:
- glibc's allocator keeps what a cycle's threads freed in their arenas (bench/serve.md: about 12 MB
  a cycle at size L), and Python's objects of more than 512 bytes come from those arenas.
  `malloc_trim(0)` returns every free page of every arena.
- glibc serves a block of 128 KiB or more with pages of its own (mmap) and returns them when it is
  freed, but each such free raises that threshold to the block's size (up to 32 MiB). A cycle's
  lists and files (a fleet's pods.json is 12 MB) then came from the heap, the objects a cycle keeps
  were placed in the holes they left, and the next cycle's blocks went above them: 8 MB more every
  cycle, which no trim could give back. Setting the threshold fixes it where it is.
Where the C library is not glibc (musl, macOS) there is nothing to call, and nothing is done.
"""

from __future__ import annotations

import ctypes
import functools

M_MMAP_THRESHOLD = -3  # glibc's malloc.h
LARGE_BLOCK = 128 * 1024  # glibc's own default threshold, which then no longer moves


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None  # glibc's own


def release() -> bool:
    """Return the free pages of the allocator's arenas to the system; False where it cannot."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


def keep_large_blocks_apart() -> bool:
    """From now on every block of LARGE_BLOCK or more has pages of its own, returned when it is freed;
    False where it cannot."""
    libc = _libc()
    return libc is not None and libc.mallopt(M_MMAP_THRESHOLD, LARGE_BLOCK) == 1
