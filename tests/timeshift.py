"""A bundle copy with every timestamp moved back, the collection time left where it was.

Dates in any text file ("2026-12-01T14:13:58Z", Ray's "2026-12-02 16:50:40.925000") and Ray's
millisecond times in JSON files are moved; the epoch, which Ray writes for "not ended", stays.
manifest.json's collected_at is set to the original bundle's collection time, so that everything
in the copy is `seconds` older at collection than in the original.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

from diag.bundle.files import Bundle
from diag.bundle.load import load_bundle
from diag.link.join import join
from diag.snapshot.clock import Clock, iso, parse_time

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})?")
_EPOCH_PREFIX = "1970-01-01"
_MS_KEYS = ("start_time_ms", "end_time_ms", "startTimeMs", "endTimeMs", "startTime", "endTime", "timestamp")


def collection_time(bundle: Bundle) -> str:
    clock = Clock.of(join(load_bundle(bundle)))
    assert clock.now is not None, f"{bundle.origin}: no clock to pin"
    return iso(clock.now)


def shifted(bundle: Bundle, seconds: float) -> Bundle:
    collected_at = collection_time(bundle)
    files = {}
    for name, data in bundle.files.items():
        try:
            text = data.decode()
        except UnicodeDecodeError:
            files[name] = data
            continue
        text = _DATE.sub(lambda m: _shift_date(m.group(0), seconds), text)
        if name.endswith(".json"):
            text = _shift_json_ms(text, seconds)
        files[name] = text.encode()
    manifest = json.loads(files["manifest.json"]) if "manifest.json" in files else {}
    manifest["collected_at"] = collected_at
    files["manifest.json"] = json.dumps(manifest).encode()
    return Bundle(files, origin=f"{bundle.origin} (times -{seconds:g}s)")


def _shift_date(text: str, seconds: float) -> str:
    if text.startswith(_EPOCH_PREFIX):
        return text
    moment = parse_time(text)
    assert moment is not None, text
    moved = moment - timedelta(seconds=seconds)
    if "T" not in text:  # Ray's humanised form, no zone
        return moved.strftime("%Y-%m-%d %H:%M:%S.%f" if "." in text else "%Y-%m-%d %H:%M:%S")
    return moved.isoformat().replace("+00:00", "Z") if "." in text else iso(moved)


def _shift_json_ms(text: str, seconds: float) -> str:
    try:
        data = json.loads(text)
    except ValueError:
        return text
    return json.dumps(_walk(data, seconds))


def _walk(value: Any, seconds: float) -> Any:
    if isinstance(value, dict):
        return {k: _moved_ms(v, seconds) if k in _MS_KEYS else _walk(v, seconds) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v, seconds) for v in value]
    return value


def _moved_ms(value: Any, seconds: float) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return type(value)(value - seconds * 1000)
    if isinstance(value, str) and value.isdigit() and int(value) > 0:
        return str(int(value) - int(seconds * 1000))
    return value
