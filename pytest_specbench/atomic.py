"""Atomic file writes (a reader sees the old file or the new one, never half of one), and a probe
that a file could be written somewhere, before hours of work depend on it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

#: The temporary and probe files' name prefix: short, so that a file name near NAME_MAX (255 bytes) still leaves
#: room for them (they never borrow the target's name).
_TEMPORARY_PREFIX = ".specbench-"


def target_path(path: str | os.PathLike[str]) -> Path:
    """Where a write to ``path`` lands: a symbolic link is written through, so its target is updated and the
    link stays a link (renaming a new file over the link would replace the link and leave the target stale)."""
    path = Path(path)
    try:
        linked = path.is_symlink()
    except OSError:  # a name too long, a folder not searchable: the write itself says so
        return path
    return Path(os.path.realpath(path)) if linked else path


def write_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` through a temporary file in the same folder, then rename it into place.

    A symbolic link is written through (:func:`target_path`). Text taken from file names or the command line
    holds undecodable bytes as surrogate escapes (Python's convention for both): they are written back as the
    bytes they came from, so a report quoting a non-UTF-8 path is written like a CSV at that path.
    """
    path = target_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_TEMPORARY_PREFIX, suffix=".tmp")
    try:
        # mkstemp makes the file private (0600); give it the mode a plain open() would.
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape", newline="") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def unwritable_reason(path: str | os.PathLike[str], folder_name: str = "its folder") -> str | None:
    """Why a file could not be written at ``path``, or None; creates its folder if missing, leaves no file.

    The probe is a file of its own in that folder (created, then removed), since every write here
    goes through a new file and a rename: the folder must take new files, whatever ``path`` is now.
    ``folder_name`` is how the reason calls that folder.
    """
    folder = target_path(path).parent
    blocker = next((parent for parent in (folder, *folder.parents) if parent.exists() and not parent.is_dir()), None)
    if blocker is not None:
        return f"{folder_name} cannot be created, since {blocker} is a file"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return f"{folder_name} {folder} cannot be created ({error.strerror or error})"
    probe = folder / f"{_TEMPORARY_PREFIX}{os.getpid()}.probe"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as error:
        return f"no file can be written in {folder_name} {folder} ({error.strerror or error})"
    probe.unlink()
    target = target_path(path)
    # An existing file that refuses writes (read-only, or chattr +i or +a): found now, not after the run.
    if target.is_file():
        try:
            os.close(os.open(target, os.O_WRONLY))  # opened, not truncated, not written
        except OSError as error:
            return f"{target} exists and cannot be written ({error.strerror or error})"
    return None
