"""The decisive line of a crashed container's log: the one that says why it exited.

In order of precedence, found in the log's tail only (TAIL_BYTES: a crash's cause sits at the end):
  - a Go panic ("panic: ..." before "goroutine N [running]:");
  - the exception of the last Python traceback ("SomeError: message"), stepping back over exceptions
    that only point elsewhere ("EngineDeadError: ... See stack trace (above) for the root cause"),
    with the module paths of its frames;
  - the last FATAL / CRITICAL line (klog's F, logrus' level=fatal, Python's CRITICAL, "fatal error:");
  - the last ERROR line (vLLM's and Python logging's ERROR, klog's E, argparse's "prog: error: ...").

Each is then placed: its family (permission denied, address in use, out of memory ...) and the layer its
frames or its family point at, from the table rules/data/failure-families.yaml (read once). Lines
written before the prefixes vLLM, Ray and kubectl add ("(EngineCore_DP0 pid=55) ERROR 12-09 06:33:23
[core.py:710] ", "[rank0]: ", "2025-...Z ") are read without them; escape codes are dropped.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

from diag.core.errors import UserError
from diag.core.rules_dir import builtin_rules_dir, load_yaml
from diag.snapshot.model import LAYERS

TAIL_BYTES = 64 * 1024
MAX_LINE = 400  # characters of the decisive line kept: an exception message can be a whole request
FAMILIES_FILE = Path("data") / "failure-families.yaml"

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?")
# The prefixes in front of a program's own line, each optional, in this order: kubectl's --timestamps stamp,
# vLLM's process tag "(EngineCore_DP0 pid=55) " (Ray's "(RayWorkerWrapper pid=3, ip=...) " too), torchrun's
# "[rank0]: ", vLLM's logger "ERROR 12-09 06:33:23 [core.py:710] ". One regex: it runs on every line of the tail.
_PREFIX = re.compile(
    r"(?:\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2}) )?"
    r"(?:\([\w.:-]+(?: [\w.:=,-]+)*? pid=\d+(?:, ip=[\d.]+)?\) )?"
    r"(?:\[rank\d+\]:\s?)?"
    r"(?:(DEBUG|INFO|WARNING|ERROR|CRITICAL) \d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)? \[[^\]]*\] ?)?"
)

_TRACEBACK = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s+File "([^"]+)", line \d+')
_EXCEPTION = re.compile(r"^((?:[A-Za-z_][\w]*\.)*[A-Z][\w]*)(?::\s*(.*))?$")
_LEVELS = frozenset({"DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL", "FATAL"})
_CHAINED = (
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
)
_GO_PANIC = re.compile(r"^panic: (.+)$")
_GO_GOROUTINE = re.compile(r"^goroutine \d+ \[")
_GO_FRAME = re.compile(r"^\t(/\S+\.go):\d+")
_FATAL = re.compile(
    r"^F\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\d+ [\w.-]+:\d+\] (.+)$"  # klog
    r"|^fatal error: (.+)$"  # the Go runtime
    r"|level=fatal (.+)$"  # logrus
    r"|^CRITICAL(?::[\w.]+:|\s+)(.+)$"  # Python logging's default format
    r"|^\[[^\]]*\bC \d+ \d+\] (.+)$"  # Ray's C++ logger: "[2025-05-01 10:00:00,000 C 42 42] file.cc:12: ..."
)
_ERROR = re.compile(
    r"^E\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\d+ [\w.-]+:\d+\] (.+)$"  # klog
    r"|level=error (.+)$"  # logrus
    r"|^ERROR(?::[\w.]+:|\s+)(.+)$"  # Python logging's default format
    r"|^\[[^\]]*\bE \d+ \d+\] (.+)$"  # Ray's C++ logger
    r"|^([\w./-]+(?: [\w-]+)?: error: .+)$"  # argparse: "vllm serve: error: unrecognized arguments: ..."
)


class FamilyTableError(UserError):
    """rules/data/failure-families.yaml is wrong: one line naming the entry."""


@dataclass(frozen=True)
class Family:
    name: str
    pattern: re.Pattern[str]
    description: str
    fix: str
    layer: str | None  # None: the layer of where the line comes from
    examples: tuple[str, ...] = ()  # lines of its sources that it must match


@dataclass(frozen=True)
class FamilyTable:
    origins: tuple[tuple[re.Pattern[str], str], ...]  # frame path or exception name -> layer
    consequences: re.Pattern[str]  # lines that only point at a cause written elsewhere
    families: tuple[Family, ...]


@dataclass
class Decisive:
    """The line that says why a container exited, and where it points."""

    line: str  # the line as the program wrote it, prefixes removed, at most MAX_LINE characters
    kind: str  # last exception | panic | last fatal line | last error line
    exception: str | None = None  # the exception's name, for a Python traceback
    frames: list[str] = field(default_factory=list)  # the frames' module paths, outermost first
    origin: str | None = None  # the layer its frames point at (innermost mapped frame), None: no frame mapped
    family: str | None = None
    family_description: str | None = None
    fix: str | None = None
    layer: str | None = None  # family's layer, else origin; None: neither says (the caller decides)
    placed_by: str | None = None  # "family" | "frames" | None


def decisive_line(text: str | None, table: FamilyTable | None = None) -> Decisive | None:
    """The decisive line of a log (its last TAIL_BYTES), placed; None when it holds none."""
    if not text:
        return None
    table = table or builtin_table()
    tail = text[-TAIL_BYTES:]
    if "\x1b" in tail:
        tail = _ANSI.sub("", tail)
    read = [_unprefixed(line) for line in tail.splitlines()]
    if len(text) > TAIL_BYTES and read:
        read = read[1:]  # the first line of a cut tail is a part of one
    lines = [line for line, _ in read]
    found = (
        _go_panic(lines)
        or _python_exception(lines, table)
        or _last_level(read, _FATAL, ("CRITICAL",), "last fatal line", table)
        or _last_level(read, _ERROR, ("ERROR",), "last error line", table)
    )
    if found is not None:
        _place(found, table)
    return found


def _unprefixed(line: str) -> tuple[str, str | None]:
    """The line without the prefixes in front of the program's own text, and the level vLLM's logger gave it."""
    m = _PREFIX.match(line)
    assert m is not None  # every part of _PREFIX is optional: it matches every line
    rest, level = line[m.end() :].rstrip("\r"), m.group(1)
    # inside a traceback vLLM logs every line at ERROR: keep the traceback's own text
    if level is None or rest.startswith((" ", _TRACEBACK)) or not rest or rest in _CHAINED or _EXCEPTION.match(rest):
        return rest, level
    return f"{level} {rest}", level


def _go_panic(lines: list[str]) -> Decisive | None:
    for at in range(len(lines) - 1, -1, -1):
        m = _GO_PANIC.match(lines[at])
        if m is not None and any(_GO_GOROUTINE.match(line) for line in lines[at + 1 : at + 4]):
            frames = [f.group(1) for line in lines[at + 1 :] if (f := _GO_FRAME.match(line)) is not None]
            return Decisive(lines[at][:MAX_LINE], "panic", frames=frames)
    return None


def _python_exception(lines: list[str], table: FamilyTable) -> Decisive | None:
    """The exception of the last traceback that is not a mere consequence; stepping back through the
    chain ("The above exception was the direct cause ...") and then earlier tracebacks."""
    starts = [at for at, line in enumerate(lines) if line.strip() == _TRACEBACK]
    if not starts:  # a tail cut inside the traceback: from its first frame
        starts = [at - 1 for at, line in enumerate(lines) if _FRAME.match(line)][:1]
    for start in reversed(starts):
        frames: list[str] = []
        for line in lines[start + 1 :]:
            if (f := _FRAME.match(line)) is not None:
                frames.append(f.group(1))
                continue
            if not line or line[0].isspace() or line.strip() in _CHAINED:
                continue
            if line.startswith(_TRACEBACK):
                break
            m = _EXCEPTION.match(line)
            if m is None or m.group(1) in _LEVELS:
                continue  # another process' line written into the traceback ("nanobind: leaked 1 instances!")
            if frames and not table.consequences.search(line):
                return Decisive(line[:MAX_LINE], "last exception", exception=m.group(1), frames=frames)
            break
    return None


def _last_level(
    read: list[tuple[str, str | None]], pattern: re.Pattern[str], levels: tuple[str, ...], kind: str, table: FamilyTable
) -> Decisive | None:
    """The last line the pattern matches, or that vLLM's logger wrote at one of `levels`."""
    for line, level in reversed(read):
        if not line or line[0].isspace() or line.startswith(_TRACEBACK) or table.consequences.search(line):
            continue
        if level in levels or pattern.search(line):
            return Decisive(line.strip()[:MAX_LINE], kind)
    return None


