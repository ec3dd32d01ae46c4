"""Hand the memory a triage freed back to the system.

A process that stays up grows otherwise: glibc's allocator keeps what a cycle's threads freed in their
arenas (bench/serve.md: about 12 MB a cycle at size L), and Python's objects of more than 512 bytes
come from those arenas. `malloc_trim(0)` returns every free page of every arena. Where the C library
is not glibc (musl, macOS) there is nothing to call, and nothing is done.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def release() -> bool:
    """Return the free pages of the allocator's arenas to the system; False where it cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
