"""Where `llmdiag collect` puts its bundle: never through a symbolic link, never readable by others.

The bundle is written whole under a temporary name in the target's folder (a folder of mode 0700
that only this user can enter), then renamed into place. A rename replaces the name itself: a link
planted at the output path is never followed, and a file that existed there (whatever its mode) is
replaced by a new one of mode 0600. Folders are created 0700.

A folder that holds anything is refused: a bundle must not mix with other files. An archive that
exists is refused too: a second run (the cluster unreachable by then, say) must not replace the
bundle of the first. `--force` lets a new bundle replace an earlier one (an archive, or a folder with
manifest.json at its top), never any other folder, so a mistyped path cannot cost a folder of the
user's files; a symbolic link is refused whatever the flags.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from diag.bundle.files import Bundle
from diag.core.errors import UserError

TAR_SUFFIXES = (".tar.gz", ".tgz")
MANIFEST = "manifest.json"


def check_output_path(out: str | os.PathLike, force: bool = False) -> Path:
    """Refuse, in one line, an output path the bundle must not be written to; checked before the
    collection starts and again when writing."""
    dest = Path(out).absolute()
    if dest.is_symlink():
        raise UserError(f"refusing to write the bundle to {out}: it is a symbolic link (choose another name)")
    as_tar = dest.name.endswith(TAR_SUFFIXES)
    if dest.is_dir() and as_tar:
        raise UserError(f"refusing to write the bundle to {out}: it is a folder")
    if as_tar and dest.exists() and not force:
        raise UserError(
            f"refusing to write the bundle to {out}: it exists (choose a new name, or --force to replace it)"
        )
    if dest.exists() and not as_tar and not (dest.is_dir() and not any(dest.iterdir())):
        if not dest.is_dir():
            raise UserError(f"refusing to write the bundle to {out}: it exists and is not a folder (choose a new name)")
        if not force:
            raise UserError(
                f"refusing to write the bundle to {out}: the folder is not empty "
                "(choose a new name, or --force to replace an earlier bundle)"
            )
        if not _is_bundle(dest):
            raise UserError(
                f"refusing to write the bundle to {out}: the folder holds files but "
                f"no earlier bundle (no {MANIFEST}); --force replaces only a bundle"
            )
    return dest


def _is_bundle(folder: Path) -> bool:
    manifest = folder / MANIFEST
    return manifest.is_file() and not manifest.is_symlink()


def save_bundle(bundle: Bundle, out: str | os.PathLike, force: bool = False) -> Path:
    """Write `bundle` to `out` (a folder, or FILE.tar.gz) safely; return the path written."""
    dest = check_output_path(out, force)
    try:
        dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".partial", dir=dest.parent))
    except OSError as e:
        raise UserError(f"cannot write the bundle to {out}: {e.strerror or e}") from e
    try:
        written = bundle.save(staging / dest.name)  # files 0600 (Bundle.save)
        _private(written)
        if dest.is_dir() and not dest.is_symlink() and any(dest.iterdir()):  # an earlier bundle, --force
            os.replace(dest, staging / f"{dest.name}.earlier")  # removed with the staging folder
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
