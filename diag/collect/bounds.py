"""Every answer bounded: a body is read as a stream, up to a size cap and a deadline, and an answer of
429 or 503 is asked again (honouring Retry-After) while the deadline allows, a bounded number of times.

A source that sends more than the cap, or keeps sending past its deadline, is that source's one-line
failure; memory never holds more than the cap (plus one chunk).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime

DEFAULT_MAX_ANSWER_BYTES = 64 * 1024 * 1024
CHUNK_BYTES = 64 * 1024
RETRY_STATUSES = frozenset({429, 503})
MAX_ATTEMPTS = 3  # the first request and two more
FIRST_BACKOFF_S = 0.5  # without Retry-After: 0.5 s, then 1 s


class AnswerTooLarge(Exception):
    def __init__(self, max_bytes: int) -> None:
        super().__init__(f"answer larger than {describe_bytes(max_bytes)} (--max-answer-bytes); not kept")
        self.max_bytes = max_bytes


class AnswerTooSlow(Exception):
    def __init__(self, elapsed_s: float) -> None:
        super().__init__(f"timeout after {elapsed_s:.1f}s: the answer was still arriving")
        self.elapsed_s = elapsed_s


def read_capped(
    read: Callable[[int], bytes],
    max_bytes: int,
    started: float,
    deadline: float,
    watch: Callable[[bytes], None] | None = None,
) -> bytes:
    """Call `read(n)` until it returns b"": AnswerTooLarge past `max_bytes`, AnswerTooSlow past `deadline`
    (monotonic; `started` is for the message). `watch` sees each chunk and may raise to stop reading."""
    chunks: list[bytes] = []
    total = 0
    while True:
        if time.monotonic() > deadline:
            raise AnswerTooSlow(time.monotonic() - started)
        chunk = read(CHUNK_BYTES)
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > max_bytes:
            raise AnswerTooLarge(max_bytes)
        if watch is not None:
            watch(chunk)
        chunks.append(chunk)


def retry_after_s(value: str | None, attempt: int, now: float | None = None) -> float:
    """Seconds to wait before asking again: Retry-After in seconds or as an HTTP date, else a backoff."""
    if value:
        value = value.strip()
        if value.isdigit():
            return float(value)
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            when = None
        if when is not None and when.tzinfo is not None:
            return max(0.0, when.timestamp() - (time.time() if now is None else now))
    return FIRST_BACKOFF_S * 2 ** (attempt - 1)


def with_retries(
    once: Callable[[float], tuple[int, bytes, str | None]], timeout: float, sleep: Callable[[float], None] = time.sleep
) -> tuple[int, bytes]:
    """Run `once(deadline)` -> (status, body, Retry-After); ask again on 429/503 while another attempt
    fits before the deadline. The last answer is returned as it came (the caller reports its status)."""
    deadline = time.monotonic() + timeout
    attempt = 1
    while True:
        status, body, retry_after = once(deadline)
        if status not in RETRY_STATUSES or attempt >= MAX_ATTEMPTS:
            return status, body
        delay = retry_after_s(retry_after, attempt)
        if time.monotonic() + delay >= deadline:
            return status, body
        sleep(delay)
        attempt += 1


def describe_bytes(n: int) -> str:
    return f"{n / 1024 / 1024:g} MiB" if n >= 1024 * 1024 else f"{n} bytes"
