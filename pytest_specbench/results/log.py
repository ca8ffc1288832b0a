"""The results log: every finished case, one JSON line each, on disk the moment it finishes.

It survives a SIGKILL, a power cut or a crashed controller (the CSV and JSON are written only at the end), and
``--specbench-resume`` reads it (docs/measuring.md, "Nothing lost"). Only the controller writes it. A first line
describes the run, result rows (the schema's fields) follow, and a run that reached its end adds a last line::

    {"specbench_log": 1, "started": ..., "settings": {...}, "fingerprint": {...}, "cases": [...], "carried": [...],
     "command": "pytest ..."}
    {"specbench_log_end": 1, "ended": ..., "rows": 6, "missing_cases": [], "interrupted": null}

``carried`` groups the rows taken from earlier logs by the run that measured them. A log without that last line,
or whose last line names missing cases or an interruption, did not finish (:func:`unfinished_reason`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..atomic import write_atomic
from .schema import CaseResult

LOG_FORMAT = 1
END_KEY = "specbench_log_end"


class ResultsLogError(ValueError):
    """A results log that cannot be resumed: ``<path>:<line>: <what is wrong>; <what is accepted>``."""


def _line(record: dict[str, Any]) -> str:
    # NaN stays NaN (json reads it back): a finished row is never dropped for one odd value.
    return json.dumps(record, default=str) + "\n"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def new_run_id() -> str:
    """A run's id for its rows (``run_id``): its start time and a random suffix, so two runs started in one
    second differ too."""
    return f"{_now()}-{secrets.token_hex(3)}"


class ResultsLog:
    """Appends result rows to ``path``, each written and fsynced before :meth:`append` returns.

    The file is started lazily, by :meth:`start`, when the first case of the run begins: a
    pytest run that runs no benchmark case leaves an earlier log alone. Writes go straight to the
    file descriptor (no buffer), so a full disk fails the write that hit it and nothing is left to
    fail again at :meth:`close`.
    """

    def __init__(
        self,
        path: Path,
        settings: dict[str, Any],
        fingerprint: dict[str, Any] | None = None,
        cases: Sequence[str] = (),
        carried_from: Sequence[dict[str, Any]] = (),
        command: str | None = None,
    ) -> None:
        self.path = path
        self.settings = settings
        self.command = command  # the pytest command line: a run that did not finish is resumed with it
        self.fingerprint = dict(fingerprint or {})
        self.cases = list(cases)
        self.carried_from = [dict(group) for group in carried_from]  # see the module docstring: "carried"
        self.rows = 0
        self._fd: int | None = None

    def start(self, carried: Iterable[CaseResult] = ()) -> None:
        """Begin a new log (replacing any file at ``path``): the run's line, then the ``carried`` rows."""
        carried = [row.to_row() for row in carried]
        header = {
            "specbench_log": LOG_FORMAT,
            "started": _now(),
            "settings": self.settings,
            "fingerprint": self.fingerprint,
            "cases": self.cases,
            "carried": self.carried_from,
            "command": self.command,
        }
        # Atomic, so the log being resumed (often this very file) is never half rewritten.
        write_atomic(self.path, "".join(_line(record) for record in (header, *carried)))
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self.rows = len(carried)

    @property
    def started(self) -> bool:
        return self._fd is not None

    def _write(self, text: str) -> None:
        data = text.encode("utf-8")
        while data:
            data = data[os.write(self._fd, data) :]
        os.fsync(self._fd)

    def append(self, row: CaseResult) -> None:
        """Write one row and force it to disk."""
        self._write(_line(row.to_row()))
        self.rows += 1

    def end(self, missing: Sequence[str], interrupted: str | None, lost_mid_block: Sequence[str] = ()) -> None:
        """The run reached its end: the last line says whether it finished every case, and which cases the block
        being timed when it stopped lost."""
        self._write(
            _line(
                {
                    END_KEY: LOG_FORMAT,
                    "ended": _now(),
                    "rows": self.rows,
                    "missing_cases": list(missing),
                    "interrupted": interrupted,
                    "lost_mid_block": list(lost_mid_block),
                }
            )
        )

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.close(fd)
            except OSError:
                pass  # nothing is buffered: every row was written and fsynced, or its error reported


@dataclass
class ResumedLog:
    """What a results log holds: the run's settings and the last row of each case, typed."""

    path: Path
    settings: dict[str, Any]
    rows: dict[str, CaseResult]
    header: dict[str, Any] = field(default_factory=dict)  # the run's line
    end: dict[str, Any] | None = None  # the last line of a run that reached its end

    @property
    def fingerprint(self) -> dict[str, Any]:
        """The machine that measured the rows this log's run measured itself (empty for a log of an older version)."""
        fingerprint = self.header.get("fingerprint")
        return fingerprint if isinstance(fingerprint, dict) else {}

    def origins(self) -> list[dict[str, Any]]:
        """Who measured each row: ``{"log", "started", "fingerprint", "cases"}`` groups, the rows this log's run
        took from earlier logs first (as its header records them), then the rows it measured itself."""
        groups, seen = [], set()
        for group in self.header.get("carried") or ():
            if isinstance(group, dict):
                cases = [case for case in group.get("cases", ()) if case in self.rows and case not in seen]
                seen.update(cases)
                if cases:
                    groups.append({**group, "cases": cases})
        own = [case for case in self.rows if case not in seen]
        if own:
            groups.append(
                {
                    "log": str(self.path),
                    "started": self.header.get("started"),
                    "fingerprint": self.fingerprint,
                    "cases": own,
                }
            )
        return groups


