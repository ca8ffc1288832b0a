"""The results log: every finished case, one JSON line each, on disk the moment it finishes.

The CSV and JSON are written once, at the end of the session; the log is what survives a
SIGKILL, a power cut or a crashed controller, and what ``--specbench-resume`` reads to run
only the cases that did not finish. Its first line describes the run::

    {"specbench_log": 1, "started": "2025-01-01T12:00:00+00:00", "settings": {"--specbench-dtype": ...}}

and every other line is one result row (the schema's fields). Only the controller writes it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..atomic import write_atomic

LOG_FORMAT = 1


class ResultsLogError(ValueError):
    """A results log that cannot be resumed: ``<path>:<line>: <what is wrong>; <what is accepted>``."""


def _line(record: dict[str, Any]) -> str:
    # NaN stays NaN (json reads it back): a finished row is never dropped for one odd value.
    return json.dumps(record, default=str) + "\n"


class ResultsLog:
    """Appends result rows to ``path``, each flushed and fsynced before :meth:`append` returns.

    The file is started lazily, by :meth:`start`, when the first case of the run begins: a
    pytest run that collects no benchmark leaves an earlier log alone.
    """

    def __init__(self, path: Path, settings: dict[str, Any]) -> None:
        self.path = path
        self.settings = settings
        self._handle = None

    def start(self, carried: Iterable[dict[str, Any]] = ()) -> None:
        """Begin a new log (replacing any file at ``path``): the run's line, then the ``carried`` rows."""
        header = {"specbench_log": LOG_FORMAT, "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  "settings": self.settings}
        # Atomic, so the log being resumed (often this very file) is never half rewritten.
        write_atomic(self.path, "".join(_line(record) for record in (header, *carried)))
        self._handle = open(self.path, "a", encoding="utf-8")

    @property
    def started(self) -> bool:
        return self._handle is not None

    def append(self, row: dict[str, Any]) -> None:
        """Write one row and force it to disk."""
        self._handle.write(_line(row))
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


@dataclass
class ResumedLog:
    """What a results log holds: the run's settings and the last row of each case."""

    path: Path
    settings: dict[str, Any]
    rows: dict[str, dict[str, Any]]


_ACCEPTED = "a results log written by pytest-specbench (--specbench-log): a run line, then one result per line"


def read_log(path: Path) -> ResumedLog:
    """Read a results log; ResultsLogError names the line of the first problem.

    A last line without its newline is a write cut short (the process was killed mid-line): it
    is left out, not an error. A case logged twice keeps its last row.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ResultsLogError(f"{path}: cannot be read ({error}); {_ACCEPTED}") from None
    lines = text.split("\n")
    settings: dict[str, Any] | None = None
    rows: dict[str, dict[str, Any]] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines):  # no newline after it: cut short by a kill
                break
            raise ResultsLogError(f"{path}:{number}: not JSON ({error.msg}); {_ACCEPTED}") from None
        if not isinstance(record, dict):
            raise ResultsLogError(f"{path}:{number}: a {type(record).__name__}, not an object; {_ACCEPTED}")
        if "specbench_log" in record:
            if record["specbench_log"] != LOG_FORMAT or not isinstance(record.get("settings"), dict):
                raise ResultsLogError(f"{path}:{number}: a run line of another format "
                                      f"({record['specbench_log']!r}); {_ACCEPTED}, format {LOG_FORMAT}")
            if settings is not None and record["settings"] != settings:
                raise ResultsLogError(f"{path}:{number}: a second run with other settings; {_ACCEPTED}, "
                                      "all with the same settings")
            settings = record["settings"]
        elif settings is None:
            raise ResultsLogError(f"{path}:{number}: a result before the run line; {_ACCEPTED}")
        elif isinstance(record.get("case"), str) and record["case"]:
            rows[record["case"]] = record
        else:
            raise ResultsLogError(f"{path}:{number}: a result without a case id; {_ACCEPTED}")
    if settings is None:
        raise ResultsLogError(f"{path}: no run line; {_ACCEPTED}")
    return ResumedLog(path=path, settings=settings, rows=rows)


def settings_differences(logged: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``--option: logged -> now`` for each result-changing option whose value differs."""
    return [f"{name}={logged.get(name)!r} in the log, {current.get(name)!r} now"
            for name in sorted(set(logged) | set(current)) if logged.get(name) != current.get(name)]
