"""NVIDIA's Xid catalogue, as data (rules/data/xid-catalogue.yaml, read once): what an Xid means and what
NVIDIA says to do about it, for every code the catalogue lists."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from diag.core.errors import UserError
from diag.core.rules_dir import builtin_rules_dir, load_yaml

CATALOGUE_FILE = Path("data") / "xid-catalogue.yaml"


class XidCatalogueError(UserError):
    """rules/data/xid-catalogue.yaml is wrong: one line naming the entry."""


@dataclass(frozen=True)
class XidEntry:
    code: int
    mnemonic: str | None  # None: a code the catalogue does not list
    meaning: str  # the catalogue's description, else its mnemonic
    immediate: str | None  # resolution bucket, immediate action (RESET_GPU, RESTART_BM ...); None: none given
    immediate_text: str  # that bucket in words
    investigate: str | None  # resolution bucket, investigatory action
    named_by: str | None  # the rule (or setting) that names this Xid with a procedure of its own


@dataclass(frozen=True)
class XidCatalogue:
    source: str
    entries: dict[int, XidEntry]

    def entry(self, code: int) -> XidEntry:
        found = self.entries.get(code)
        if found is not None:
            return found
        return XidEntry(
            code,
            None,
            f"not in NVIDIA's Xid catalogue ({self.source})",
            None,
            "see NVIDIA's Xid documentation",
            None,
            None,
        )


@functools.cache
def builtin_catalogue() -> XidCatalogue:
    return load_catalogue(builtin_rules_dir() / CATALOGUE_FILE)


def load_catalogue(path: Path) -> XidCatalogue:
    try:
        data = load_yaml(path.read_text())
    except (OSError, ValueError) as e:
        raise XidCatalogueError(f"{path}: not readable ({' '.join(str(e).split())[:200]})") from None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("xids"), dict)
        or not isinstance(data.get("buckets"), dict)
    ):
        raise XidCatalogueError(f"{path}: expected source, buckets, xids, unused and named_by")
    buckets: dict[str, str] = data["buckets"]
    named_by = {int(code): str(rule) for code, rule in (data.get("named_by") or {}).items()}
    entries: dict[int, XidEntry] = {}
    for code, spec in data["xids"].items():
        if not isinstance(code, int) or not isinstance(spec, dict) or not isinstance(spec.get("mnemonic"), str):
            raise XidCatalogueError(f"{path}: Xid {code!r} needs a number and a mnemonic")
        immediate = spec.get("immediate")
        if immediate is not None and immediate not in buckets:
            raise XidCatalogueError(f"{path}: Xid {code}: bucket {immediate!r} is not one of `buckets`")
        entries[code] = XidEntry(
            code,
            spec["mnemonic"],
            spec.get("description") or spec["mnemonic"],
            immediate,
            buckets[immediate] if immediate else "the catalogue gives no action",
            spec.get("investigate"),
            named_by.get(code),
        )
    for code in data.get("unused") or []:
        if code in entries:
            raise XidCatalogueError(f"{path}: Xid {code} is both listed and unused")
        entries[code] = XidEntry(
            code, "Unused", "unused (no GPU it applies to)", "CONTACT_SUPPORT", buckets["CONTACT_SUPPORT"], None, None
        )
    return XidCatalogue(str(data.get("source") or path), entries)
