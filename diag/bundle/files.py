"""A bundle: raw files in the layout of docs/bundle-format.md, in a folder, a .tar.gz, or in memory."""

from __future__ import annotations

import bz2
import gzip
import io
import itertools
import lzma
import os
import stat
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TypeVar

from diag.bundle.budget import OverBudget, check_document
from diag.bundle.cluster_dump import Derived, convert, is_cluster_dump
from diag.core.errors import ParseError, UserError
from diag.parsers.json_fields import load_json, type_name

T = TypeVar("T")

# The layout's top-level names: a bundle packed under one folder of another name is read below it.
_LAYOUT_TOPS = frozenset({"manifest.json", "k8s", "ray", "gpu", "vllm", "prometheus"})
BUNDLE_SOURCE = "bundle"  # the source line of a limit that stopped the reading of the whole bundle


class BundleError(UserError):
    """The bundle as a whole cannot be read (missing path, not a folder or a .tar.gz)."""


@dataclass(frozen=True)
class BundleLimits:
    """How much of a bundle is read; the defaults are the settings' (rules/settings.yaml, `bundle_max_*`).

    A bundle may come from a stranger: a file over `file_bytes` is not read, and reading stops once the
    bundle's files (archive members, folder entries) number `files` or their bytes, uncompressed,
    reach `total_bytes`. Each limit hit is a source line, never a silent drop."""

    # The events of a 1,000-node cluster (100,000 events) take about 80 MB.
    file_bytes: int = 256 * 1024 * 1024
    total_bytes: int = 1024 * 1024 * 1024
    files: int = 20_000

    @classmethod
    def from_settings(cls, settings: dict) -> BundleLimits:
        return cls(
            file_bytes=_positive(settings, "bundle_max_file_bytes", cls.file_bytes),
            total_bytes=_positive(settings, "bundle_max_total_bytes", cls.total_bytes),
            files=_positive(settings, "bundle_max_files", cls.files),
        )


def _positive(settings: dict, name: str, default: int) -> int:
    value = settings.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UserError(f"setting {name}: {value!r} is not a positive whole number")
    return value


@dataclass
class Bundle:
    """Relative POSIX path -> raw bytes. The one thing collectors write and the loader reads."""

    files: dict[str, bytes] = field(default_factory=dict)
    origin: str = "<memory>"
    refused: dict[str, str] = field(default_factory=dict)  # files not read: path -> why
    # Read from another layout (`kubectl cluster-info dump`, diag/bundle/cluster_dump.py): files and logs of it
    # that are not read (path -> why), and the files made from it (path -> the files they came from)
    skipped: dict[str, str] = field(default_factory=dict)
    derived: dict[str, Derived] = field(default_factory=dict)
    # A file's objects, as its reader's parser makes them, from the process that wrote it (serve's pods:
    # made once while they are unchanged): the loader takes them instead of parsing the file. Joining
    # them changes them, so they are for one analysis, in a process of its own (diag/serve/child.py).
    parsed: dict[str, list] = field(default_factory=dict)

    # ------------------------------------------------------------------ reading

    @classmethod
    def open(cls, path: str | os.PathLike, limits: BundleLimits | None = None) -> Bundle:
        p = Path(path)
        limits = limits or BundleLimits()
        if not p.exists():
            raise BundleError(f"{p}: no such file or folder")
        if p.is_dir():
            reader = _Reader(limits)
            _read_dir(p, reader)
            return _as_bundle(reader.bundle(str(p)))
        if p.name.endswith((".tar.gz", ".tgz", ".tar")):
            reader = _Reader(limits)
            _read_tar(p, reader)
            return _as_bundle(reader.bundle(str(p)))
        raise BundleError(f"{p}: not a bundle (expected a folder or a .tar.gz)")

    def text(self, rel: str) -> str:
        return self.files[rel].decode("utf-8", errors="replace")

    def names(self, folder: str) -> list[str]:
        """Files directly or indirectly under `folder/`, sorted."""
        prefix = folder.rstrip("/") + "/"
        return sorted(n for n in self.files if n.startswith(prefix))

    def manifest(self) -> dict:
        """manifest.json as an object; {} when absent or unreadable (the loader reports it failed)."""
        try:
            return self.manifest_or_error()
        except ParseError:
            return {}

    def manifest_or_error(self) -> dict:
        if "manifest.json" not in self.files:
            return {}
        text = self.text("manifest.json")
        try:
            check_document(text, "json")
        except OverBudget as e:
            raise ParseError(str(e)) from None
        data = load_json(text)
        if not isinstance(data, dict):
            raise ParseError(f"expected a JSON object, found {type_name(data)}")
        return data

    # ------------------------------------------------------------------ writing

    def add(self, rel: str, data: bytes | str, parsed: list | None = None) -> None:
        rel = PurePosixPath(rel).as_posix()
        if rel.startswith("/") or ".." in PurePosixPath(rel).parts:
            raise ValueError(f"bundle path must be relative and inside the bundle: {rel}")
        self.files[rel] = data.encode() if isinstance(data, str) else data
        if parsed is None:
            self.parsed.pop(rel, None)
        else:
            self.parsed[rel] = parsed

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


