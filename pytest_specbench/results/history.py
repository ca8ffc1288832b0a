"""The run history: every run that measured a case keeps its files in a numbered folder of its own.

Like pytest-benchmark's storage: ``spec_results.*`` are the latest run's copies, and each run is also
saved as ``<history>/NNNN-<UTC time>-<short git commit or nogit>/`` (default history ``.specbench/runs``,
``--specbench-history``) holding its CSV, JSON, results log, report and figures under fixed names. The
numbers only grow; ``python -m pytest_specbench compare`` names runs by number (``0003``) or takes the
two latest (``--last``).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from datetime import UTC, datetime
from pathlib import Path

from ..atomic import write_atomic

try:
    import fcntl
except ImportError:  # not POSIX: numbering is then not guarded against two runs ending at once
    fcntl = None  # type: ignore[assignment]

#: the files of a run folder
CSV, JSON, LOG, REPORT, FIGURES = "spec_results.csv", "spec_results.json", "spec_results.jsonl", "report.md", "figures"
#: the history's record of the last number given, so that deleting the latest run folder frees no number
COUNTER = ".last_number"
_ENTRY = re.compile(r"^(\d{4,})-")


class HistoryError(ValueError):
    """A run that the history does not hold, or a history that cannot be read."""


def short_commit(folder: Path) -> str:
    """The short git commit of the checkout ``folder`` is in, or ``nogit``."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=folder, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return "nogit"
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and re.fullmatch(r"[0-9a-f]{4,40}", commit) else "nogit"


def unusable_reason(history: Path) -> str | None:
    """Why the history could not be created or written at ``history``, or None; creates nothing (the folder
    appears with the first run that measured a case)."""
    history = Path(history)
    existing = next(folder for folder in (history, *history.parents) if os.path.lexists(folder))
    if not existing.is_dir():
        return f"{existing} is a file" if existing != history else "it is a file"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable by this user"
    return None


def entries(history: Path) -> list[Path]:
    """The run folders of ``history``, oldest (lowest number) first."""
    try:
        children = list(Path(history).iterdir())
    except FileNotFoundError:
        return []
    except OSError as error:
        raise HistoryError(f"the history {history} cannot be read ({error.strerror or error})") from None
    runs = [(int(match[1]), child) for child in children if child.is_dir() and (match := _ENTRY.match(child.name))]
    return [child for _, child in sorted(runs)]


def number_of(entry: Path) -> int:
    match = _ENTRY.match(entry.name)
    if match is None:
        raise HistoryError(f"{entry} is not a run folder of a history (NNNN-<time>-<commit>)")
    return int(match[1])


def new_entry(history: Path, commit: str, when: datetime | None = None) -> Path:
    """Create and return the next run folder, ``NNNN-<UTC time>-<commit>``; two runs ending at once get two
    numbers (the numbering holds a lock on ``<history>/.lock``). The number follows both the last one given
    (:data:`COUNTER`) and the highest folder: never given twice, even after its folder was deleted."""
    history = Path(history)
    history.mkdir(parents=True, exist_ok=True)
    stamp = (when or datetime.now(UTC)).astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    fd = os.open(history / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        number = max([_last_number(history), *(number_of(entry) for entry in entries(history))]) + 1
        entry = history / f"{number:04d}-{stamp}-{commit}"
        entry.mkdir()
        write_atomic(history / COUNTER, f"{number}\n")
        return entry
    finally:
        os.close(fd)


def _last_number(history: Path) -> int:
    """The last number :func:`new_entry` gave in ``history``; 0 when no counter was kept (an older version's
    history, or the file deleted): the folders' numbers then decide alone."""
    try:
        text = (history / COUNTER).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return 0
    return int(text) if text.isdigit() else 0


def compare_last_command(history: Path) -> str:
    """The command that compares the two latest runs of ``history``; it names the folder (``--history``)
    unless it is the default one, which ``compare`` reads without being told."""
    from ..settings.options import default_of

    named = "" if Path(history) == Path(default_of("history_dir")) else f" --history {shlex.quote(str(history))}"
    return f"python -m pytest_specbench compare{named} --last"


def find_run(history: Path, name: str) -> Path:
    """The JSON of the run ``name`` names: a number (``3`` or ``0003``) or a run folder's name."""
    runs = entries(history)
    if re.fullmatch(r"\d+", name):
        matches = [entry for entry in runs if number_of(entry) == int(name)]
    else:
        matches = [entry for entry in runs if entry.name == name]
    if not matches:
        held = ", ".join(entry.name[:4] for entry in runs[-5:]) or "none"
        raise HistoryError(f"no run {name} in the history {history} (its latest runs: {held})")
    return _json_of(matches[0])


def run_jsons(history: Path) -> list[Path]:
    """The JSON of every run of ``history`` that has one, oldest first."""
    return [entry / JSON for entry in entries(history) if (entry / JSON).is_file()]


def last_runs(history: Path, count: int = 2) -> list[Path]:
    """The JSON of the ``count`` latest runs, oldest first."""
    runs = run_jsons(history)
    if len(runs) < count:
        raise HistoryError(
            f"the history {history} holds {len(runs)} run(s) with a JSON, fewer than {count}; "
            "each pytest run that measures a case adds one (--specbench-history)"
        )
    return runs[-count:]


def _json_of(entry: Path) -> Path:
    if not (entry / JSON).is_file():
        raise HistoryError(f"the run folder {entry} has no {JSON}")
    return entry / JSON