def _place(found: Decisive, table: FamilyTable) -> None:
    found.origin = _origin(found, table)
    family = next((f for f in table.families if f.pattern.search(found.line)), None)
    if family is not None:
        found.family, found.family_description, found.fix = family.name, family.description, family.fix
    if family is not None and family.layer is not None:
        found.layer, found.placed_by = family.layer, "family"
    elif found.origin is not None:
        found.layer, found.placed_by = found.origin, "frames"


def _origin(found: Decisive, table: FamilyTable) -> str | None:
    """The layer of the innermost frame a row of `origins` names; else of the exception's own name."""
    for frame in reversed(found.frames):
        for pattern, layer in table.origins:
            if pattern.search(frame):
                return layer
    for pattern, layer in table.origins:
        if found.exception and pattern.search(found.exception):
            return layer
    return None


# --------------------------------------------------------------------------- the table


@functools.cache
def builtin_table() -> FamilyTable:
    return load_table(builtin_rules_dir() / FAMILIES_FILE)


def load_table(path: Path) -> FamilyTable:
    where = str(path)
    try:
        data = load_yaml(path.read_text())
    except (OSError, ValueError) as e:
        raise FamilyTableError(f"{where}: not readable ({' '.join(str(e).split())[:200]})") from None
    if not isinstance(data, dict):
        raise FamilyTableError(f"{where}: expected origins, consequences and families")
    origins = tuple(
        (_compiled(o.get("match"), f"{where}: origin {n + 1}"), _layer(o.get("layer"), f"{where}: origin {n + 1}"))
        for n, o in enumerate(data.get("origins") or [])
    )
    consequences = [
        _compiled(c.get("regex"), f"{where}: consequence {n + 1}").pattern
        for n, c in enumerate(data.get("consequences") or [])
    ]
    families = []
    for name, spec in (data.get("families") or {}).items():
        at = f"{where}: family {name}"
        if not isinstance(spec, dict) or not all(
            isinstance(spec.get(k), str) and spec[k].strip() for k in ("description", "fix")
        ):
            raise FamilyTableError(f"{at}: needs a description and a fix")
        regexes = spec.get("patterns")
        if not isinstance(regexes, list) or not regexes:
            raise FamilyTableError(f"{at}: needs a list of patterns")
        parts, examples = [], []
        for n, p in enumerate(regexes):
            compiled = _compiled(p.get("regex") if isinstance(p, dict) else None, f"{at}, pattern {n + 1}")
            if not (isinstance(p.get("source"), str) and p["source"].strip()):
                raise FamilyTableError(f"{at}, pattern {n + 1}: needs a `source`")
            if not (isinstance(p.get("example"), str) and compiled.search(p["example"])):
                raise FamilyTableError(f"{at}, pattern {n + 1}: needs an `example` its regex matches")
            parts.append(f"(?:{compiled.pattern})")
            examples.append(p["example"])
        layer = spec.get("layer")
        families.append(
            Family(
                name,
                re.compile("|".join(parts)),
                spec["description"].strip(),
                spec["fix"].strip(),
                _layer(layer, at) if layer is not None else None,
                tuple(examples),
            )
        )
    return FamilyTable(origins, re.compile("|".join(f"(?:{c})" for c in consequences) or r"(?!)"), tuple(families))


def _compiled(regex: object, where: str) -> re.Pattern[str]:
    if not isinstance(regex, str):
        raise FamilyTableError(f"{where}: needs a regex")
    try:
        return re.compile(regex)
    except re.error as e:
        raise FamilyTableError(f"{where}: the regex does not compile ({e})") from None


def _layer(layer: object, where: str) -> str:
    if layer not in LAYERS:
        raise FamilyTableError(f"{where}: layer must be one of {', '.join(LAYERS)}, not {layer!r}")
    return str(layer)