def _as_bundle(read: Bundle) -> Bundle:
    """A `kubectl cluster-info dump` folder in the bundle layout; a bundle as it is. The files were
    read under the same limits and rules either way."""
    if not is_cluster_dump([*read.files, *read.refused]):
        return read
    dump = convert(read.files, read.refused, _LAYOUT_TOPS - {"manifest.json"})
    return Bundle(dump.files, read.origin, dump.refused, dump.skipped, dump.derived)


class _Limit(Exception):
    """A bundle-wide limit was hit: reading stops."""


class _Reader:
    """Collects a bundle's files under the limits, and a source line for every file not read."""

    def __init__(self, limits: BundleLimits) -> None:
        self.limits = limits
        self.files: dict[str, bytes] = {}
        self.refused: dict[str, str] = {}
        self.seen = 0  # files and other entries met
        self.consumed = 0  # bytes read or skipped, uncompressed
        self.stopped: str | None = None  # why reading stopped before the end

    def count(self, rel: str) -> None:
        self.seen += 1
        if self.seen > self.limits.files:
            raise _Limit(
                f"more than {self.limits.files:,} files (setting bundle_max_files): reading stopped at {rel}, "
                "the rest of the bundle was not read"
            )

    def room(self, rel: str, size: int) -> bool:
        """Whether a file of `size` bytes may be read; False (and a source line) when it is too large."""
        if size > self.limits.file_bytes:
            self.refuse(
                rel,
                f"{size:,} bytes, over the limit of {self.limits.file_bytes:,} "
                "for one file (setting bundle_max_file_bytes): not read",
            )
            self.spend(rel, size)
            return False
        self.spend(rel, size)
        return True

    def spend(self, rel: str, size: int) -> None:
        self.consumed += size
        if self.consumed > self.limits.total_bytes:
            raise _Limit(
                f"more than {self.limits.total_bytes:,} bytes uncompressed (setting bundle_max_total_bytes): "
                f"reading stopped at {rel}, the rest of the bundle was not read"
            )

    def refuse(self, rel: str, why: str) -> None:
        self.refused[rel] = why

    def bundle(self, origin: str) -> Bundle:
        root = _common_root([*self.files, *(n for n in self.refused if _member_path(n) == n)])
        refused = _strip(self.refused, root)
        if self.stopped is not None:
            refused[BUNDLE_SOURCE] = self.stopped
        return Bundle(_strip(self.files, root), origin=origin, refused=refused)


def _read_dir(root: Path, reader: _Reader) -> None:
    """Regular files only, never followed out of the folder: symbolic links, devices, FIFOs and
    sockets are refused (a link could name /proc/self/environ, a FIFO would block)."""
    try:
        _walk(root, "", reader)
    except _Limit as why:
        reader.stopped = str(why)


def _walk(folder: Path, prefix: str, reader: _Reader) -> None:
    try:
        # a folder of a million entries is listed no further than the limit needs
        entries = sorted(
            itertools.islice(os.scandir(folder), reader.limits.files - reader.seen + 1), key=lambda e: e.name
        )
    except OSError as e:
        reader.refuse(prefix.rstrip("/") or ".", f"folder not readable ({e.strerror})")
        return
    for entry in entries:
        rel = prefix + entry.name
        reader.count(rel)
        if entry.is_symlink():
            reader.refuse(rel, "a symbolic link: not followed, not read")
        elif entry.is_dir(follow_symlinks=False):
            _walk(Path(entry.path), rel + "/", reader)
        else:
            _read_file(Path(entry.path), rel, reader)


def _read_file(path: Path, rel: str, reader: _Reader) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        reader.refuse(rel, f"not readable ({e.strerror}): not read")
        return
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            reader.refuse(rel, "not a regular file (a device, FIFO or socket): not read")
        elif info.st_nlink > 1:
            reader.refuse(rel, f"a hard link ({info.st_nlink} names for one file): not read")
        elif reader.room(rel, info.st_size):
            # read(n) makes an n-byte buffer first: the file's own size, then what it grew by, if it did
            data = f.read(info.st_size + 1)
            if len(data) > info.st_size:
                data += f.read(reader.limits.file_bytes + 1 - len(data))
            if len(data) > reader.limits.file_bytes:  # grew while read
                reader.refuse(
                    rel,
                    f"over the limit of {reader.limits.file_bytes:,} bytes "
                    "for one file (setting bundle_max_file_bytes): not read",
                )
            else:
                reader.files[rel] = data


