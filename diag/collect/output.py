"""Where `llmdiag collect` puts its bundle: never through a symbolic link, never readable by others.

The bundle is written whole under a temporary name in the target's folder (a folder of mode 0700
that only this user can enter), then renamed into place. A rename replaces the name itself: a link
planted at the output path is never followed, and a file that existed there (whatever its mode) is
replaced by a new one of mode 0600. Folders are created 0700.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from diag.bundle import Bundle
from diag.errors import UserError

TAR_SUFFIXES = (".tar.gz", ".tgz")


def check_output_path(out: str | os.PathLike) -> Path:
    """Refuse, in one line, an output path the bundle must not be written to; checked before the
    collection starts and again when writing."""
    dest = Path(out).absolute()
    if dest.is_symlink():
        raise UserError(f"refusing to write the bundle to {out}: it is a symbolic link (choose another name)")
    as_tar = dest.name.endswith(TAR_SUFFIXES)
    if dest.is_dir() and as_tar:
        raise UserError(f"refusing to write the bundle to {out}: it is a folder")
    if dest.exists() and not as_tar and not (dest.is_dir() and not any(dest.iterdir())):
        raise UserError(f"refusing to write the bundle to {out}: it exists and is not an empty folder (choose a new name)")
    return dest


def save_bundle(bundle: Bundle, out: str | os.PathLike) -> Path:
    """Write `bundle` to `out` (a folder, or FILE.tar.gz) safely; return the path written."""
    dest = check_output_path(out)
    try:
        dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".partial", dir=dest.parent))
    except OSError as e:
        raise UserError(f"cannot write the bundle to {out}: {e.strerror or e}") from e
    try:
        written = bundle.save(staging / dest.name)  # files 0600 (Bundle.save)
        _private(written)
        os.replace(written, dest)
    except OSError as e:
        raise UserError(f"cannot write the bundle to {out}: {e.strerror or e}") from e
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dest


def _private(path: Path) -> None:
    """Folders 0700 and files 0600 under `path`, whatever the umask gave the subfolders."""
    os.chmod(path, 0o700 if path.is_dir() else 0o600)
    for root, dirs, files in os.walk(path):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o700)
        for name in files:
            os.chmod(os.path.join(root, name), 0o600)
