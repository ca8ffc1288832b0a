"""The rounds file beside the results log: each finished round of a block, one JSON line, on disk as the round ends.

A block's cases finish together, so a run stopped mid-block has no row for them; its finished rounds are here, and
``--specbench-resume`` continues the block from them (:mod:`..measure.kept_rounds`). Whichever process times a
block appends to the file (xdist workers too), under a lock, a whole line per write. A new run that does not resume
the log removes the file; a run that finished every case removes it too, as nothing is left to continue.

Each line names its block and its series (one timing of the block, continued across resumes) and its round; a
later line of a series replaces an earlier one of the same round. What a round holds is the measure layer's.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def rounds_path(log_path: Path) -> Path:
    """The rounds file of the results log at ``log_path``."""
    return log_path.with_name(f"{log_path.name}.rounds")


def append_round(path: Path, record: dict[str, Any]) -> None:
    """Write one round's line and force it to disk; a lock keeps two processes' lines whole."""
    # A newline first too: a line a kill cut short ends there, and this one stands whole on its own.
    data = ("\n" + json.dumps(record, default=str) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        while data:
            data = data[os.write(fd, data) :]
        os.fsync(fd)
    finally:
        os.close(fd)  # closing lets the lock go


def remove_rounds(path: Path) -> None:
    """Remove the rounds file, if there is one: nothing is left to continue from it."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass


@dataclass(frozen=True)
class LoggedBlock:
    """The rounds of a block's latest series, in order from its first round, without a gap."""

    series: str
    rounds: list[dict[str, Any]]


def read_rounds(path: Path) -> dict[str, LoggedBlock]:
    """By block, its latest series' rounds. A line that is not a round (cut short by a kill, damaged) is left out,
    and with it the rounds after it in its series: the results log, not this file, is the record of the run."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError):
        return {}  # an unreadable rounds file costs only the rounds: the blocks are timed again
    latest: dict[str, str] = {}
    series_rounds: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    for line in text.split("\n"):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not _is_round(record):
            continue
        block, series = record["block"], record["series"]  # the block's key and the cases timed
        latest[block] = series
        series_rounds.setdefault((block, series), {})[record["round"]] = record
    blocks = {}
    for block, series in latest.items():
        by_index = series_rounds[(block, series)]
        rounds = []
        while len(rounds) in by_index:
            rounds.append(by_index[len(rounds)])
        if rounds:
            blocks[block] = LoggedBlock(series, rounds)
    return blocks


def _is_round(record: Any) -> bool:
    return (
        isinstance(record, dict)
        and isinstance(record.get("block"), str)
        and isinstance(record.get("series"), str)
        and isinstance(record.get("round"), int)
        and not isinstance(record.get("round"), bool)
    )