def _read_tar(path: Path, reader: _Reader) -> None:
    """Members one by one as a stream: nothing is decompressed past the limits, and nothing is
    extracted to disk. Links, devices, absolute paths and `..` are refused, each with a line. Every
    compressed member or stream is read (`cat a.gz b.gz`, pigz, bgzip), as gzip and tar read them, and
    an archive that ends before its end-of-archive blocks, or goes on after them, says so."""
    try:
        with open(path, "rb") as raw:
            stream = _decompressed(raw, path)
            with tarfile.open(fileobj=stream, mode="r|", tarinfo=_Header) as tar:
                for member in tar:
                    _read_member(tar, member, reader)
                _check_end(tar, reader)
    except _Limit as why:
        reader.stopped = str(why)
    except (tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError) as e:
        if not reader.files and not reader.refused:
            raise BundleError(f"{path}: not a readable .tar.gz ({e})") from e
        reader.stopped = f"the archive is damaged after its first {reader.seen:,} entries ({e}): the rest was not read"


# What tar reads (GNU tar's own detection) that we do not: named, never read as something else.
_UNREAD_COMPRESSIONS = {b"\x28\xb5\x2f\xfd": "zstd", b"\x1f\x9d": "compress (.Z)", b"LZIP": "lzip", b"\x89LZO": "lzop"}


def _decompressed(raw: io.BufferedReader, path: Path) -> io.IOBase:
    """The archive's tar stream, every gzip member, bzip2 stream or xz stream of it in turn."""
    head = raw.peek(6)[:6]
    if head.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if head.startswith(b"BZh"):
        return bz2.BZ2File(raw)
    if head.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(raw)
    for magic, name in _UNREAD_COMPRESSIONS.items():
        if head.startswith(magic):
            raise BundleError(
                f"{path}: a {name}-compressed archive, which llmdiag does not read; "
                "decompress it (or pack it again with `tar czf`) and give the .tar"
            )
    return raw


class _Header(tarfile.TarInfo):
    """A tar header that notes on its archive why the reading ended: tarfile ends the iteration alike
    on the end-of-archive blocks, on a stream that stops, and on a damaged header."""

    @classmethod
    def fromtarfile(cls, tarfile_: tarfile.TarFile) -> _Header:
        try:
            return super().fromtarfile(tarfile_)
        except tarfile.EOFHeaderError:  # type: ignore[attr-defined]  # tarfile has it; typeshed's stubs lack it
            tarfile_.llmdiag_end = None  # type: ignore[attr-defined]
            raise
        except tarfile.EmptyHeaderError:  # type: ignore[attr-defined]  # as EOFHeaderError
            tarfile_.llmdiag_end = "it ends without the end-of-archive blocks (cut short?)"  # type: ignore[attr-defined]
            raise
        except tarfile.HeaderError as e:
            tarfile_.llmdiag_end = f"a damaged header ({e})"  # type: ignore[attr-defined]
            raise


def _check_end(tar: tarfile.TarFile, reader: _Reader) -> None:
    """An archive read to its end-of-archive blocks holds nothing after them but zeros; what it holds
    after them (a second archive appended) is not read, and said."""
    end = getattr(tar, "llmdiag_end", "")
    if end:
        reader.stopped = f"the archive is damaged after its first {reader.seen:,} entries: {end}; the rest was not read"
        return
    while chunk := tar.fileobj.read(_CHUNK):
        reader.spend("the end of the archive", len(chunk))
        if chunk.count(0) != len(chunk):
            reader.stopped = (
                f"the archive goes on after its end-of-archive blocks (archives appended to one another?): "
                f"what follows its first {reader.seen:,} entries was not read"
            )
            return


_CHUNK = 64 * 1024


def _read_member(tar: tarfile.TarFile, member: tarfile.TarInfo, reader: _Reader) -> None:
    rel = _member_path(member.name)
    reader.count(rel or member.name)
    reader.spend(rel or member.name, tarfile.BLOCKSIZE)  # its header
    if rel is None:
        reader.refuse(_shown(member.name), "an absolute path or one with '..': not read")
    elif member.isdir() or not rel:
        return
    elif member.issym() or member.islnk():
        kind = "a symbolic link" if member.issym() else "a hard link"
        reader.refuse(rel, f"{kind} (to {_shown(member.linkname)}): not followed, not read")
    elif not member.isfile():
        reader.refuse(rel, "not a regular file (a device, FIFO or other special member): not read")
    elif reader.room(rel, member.size) and (data := tar.extractfile(member)) is not None:
        reader.files[rel] = data.read(member.size)


def _member_path(name: str) -> str | None:
    """A member's path inside the bundle, `./` and repeated slashes dropped; None when it would
    leave the bundle (absolute, `..`)."""
    if name.startswith("/"):
        return None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        return None
    return "/".join(parts)


def _shown(name: str) -> str:
    return name if len(name) <= 200 else name[:200] + "..."


def _common_root(names: list[str]) -> str | None:
    """`tar czf case.tar.gz case/` puts everything under `case/`; the layout starts below it."""
    tops = {n.split("/", 1)[0] for n in names}
    if len(tops) == 1 and not tops & _LAYOUT_TOPS and all("/" in n for n in names):
        return tops.pop()
    return None


def _strip(entries: dict[str, T], root: str | None) -> dict[str, T]:
    return {n.split("/", 1)[1]: v for n, v in entries.items()} if root is not None else entries
