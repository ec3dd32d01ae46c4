"""Hypothesis profiles of the fuzz suites: `ci` (the default, a few seconds per suite, the same examples
every run) and `long` (LLMDIAG_FUZZ=long; LLMDIAG_FUZZ_EXAMPLES sets how many examples per test)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]
settings.register_profile(
    "ci", max_examples=25, deadline=None, derandomize=True, database=None, suppress_health_check=_SLOW
)
settings.register_profile(
    "long",
    max_examples=int(os.environ.get("LLMDIAG_FUZZ_EXAMPLES", "3000")),
    deadline=None,
    suppress_health_check=_SLOW,
)
settings.load_profile(os.environ.get("LLMDIAG_FUZZ", "ci"))


def scaled(examples: int) -> settings:
    """`examples` under the ci profile; the long profile's count otherwise."""
    return settings(max_examples=examples) if os.environ.get("LLMDIAG_FUZZ", "ci") == "ci" else settings()
