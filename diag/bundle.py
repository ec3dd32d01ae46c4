"""A bundle: raw files in the layout of docs/bundle-format.md, in a folder, a .tar.gz, or in memory."""

from __future__ import annotations

import io
import json
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TypeVar

from diag.errors import UserError

T = TypeVar("T")

# A single raw file larger than this is not read (its source is failed, saying so). The events of a
# 1,000-node cluster (100,000 events) take about 80 MB.
MAX_FILE_BYTES = 256 * 1024 * 1024


class BundleError(UserError):
    """The bundle as a whole cannot be read (missing path, not a folder or a .tar.gz)."""


@dataclass
class Bundle:
    """Relative POSIX path -> raw bytes. The one thing collectors write and the loader reads."""

    files: dict[str, bytes] = field(default_factory=dict)
    origin: str = "<memory>"
    refused: dict[str, str] = field(default_factory=dict)  # files not read: path -> why

    # ------------------------------------------------------------------ reading

    @classmethod
    def open(cls, path: str | os.PathLike) -> "Bundle":
        p = Path(path)
        if not p.exists():
            raise BundleError(f"{p}: no such file or folder")
        if p.is_dir():
            return cls._from_dir(p)
        if p.name.endswith((".tar.gz", ".tgz", ".tar")):
            return cls._from_tar(p)
        raise BundleError(f"{p}: not a bundle (expected a folder or a .tar.gz)")

    @classmethod
    def _from_dir(cls, root: Path) -> "Bundle":
        files: dict[str, bytes] = {}
        refused: dict[str, str] = {}
        for f in sorted(root.rglob("*")):
            if not f.is_file():
                continue
            rel, size = f.relative_to(root).as_posix(), f.stat().st_size
            if size > MAX_FILE_BYTES:
                refused[rel] = _too_large(size)
            else:
                files[rel] = f.read_bytes()
        return cls(files, origin=str(root), refused=refused)

    @classmethod
    def _from_tar(cls, path: Path) -> "Bundle":
        files: dict[str, bytes] = {}
        refused: dict[str, str] = {}
        try:
            with tarfile.open(path) as tar:
                for m in (m for m in tar.getmembers() if m.isfile()):
                    if m.size > MAX_FILE_BYTES:
                        refused[m.name] = _too_large(m.size)
                    elif (data := tar.extractfile(m)) is not None:
                        files[m.name] = data.read()
        except (tarfile.TarError, EOFError, OSError) as e:
            raise BundleError(f"{path}: not a readable .tar.gz ({e})") from e
        root = _common_root([*files, *refused])
        return cls(_strip(files, root), origin=str(path), refused=_strip(refused, root))

    def text(self, rel: str) -> str:
        return self.files[rel].decode("utf-8", errors="replace")

    def names(self, folder: str) -> list[str]:
        """Files directly or indirectly under `folder/`, sorted."""
        prefix = folder.rstrip("/") + "/"
        return sorted(n for n in self.files if n.startswith(prefix))

    def manifest(self) -> dict:
        raw = self.files.get("manifest.json")
        if raw is None:
            return {}
        try:
            data = json.loads(raw)
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}

    # ------------------------------------------------------------------ writing

    def add(self, rel: str, data: bytes | str) -> None:
        rel = PurePosixPath(rel).as_posix()
        if rel.startswith("/") or ".." in PurePosixPath(rel).parts:
            raise ValueError(f"bundle path must be relative and inside the bundle: {rel}")
        self.files[rel] = data.encode() if isinstance(data, str) else data

    def save(self, dest: str | os.PathLike) -> Path:
        """Write as a folder, or as a .tar.gz when the name says so. Files are created 0600."""
        dest = Path(dest)
        if dest.name.endswith((".tar.gz", ".tgz")):
            return self._save_tar(dest)
        dest.mkdir(parents=True, exist_ok=True)
        os.chmod(dest, 0o700)
        for rel, data in self.files.items():
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        return dest

    def _save_tar(self, dest: Path) -> Path:
        dest.parent.mkdir(parents=True, exist_ok=True)
        root = dest.name.removesuffix(".tar.gz").removesuffix(".tgz")
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            for rel, data in sorted(self.files.items()):
                info = tarfile.TarInfo(f"{root}/{rel}")
                info.size = len(data)
                info.mode = 0o600
                tar.addfile(info, io.BytesIO(data))
        return dest


def _common_root(names: list[str]) -> str | None:
    """`tar czf case.tar.gz case/` puts everything under `case/`; the layout starts below it."""
    tops = {n.split("/", 1)[0] for n in names}
    known = {"manifest.json", "k8s", "ray", "gpu", "vllm", "prometheus"}
    if len(tops) == 1 and not tops & known and all("/" in n for n in names):
        return tops.pop()
    return None


def _strip(entries: dict[str, T], root: str | None) -> dict[str, T]:
    return {n.split("/", 1)[1]: v for n, v in entries.items()} if root is not None else entries


def _too_large(size: int) -> str:
    return f"{size:,} bytes, over the limit of {MAX_FILE_BYTES:,} for one file: not read"