def unfinished_reason(log: ResumedLog) -> str | None:
    """Why ``log`` is the log of a run that did not finish (killed, interrupted, cases without a result) and holds
    rows a new log would lose, or None."""
    if not log.rows:
        return None  # no finished case in it: replacing it loses nothing
    planned = [case for case in log.header.get("cases") or () if isinstance(case, str)]
    missing = [case for case in planned if case not in log.rows]
    if log.end is None:
        counted = f"{len(log.rows)} of {len(planned)} case(s)" if planned else f"{len(log.rows)} case(s)"
        return f"it holds {counted} and no end (the run was killed, or is running)"
    if log.end.get("interrupted"):
        return (
            f"the run was interrupted ({log.end['interrupted']}) with {len(log.rows)} of {len(planned) or '?'} "
            "case(s) finished"
        )
    if "missing_cases" in log.end:  # the run's own count: cases it skipped (a missing model) are not missing
        missing = log.end["missing_cases"]
    if missing:
        return f"{len(missing)} case(s) have no result ({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''})"
    return None


_ACCEPTED = "a results log written by pytest-specbench (--specbench-log): a run line, then one result per line"
_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (int, float),
    "str": (str,),
    "bool": (bool,),
    "list": (list,),
    "dict": (dict,),
}


def _accepts(annotation: str, value: Any) -> bool:
    names = [name.strip() for name in str(annotation).split("|")]
    if value is None:
        return "None" in names
    known = [name for name in names if name in _TYPES]
    if len(known) < len([name for name in names if name != "None"]):
        return True  # a type this check does not know: not refused for it
    if isinstance(value, bool):
        return "bool" in known
    return any(isinstance(value, _TYPES[name]) for name in known)


def row_problem(record: dict[str, Any], schema: type = CaseResult) -> str | None:
    """What makes ``record`` not a result row of ``schema`` (a field missing, a value of the wrong type), or None.

    Fields with a default may be absent (a row written before the field existed); present, each must have
    its declared type (an integer is a float; NaN is a float; a bool is only a bool).
    """
    missing, wrong = [], []
    for schema_field in dataclasses.fields(schema):
        has_default = (
            schema_field.default is not dataclasses.MISSING or schema_field.default_factory is not dataclasses.MISSING
        )
        if schema_field.name not in record:
            if not has_default:
                missing.append(schema_field.name)
            continue
        value = record[schema_field.name]
        if not _accepts(schema_field.type, value):
            wrong.append(f"{schema_field.name} is {json.dumps(value, default=str)[:40]}, not {schema_field.type}")
    if missing:
        shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
        return f"not a result row: {len(missing)} required field(s) missing ({shown})"
    if wrong:
        return f"not a result row: {'; '.join(wrong[:3])}"
    return None


def read_log(path: Path) -> ResumedLog:
    """Read a results log; ResultsLogError names the line of the first problem.

    Each result line is checked against the schema (:func:`row_problem`): a line that is JSON but not a
    row is refused, never resumed. A last line without its newline is a write cut short (the process was
    killed mid-line): it is left out, not an error. A case logged twice keeps its last row.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ResultsLogError(f"{path}: cannot be read ({error}); {_ACCEPTED}") from None
    lines = text.split("\n")
    settings: dict[str, Any] | None = None
    header: dict[str, Any] = {}
    end: dict[str, Any] | None = None
    rows: dict[str, CaseResult] = {}
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
                raise ResultsLogError(
                    f"{path}:{number}: a run line of another format "
                    f"({record['specbench_log']!r}); {_ACCEPTED}, format {LOG_FORMAT}"
                )
            recorded = _current_names(record["settings"])  # a run before an option's rename reads as after it
            if settings is not None and recorded != settings:
                raise ResultsLogError(
                    f"{path}:{number}: a second run with other settings; {_ACCEPTED}, all with the same settings"
                )
            settings, header, end = recorded, record, None
        elif settings is None:
            raise ResultsLogError(f"{path}:{number}: a result before the run line; {_ACCEPTED}")
        elif END_KEY in record:
            end = record
        elif isinstance(record.get("case"), str) and record["case"]:
            problem = row_problem(record)
            if problem:
                raise ResultsLogError(f"{path}:{number}: {problem} (case {record['case']!r}); {_ACCEPTED}")
            row = CaseResult.from_row(record)
            rows[row.case] = row
            end = None  # a row after an end line: a run went on in this log
        else:
            raise ResultsLogError(f"{path}:{number}: a result without a case id; {_ACCEPTED}")
    if settings is None:
        raise ResultsLogError(f"{path}: no run line; {_ACCEPTED}")
    return ResumedLog(path=path, settings=settings, rows=rows, header=header, end=end)


def _current_names(settings: dict[str, Any]) -> dict[str, Any]:
    from ..settings.options import current_setting_names

    return current_setting_names(settings)


def settings_differences(logged: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``--option: logged -> now`` for each result-changing option whose value differs; a list the option
    table marks ``order_free`` (the batch sizes) differs only in its members, not their order. A setting logged
    under an option's earlier name (``--specbench-head-kernel``) is compared as the option's."""
    from ..settings.options import OPTIONS

    logged, current = _current_names(logged), _current_names(current)

    order_free = {option.cli for option in OPTIONS if option.order_free}

    def meaning(name: str, value: Any) -> Any:
        if name in order_free and isinstance(value, list):
            return sorted(value, key=repr)
        return value

    return [
        f"{name}={logged.get(name)!r} in the log, {current.get(name)!r} now"
        for name in sorted(set(logged) | set(current))
        if meaning(name, logged.get(name)) != meaning(name, current.get(name))
    ]
