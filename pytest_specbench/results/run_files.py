"""The files of one run: its results log, the locks on every file it writes, its folder in the run history,
the CSV, JSON, baseline, report and figures, and what went wrong writing them.

The controller claims them before any case runs (:meth:`RunFiles.claim`: each file locked for the run's
lifetime, an unfinished run's log never replaced), logs each finished case as it arrives, and writes the
rest once the run has ended (:meth:`RunFiles.write_outputs`, then :meth:`RunFiles.save_in_history`). Nothing
here knows pytest or the report: the front end composes the run's document and hands in the outputs' table it
made of it (:mod:`..report.outputs`, the one ``python -m pytest_specbench merge`` writes with).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..settings.config import SpecbenchConfig, result_settings
from ..settings.options import OPTIONS
from .fingerprint import machine_fingerprint
from .lock import LockedByAnotherRun, RunLock, describe_holder
from .log import ResultsLog, ResultsLogError, read_log, unfinished_reason
from .round_log import read_rounds, remove_rounds, rounds_path
from .run_document import RunDocument
from .schema import CaseResult


@dataclass(frozen=True)
class OutputPaths:
    """Where each output goes; None: not written."""

    csv: Path | None = None
    json: Path | None = None
    baseline: Path | None = None
    figures: Path | None = None  # a folder
    report: Path | None = None


@dataclass(frozen=True)
class Output:
    """One named output: the path it goes to, and the function that writes it there."""

    name: str
    path: Path | None
    write: Callable[[Path], None]


def write_each(
    outputs: Iterable[Output], failure: str = "could not write {path}: {error}"
) -> tuple[list[Path], list[str]]:
    """Write every output that has a path; returns the paths written and, for each that failed, ``failure``
    filled in. One failed file (a full disk, a NaN refused as strict JSON, matplotlib missing) must not cost
    the others."""
    written, errors = [], []
    for output in outputs:
        if output.path is None:
            continue
        try:
            output.write(output.path)
            written.append(output.path)
        except (OSError, ValueError, ImportError) as error:
            errors.append(failure.format(path=output.path, error=error))
    return written, errors


def _kept_rounds_reason(log_path: Path) -> str | None:
    """Why the log's rounds file holds what a new log would lose: a stopped block's finished rounds."""
    blocks = read_rounds(rounds_path(log_path))
    if not blocks:
        return None
    count = sum(len(block.rounds) for block in blocks.values())
    return f"{count} finished round(s) of a block it was timing are kept in {rounds_path(log_path)}"


class RunFiles:
    """The files one run writes (the config's paths), what it wrote, what it could not write or refused."""

    def __init__(self, config: SpecbenchConfig, command: str | None = None, rootdir: Path | None = None) -> None:
        self.config = config
        self.command = command  # the pytest command line: the lock's holder, the log's header, the report
        self.rootdir = rootdir  # its git commit names the run in the history
        self.written: list[Path] = []
        self.errors: list[str] = []  # files that could not be written, and why
        self.refusals: list[str] = []  # outputs deliberately not written, and why
        self.history_entry: Path | None = None  # this run's folder in the run history, once saved
        self._log: ResultsLog | None = None
        self._lock: RunLock | None = None
        self._started = time.time()  # when the run's files began to be written: its figures are those after it
        self._baseline_refused = False

    # --- before any case runs ----------------------------------------------------------------------

    def claim(self) -> None:
        """Lock every file this run writes, and refuse to replace the log of a run that did not finish.
        ValueError (a usage error) names the other run or the log."""
        config = self.config
        writers = [
            (option, getattr(config, option.field))
            for option in OPTIONS
            if option.writes and getattr(config, option.field) is not None
        ]
        if config.history_dir is not None:
            from .history import unusable_reason

            problem = unusable_reason(config.history_dir)
            if problem:
                raise ValueError(
                    f"--specbench-history={config.history_dir}: {problem}; accepted: a folder this user "
                    "can create and write, or --specbench-history= (empty) to turn the history off"
                )
        self._lock = RunLock(self.command)
        try:
            for option, path in writers:
                try:
                    self._lock.acquire([path])
                except LockedByAnotherRun as error:
                    raise ValueError(
                        f"{option.cli}={path} is in use by {describe_holder(error.holder)}: two runs "
                        f"on one file would overwrite each other's results; wait for that run to end, "
                        f"or give this run other output paths (lock file {error.lock_file})"
                    ) from None
                except OSError as error:
                    raise ValueError(
                        f"{option.cli}={path}: its lock file cannot be created ({error.strerror or error})"
                    ) from None
            self._refuse_to_replace_an_unfinished_log()
            self._forget_other_runs_rounds()
        except BaseException:
            self.release()
            raise
        if config.log_path is not None:
            self._log = ResultsLog(config.log_path, result_settings(config), command=self.command)

    def _refuse_to_replace_an_unfinished_log(self) -> None:
        path = self.config.log_path
        if path is None or not path.is_file():
            return
        resume = self.config.resume
        if resume is not None and os.path.realpath(resume) == os.path.realpath(path):
            return  # this run goes on from that log: the new one holds its rows
        try:
            logged = read_log(path)
        except ResultsLogError:
            return  # not a results log this package could resume: nothing in it to lose
        reason = unfinished_reason(logged) or _kept_rounds_reason(path)
        if reason is None:
            return
        command = logged.header.get("command")
        how = (
            f"`{command} --specbench-resume={path}`"
            if command
            else f"that run's command with --specbench-resume={path}"
        )
        raise ValueError(
            f"{path} is the results log of a run that did not finish ({reason}), and this run would "
            f"replace it; this run was not started. Finish that run: {how}. Or start afresh with "
            f"another --specbench-log=PATH, or after moving {path} away"
        )

    def _forget_other_runs_rounds(self) -> None:
        """The rounds file beside the log holds the rounds of the run that wrote the log: a run that does not go on
        from that log removes it, so no later resume takes another run's rounds; one that resumes another log
        starts from that log's rounds, so its own log alone resumes it."""
        path, resume = self.config.log_path, self.config.resume
        if path is None or (resume is not None and os.path.realpath(resume) == os.path.realpath(path)):
            return
        remove_rounds(rounds_path(path))
        if resume is not None and rounds_path(resume).is_file():
            shutil.copyfile(rounds_path(resume), rounds_path(path))

    def rounds_kept(self) -> bool:
        """The log's rounds file holds a round: a block this run stopped in, for a resume to go on from."""
        return self.config.log_path is not None and bool(read_rounds(rounds_path(self.config.log_path)))

    def release(self) -> None:
        """Let the files' locks go (the run's end, also after a failure or a signal). Safe to call twice."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    # --- the results log, a row at a time ------------------------------------------------------------

    @property
    def log_to_start(self) -> bool:
        """A log is kept and has not been started yet (no result so far, or a failed write stopped it)."""
        return self._log is not None and not self._log.started

    def start_log(
        self, cases: Sequence[str], carried: Iterable[CaseResult], carried_from: Sequence[dict[str, Any]]
    ) -> None:
        """The first result of the run: a new log of the selected ``cases``, holding the ``carried`` (resumed)
        rows, so it alone can resume this run. Until then an earlier log stays as it was (a run that measures
        nothing never replaces it)."""
        if not self.log_to_start:
            return
        log = self._log
        log.fingerprint = machine_fingerprint()
        log.cases = list(cases)
        log.carried_from = list(carried_from)
        self._log_safely(lambda: log.start(carried))

    def log_row(self, row: CaseResult) -> None:
        """One finished case, on disk before this returns (when a log is kept and still writable)."""
        if self._log is not None:
            self._log_safely(lambda: self._log.append(row))

    def end_log(self, missing: Sequence[str], interrupted: str | None, lost_mid_block: Sequence[str] = ()) -> None:
        """The log's last line. A run without a row (its cases failed, or it was interrupted before one
        finished) starts no log: an earlier log stays as it was, the CSV and JSON name the missing cases."""
        log = self._log
        if log is None or not log.started:
            return
        if self._log_safely(lambda: log.end(missing, interrupted, lost_mid_block)):
            self.written.append(log.path)
            if not missing and not interrupted:
                remove_rounds(rounds_path(log.path))  # every case has its row: no round is left to go on from
        if self._log is not None:
            self._log.close()

    def _log_safely(self, write: Callable[[], None]) -> bool:
        """A log that cannot be written (a full disk) must not cost the run: say so, stop logging, go on."""
        try:
            write()
            return True
        except OSError as error:
            self.errors.append(
                f"could not write the results log {self._log.path}: {error}; "
                "it stops here, the CSV and JSON still hold every finished case"
            )
            self._log.close()
            self._log = None
            return False

    # --- the end of the run -----------------------------------------------------------------------------

    def open_history(self, measured_here: bool) -> str | None:
        """Make this run's folder in the history when it measured a case itself (a run that replayed every row
        saves none); its name for the document, or None (none, or it could not be made: an error says why)."""
        if measured_here and self.config.history_dir is not None:
            self._new_history_entry()
        return str(self.history_entry) if self.history_entry is not None else None

    def output_paths(self, document: RunDocument) -> OutputPaths:
        """Where the run's files go: the config's paths, but no baseline from a partial run (refused, and why)."""
        config = self.config
        refusal = config.save_baseline and self._baseline_refusal(document)
        self._baseline_refused = bool(refusal)
        if refusal:
            self.refusals.append(refusal)
        return OutputPaths(
            csv=config.csv_path,
            json=config.json_path,
            baseline=None if refusal else config.save_baseline,
            figures=config.plots_dir,
            report=config.report_path,
        )

    def write_outputs(self, outputs: Iterable[Output]) -> bool:
        """Write the run's files (the table the front end made of its document); True when one failed or the
        baseline was refused."""
        self._started = time.time()
        written, errors = write_each(outputs)
        self.written += written
        self.errors += errors
        return bool(self._baseline_refused or errors)

    def history_paths(self) -> OutputPaths | None:
        """Where the run's files go again in its history folder (the report and figures when the run wrote them);
        None where it has none."""
        from . import history

        entry, config = self.history_entry, self.config
        if entry is None:
            return None
        return OutputPaths(
            csv=entry / history.CSV,
            json=entry / history.JSON,
            figures=entry / history.FIGURES if config.plots_dir is not None else None,
            report=entry / history.REPORT if config.report_path is not None else None,
        )

    def _baseline_refusal(self, document: RunDocument) -> str | None:
        """Why this run must not save its baseline (a partial run would replace a whole one), or None."""
        config, missing, interrupted = self.config, document.missing_cases, document.interrupted
        if config.allow_missing or not (missing or interrupted or not document.results):
            return None
        why = [f"{len(missing)} case(s) have no result"] if missing else []
        why += [f"the run was interrupted ({interrupted})"] if interrupted else []
        return (
            f"did not save the baseline {config.save_baseline}: {' and '.join(why) or 'no case has a result'}"
            "; a partial baseline would stop gating the cases it lacks. Finish the run (--specbench-resume="
            f"{config.log_path or 'the results log'}) or pass --specbench-allow-missing to save it anyway"
        )

    def _new_history_entry(self) -> None:
        from .history import new_entry, short_commit

        try:
            self.history_entry = new_entry(self.config.history_dir, short_commit(self.rootdir or Path.cwd()))
        except OSError as error:
            self.errors.append(f"could not save the run in the history {self.config.history_dir}: {error}")

    def save_in_history(self, outputs: Iterable[Output]) -> None:
        """The run's files, again, in its history folder (:meth:`history_paths`): CSV, JSON, the log, and the
        report and figures when the run wrote them; the figures are copied, not drawn again."""
        from . import history

        paths = self.history_paths()
        if paths is None:
            return
        entry, config, figures, started = self.history_entry, self.config, paths.figures, self._started
        _, errors = write_each(
            (output for output in outputs if output.name != "figures"),
            "could not save {path} in the history: {error}",
        )
        copies = []
        if config.log_path is not None and config.log_path in self.written:
            copies.append((config.log_path, entry / history.LOG))
        if figures is not None and config.plots_dir in self.written:
            copies += [
                (png, figures / png.name)
                for png in sorted(config.plots_dir.glob("*.png"))
                if png.stat().st_mtime >= int(started)
            ]  # this run's figures, not an earlier run's
        for source, target in copies:
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)
            except OSError as error:
                errors.append(f"could not save {target} in the history: {error}")
        self.errors += errors
