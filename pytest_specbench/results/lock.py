"""Exclusive locks on a run's files: two runs never write one log, CSV or JSON at once.

Each file a run writes gets a lock file beside it, ``.<name>.lock`` (for ``spec_results.jsonl``,
``.spec_results.jsonl.lock``), locked with ``fcntl.flock`` (non-blocking) for the run's lifetime and
holding who holds it: ``{"pid": ..., "started": ..., "host": ..., "command": ...}``. The kernel lets the
lock go when the process ends however it ends (a SIGKILL included), so a stale lock file never blocks a
later run; a released lock's file is removed. POSIX only: where ``fcntl`` is missing, nothing is locked.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # not POSIX
    fcntl = None  # type: ignore[assignment]


class LockedByAnotherRun(RuntimeError):
    """``path`` is locked by another run; ``holder`` is what that run wrote into the lock file (may be empty)."""

    def __init__(self, path: Path, lock_file: Path, holder: dict[str, Any]) -> None:
        self.path, self.lock_file, self.holder = path, lock_file, holder
        super().__init__(f"{path} is in use by {describe_holder(holder)} (lock file {lock_file})")


def describe_holder(holder: dict[str, Any]) -> str:
    """``another run (pid 1234, started 2026-12-01T09:00:00+00:00 on host, `pytest ...`)``."""
    if not holder.get("pid"):
        return "another run (which one is not known yet: it is starting)"
    where = f" on {holder['host']}" if holder.get("host") else ""
    command = f", `{holder['command']}`" if holder.get("command") else ""
    return f"another run (pid {holder['pid']}, started {holder.get('started', '?')}{where}{command})"


def lock_file_of(path: Path) -> Path:
    """The lock file of ``path``: beside the file it stands for (a symbolic link's target), wherever that is
    reached from."""
    real = Path(os.path.realpath(path))
    return real.parent / f".{real.name}.lock"


def _read_holder(lock_file: Path) -> dict[str, Any]:
    try:
        holder = json.loads(lock_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


class RunLock:
    """The locks of one run on its files, taken together by :meth:`acquire` and let go by :meth:`release`."""

    def __init__(self, command: str | None = None) -> None:
        self.holder = {
            "pid": os.getpid(),
            "started": datetime.now(UTC).isoformat(timespec="seconds"),
            "host": socket.gethostname(),
            "command": command,
        }
        self._held: dict[Path, int] = {}  # lock file -> its descriptor

    @property
    def held(self) -> list[Path]:
        return list(self._held)

    def acquire(self, paths: Iterable[Path]) -> None:
        """Lock the file of each path; LockedByAnotherRun (after letting go of what it took) when one is held."""
        try:
            for path in paths:
                self._acquire_one(Path(path))
        except BaseException:
            self.release()
            raise

    def _acquire_one(self, path: Path) -> None:
        if fcntl is None:
            return
        lock_file = lock_file_of(path)
        if lock_file in self._held:
            return
        while True:
            fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise LockedByAnotherRun(path, lock_file, _read_holder(lock_file)) from None
            # The holder before us may have removed the file between our open and our lock: then this
            # descriptor locks a file nobody else will find. Lock the one at the path instead.
            try:
                same = os.stat(lock_file).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, (json.dumps(self.holder) + "\n").encode("utf-8"))
        self._held[lock_file] = fd

    def release(self) -> None:
        """Let every lock go (the lock files are removed first, while still held). Safe to call twice."""
        while self._held:
            lock_file, fd = self._held.popitem()
            try:
                lock_file.unlink(missing_ok=True)
            except OSError:
                pass
            os.close(fd)
