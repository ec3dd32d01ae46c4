"""detect-secrets' regex detectors, kept between runs.

Building them means importing detect-secrets (which imports requests and each of its plugins) and
instantiating every plugin: about 0.1 s, a fifth of a triage. Compiling the same regexes from their
text takes a few milliseconds. So the first run writes each detector's pattern and flags to
`$XDG_CACHE_HOME/llmdiag/detectors.json` (`~/.cache/llmdiag/` by default), keyed by where
detect-secrets is installed, when its files last changed and which detectors llmdiag leaves out;
later runs compile from that file. A cache that cannot be read, written or trusted is passed over:
the detectors are built from the library, as without it.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

FORMAT = 1
FILE = "detectors.json"


def denylist(skipped: frozenset[str]) -> list[tuple[str, int]]:
    """(pattern, flags) of every regex-based detector of detect-secrets whose class is not `skipped`."""
    key = _key(skipped)
    if key is not None and (cached := _read(key)) is not None:
        return cached
    built = from_library(skipped)
    if key is not None:
        _write(key, built)
    return built


def from_library(skipped: frozenset[str]) -> list[tuple[str, int]]:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import BasePlugin, RegexBasedDetector

    found: list[tuple[str, int]] = []
    # the library's return type has a TypeVar that nothing binds: the plugins are BasePlugin classes
    plugins: Mapping[str, type[BasePlugin]] = get_mapping_from_secret_type_to_class()
    for detector in plugins.values():
        if issubclass(detector, RegexBasedDetector) and detector.__name__ not in skipped:
            found += [(p.pattern, p.flags) for p in detector().denylist]
    return found


def cache_file() -> Path:
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(home) / "llmdiag" / FILE


def _key(skipped: frozenset[str]) -> str | None:
    """What the cached list was built from; None where detect-secrets cannot be found without importing it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("detect_secrets")
        if spec is None or spec.origin is None:
            return None
        package = Path(spec.origin).parent
        stamps = [(os.stat(p).st_mtime_ns, os.stat(p).st_size) for p in (package / "__init__.py", package / "plugins")]
    except (OSError, ImportError, ValueError):
        return None
    return json.dumps([FORMAT, str(package), stamps, sorted(skipped)])


def _read(key: str) -> list[tuple[str, int]] | None:
    try:
        data = json.loads(cache_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key:
        return None
    detectors = data.get("detectors")
    if not isinstance(detectors, list) or not detectors:
        return None
    if not all(isinstance(d, list) and len(d) == 2 and isinstance(d[0], str) and type(d[1]) is int for d in detectors):
        return None
    return [(pattern, flags) for pattern, flags in detectors]


def _write(key: str, detectors: list[tuple[str, int]]) -> None:
    path = cache_file()
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{FILE}.")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"key": key, "detectors": detectors}, f)
        os.replace(temporary, path)
    except OSError:  # a read-only home (a container): the next run builds them again
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
