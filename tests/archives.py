"""Archives of a bundle folder as other tools make them: one tar stream cut into several compressed
members or streams, each compressed on its own and written one after another (what `cat a.gz b.gz`,
pigz, bgzip, `pbzip2` and `xz -T` produce). `tar tzf` reads them whole."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import tarfile
from pathlib import Path

CODECS = {"gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}


def tar_bytes(folder: Path, top: str | None = None) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for f in sorted(folder.rglob("*")):
            if f.is_file():
                rel = f.relative_to(folder).as_posix()
                tar.add(f, arcname=f"{top}/{rel}" if top else rel)
    return out.getvalue()


def multi_member(folder: Path, dest: Path, codec: str = "gz", pieces: int = 3, top: str | None = None) -> Path:
    """`folder` as one tar stream in `pieces` compressed members of about equal size, cut anywhere
    (inside headers and file bodies alike)."""
    data = tar_bytes(folder, top)
    step = -(-len(data) // pieces)
    dest.write_bytes(b"".join(CODECS[codec](data[i : i + step]) for i in range(0, len(data), step)))
    return dest
