"""SpecbenchSession: one pytest session's benchmark run, from the case matrix to the files and the gate.

Built once in ``pytest_configure`` from the validated config. The plugin's
hooks hand it what pytest reports (collected items, test reports) and ask it
to finish (files, gate, exit status) and to summarise; it knows no hook.

On the controller (the only process without xdist) it also keeps the results
log, appending each finished case as it arrives, and holds SIGTERM and SIGINT
back while it does (:mod:`.signals`), so a signal ends the run with every
finished case in the log, the CSV and the JSON. The controller locks the run's
files for its lifetime (:mod:`..results.lock`), refuses to replace the log of a
run that did not finish, and saves each run that measured a case in the run
history (:mod:`..results.history`).
"""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..settings.config import SpecbenchConfig, result_settings
from ..measure.matrix import Case, build_matrix, shard_pairs
from ..measure.pairs import PairSpec, all_pairs, select_pairs
from ..measure.prompts import Prompt, load_prompts, select_prompts
from ..results.log import (ResultsLog, ResultsLogError, ResumedLog, new_run_id, read_log,
                           settings_differences, unfinished_reason)
from ..results.lock import LockedByAnotherRun, RunLock, describe_holder
from ..settings.options import OPTIONS
from .availability import PairAvailability
from .signals import SignalStop

if TYPE_CHECKING:
    from ..results.gate import GateOutcome

#: the user-property name under which a case's result row travels in its test report
RESULT_KEY = "specbench_result"


@dataclass
class SpecbenchSession:
    config: SpecbenchConfig
    pairs: list[PairSpec]  # the pairs this run selected
    defined: dict[str, PairSpec]  # every pair defined (built in, pyproject, pairs file)
    prompts: list[Prompt]  # every prompt of the file: padding for --specbench-context-tokens uses them all
    cases: list[Case]
    baseline: dict[str, Any] | None = None  # the loaded baseline document, when gating
    resumed: dict[str, dict[str, Any]] = field(default_factory=dict)  # rows of --specbench-resume, by case id
    rerun: dict[str, list[str]] = field(default_factory=dict)  # logged cases run again, by id: what changed
    run_id: str = field(default_factory=new_run_id)  # the run_id of the rows this run measures
    controller: bool = True  # False on an xdist worker: no log, no signal handling, no files
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)  # by case id; a rerun replaces its row
    cases_collected: int = 0  # specbench cases collected, before -k/-m deselect
    cases_run: int = 0
    selected: set[str] = field(default_factory=set)  # cases to run, after -k/-m deselect
    failed_cases: set[str] = field(default_factory=set)
    skipped_cases: set[str] = field(default_factory=set)
    skip_reasons: dict[str, str] = field(default_factory=dict)  # by case id: why it was skipped
    began: set[str] = field(default_factory=set)  # cases whose setup ran (not skipped there)
    resumed_log: ResumedLog | None = None  # the log --specbench-resume read
    rootdir: Path | None = None  # pytest's rootdir: its git commit names the run in the history
    history_entry: Path | None = None  # this run's folder in the run history, once saved
    claim_pending: bool = False  # the run's files are still to be claimed (locked, checked): see claim_outputs
    interrupted: str | None = None  # what ended the run early: a signal, a failure limit
    interrupted_while_writing: bool = False  # a signal came while the files were written (completed first)
    written: list[Path] = field(default_factory=list)
    write_errors: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)  # outputs deliberately not written, and why
    gate: GateOutcome | None = None  # the comparison with --specbench-baseline, once the run has ended
    command: str | None = None  # the pytest command line, for the report
    signals: SignalStop = field(default_factory=SignalStop, repr=False)
    began_at: float = field(default_factory=time.perf_counter, repr=False)  # the run's budget counts from here
    availability: PairAvailability = field(init=False, repr=False)
    _log: ResultsLog | None = field(default=None, repr=False)
    _lock: RunLock | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.availability = PairAvailability(self.config, self.defined)

    @classmethod
    def build(cls, config: SpecbenchConfig, rootdir: Path, controller: bool = True) -> "SpecbenchSession":
        """Raise ValueError (a usage error) for unknown pairs, categories, bad files or a log of other settings."""
        defined = all_pairs(rootdir, config.pairs_file)
        pairs = select_pairs(defined, config.pairs or tuple(defined))
        if config.shard is not None:
            pairs = shard_pairs(pairs, *config.shard)
        all_prompts = load_prompts(config.prompt_file)
        # The CPU default categories are the shipped suite's; a user's own file runs whole unless told.
        categories = config.prompt_categories or None
        if config.prompt_file is not None and "prompts" not in config.given:
            categories = None
        prompts = select_prompts(all_prompts, categories, config.prompts_per_category)
        baseline = None
        if config.baseline is not None:
            from ..results.gate import check_baseline_settings, load_baseline

            baseline = load_baseline(config.baseline)
            check_baseline_settings(baseline, config, config.baseline)  # other settings: refused before any model loads
        cases = build_matrix(pairs, config.ks, prompts, config.engines, config.batches)
        resumed, rerun, log = {}, {}, None
        if config.resume is not None:
            from ..measure.case_inputs import replayable

            log = read_log(config.resume)  # each row checked against the schema: a bad line is a usage error
            differences = settings_differences(log.settings, result_settings(config))
            if differences:
                raise ValueError(f"--specbench-resume={config.resume}: the log was measured with other settings "
                                 f"({'; '.join(differences)}); resume with the options of the run it logged")
            # Only a row whose case has the same inputs now (models, prompt text, ...) is replayed.
            resumed, rerun = replayable(log.rows, cases, config, all_prompts)
        session = cls(config=config, pairs=pairs, defined=defined, prompts=all_prompts, cases=cases,
                      baseline=baseline, resumed=resumed, controller=controller, resumed_log=log,
                      rootdir=rootdir, rerun=rerun)
        return session

    # --- the run's files: locked, and an unfinished run's log never replaced -----------------------

    def claim_outputs(self) -> None:
        """On the controller, before any case runs: lock every file this run writes, and refuse to replace the
        log of a run that did not finish. ValueError (a usage error) names the other run or the log."""
        config = self.config
        writers = [(option, getattr(config, option.field)) for option in OPTIONS
                   if option.writes and getattr(config, option.field) is not None]
        if config.history_dir is not None:
            from ..results.history import unusable_reason

            problem = unusable_reason(config.history_dir)
            if problem:
                raise ValueError(f"--specbench-history={config.history_dir}: {problem}; accepted: a folder this user "
                                 "can create and write, or --specbench-history= (empty) to turn the history off")
        self._lock = RunLock(self.command)
        try:
            for option, path in writers:
                try:
                    self._lock.acquire([path])
                except LockedByAnotherRun as error:
                    raise ValueError(f"{option.cli}={path} is in use by {describe_holder(error.holder)}: two runs "
                                     f"on one file would overwrite each other's results; wait for that run to end, "
                                     f"or give this run other output paths (lock file {error.lock_file})") from None
                except OSError as error:
                    raise ValueError(f"{option.cli}={path}: its lock file cannot be created "
                                     f"({error.strerror or error})") from None
            self._refuse_to_replace_an_unfinished_log()
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
        reason = unfinished_reason(logged)
        if reason is None:
            return
        command = logged.header.get("command")
        how = f"`{command} --specbench-resume={path}`" if command else \
            f"that run's command with --specbench-resume={path}"
        raise ValueError(f"{path} is the results log of a run that did not finish ({reason}), and this run would "
                         f"replace it; this run was not started. Finish that run: {how}. Or start afresh with "
                         f"another --specbench-log=PATH, or after moving {path} away")

    def release(self) -> None:
        """The end of the pytest run (also after a failure or a signal): put the signal handlers back and let the
        files' locks go. After a signal the handlers stay: the process is ending, and a further SIGTERM while
        Python shuts down would otherwise kill it (status 143) after the summary was printed."""
        if self.signals.received is None:
            self.signals.restore()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    # --- what pytest reports -----------------------------------------------------

    def unavailable_reason(self, pair: PairSpec, probe_hub: bool = True) -> str | None:
        return self.availability.unavailable_reason(pair, probe_hub)

    def chosen(self, pair: PairSpec) -> bool:
        return self.availability.chosen(pair)

    @property
    def case_ids(self) -> set[str]:
        return {case.id for case in self.cases}

    def count_collected(self, has_case: Iterable[bool]) -> None:
        """Items collected before -k/-m deselect: lets the summary explain a selection that matched none."""
        self.cases_collected += sum(has_case)

    def select(self, case_ids: Iterable[str]) -> None:
        """The cases this run will run (after -k/-m), as each process (or xdist worker) collected them.

        From here on, on the controller, SIGTERM and SIGINT end the run cleanly.
        """
        self.selected.update(case_id for case_id in case_ids if case_id in self.case_ids)
        if self.selected and self.controller:
            self.signals.install()

    def add_report(self, case_id: str, when: str, outcome: str, is_case: bool,
                   properties: Sequence[tuple[str, Any]], skip_reason: str | None = None) -> None:
        """One test report: count the case, remember a failure or skip, keep (and log) the result row it carries."""
        with self.signals.held():
            if when == "setup" and is_case and outcome != "skipped":
                self.cases_run += 1
                self.began.add(case_id)
            if case_id in self.case_ids:
                if outcome == "failed":
                    self.failed_cases.add(case_id)  # a crashed worker's case arrives only as a failure
                elif outcome == "skipped":
                    self.skipped_cases.add(case_id)
                    self.skip_reasons[case_id] = skip_reason or "no reason given"
            if when != "call":
                return
            for name, value in properties:
                if name == RESULT_KEY:
                    self.rows[value["case"]] = value
                    if value["case"] not in self.resumed:
                        value["run_id"] = self.run_id  # a replayed row keeps its own run's
                        self._start_log()
                        if self._log is not None:
                            self._log_safely(lambda: self._log.append(value))

    def _start_log(self) -> None:
        """The first result of the run: a new log, holding the resumed rows, so it alone can resume this run.
        Until then an earlier log stays as it was (a run that measures nothing never replaces it)."""
        if self._log is None or self._log.started:
            return
        from ..results.fingerprint import machine_fingerprint

        log = self._log
        log.fingerprint = machine_fingerprint()
        log.cases = [case.id for case in self.cases if case.id in self.selected]
        log.carried_from = self._origins(set(self.resumed))
        self._log_safely(lambda: log.start(self.resumed.values()))

    def _log_safely(self, write: Callable[[], None]) -> bool:
        """A log that cannot be written (a full disk) must not cost the run: say so, stop logging, go on."""
        try:
            write()
            return True
        except OSError as error:
            self.write_errors.append(f"could not write the results log {self._log.path}: {error}; "
                                     "it stops here, the CSV and JSON still hold every finished case")
            self._log.close()
            self._log = None
            return False

    def replay(self, case_id: str) -> dict[str, Any] | None:
        """The row --specbench-resume took from its log for ``case_id``: the case reports it instead of running."""
        return self.resumed.get(case_id)

    @property
    def results(self) -> list[dict[str, Any]]:
        """The rows in matrix order, whatever order xdist workers finished them in."""
        order = {case.id: index for index, case in enumerate(self.cases)}
        return sorted(self.rows.values(), key=lambda row: order.get(row["case"], len(order)))

    @property
    def missing(self) -> list[str]:
        """Cases selected to run that left no result: failed before measuring, a crashed worker, or never
        reached because the run was interrupted. Skipped cases (built-in pairs nobody asked for) are not missing."""
        expected = self.selected or self.failed_cases
        order = {case.id: index for index, case in enumerate(self.cases)}
        return sorted(expected - set(self.rows) - self.skipped_cases, key=lambda case_id: order.get(case_id, 0))

    @property
    def replayed(self) -> list[str]:
        """Cases of this run whose result came from the resumed log."""
        return [row["case"] for row in self.results if row["case"] in self.resumed]

    def resumed_from(self) -> list[dict[str, Any]]:
        """Which earlier runs measured the replayed rows: ``{"log", "started", "fingerprint", "cases"}`` per run
        (the rows a log took from earlier logs keep their own run's). Every other row is this run's, measured
        under the document's own ``fingerprint``."""
        return self._origins(set(self.replayed))

    def _origins(self, cases: set[str]) -> list[dict[str, Any]]:
        """The resumed log's origin groups cut to ``cases``: a case run again now is no earlier run's."""
        if self.resumed_log is None:
            return []
        groups = []
        for group in self.resumed_log.origins():
            kept = [case for case in group["cases"] if case in cases]
            if kept:
                groups.append({**group, "cases": kept})
        return groups

    @property
    def measured_here(self) -> bool:
        """A row was measured by this run, not only replayed: only such a run is a new run of the history."""
        return any(case not in self.resumed for case in self.rows)

    @property
    def measured_nothing(self) -> bool:
        """No case began (all skipped, or none selected) and no row came: the run leaves every file as it was."""
        return not self.rows and not (self.began - self.skipped_cases)

    # --- the end of the run ------------------------------------------------------

    def finish(self, interrupted: str | None = None) -> bool:
        """Write the files and run the gate; True when the run must fail (a file not written, a regression,
        a baseline refused). ``interrupted`` is what ended the run early, if anything did; a signal caught
        here says so itself. Signals are noted, not raised, until the files are written."""
        with self.signals.finishing():
            self.interrupted = self.signals.received or interrupted
            failed = False
            # Once a case began, the files describe this run, even with no result: never an earlier run's files.
            # A run that measured nothing (every case skipped, none selected) writes nothing and replaces nothing.
            if not self.measured_nothing:
                self._end_log()
                failed |= self._write_outputs()
            if self.baseline is not None:
                failed |= self._gate()
            if self.signals.received and not self.interrupted:
                # Held back until the files were complete; the summary and the exit status still say so.
                self.interrupted, self.interrupted_while_writing = self.signals.received, True
            return failed or bool(self.write_errors)

    def _end_log(self) -> None:
        """The log's last line. A run without a row (its cases failed, or it was interrupted before one
        finished) starts no log: an earlier log stays as it was, the CSV and JSON name the missing cases."""
        if self._log is None:
            return
        if self.rows:
            self._start_log()  # only resumed rows: the new log holds them, so it alone can resume this run
        log = self._log
        if log is None or not log.started:
            return
        if self._log_safely(lambda: log.end(self.missing, self.interrupted)):
            self.written.append(log.path)
        if self._log is not None:
            self._log.close()

    def _baseline_refusal(self) -> str | None:
        """Why this run must not save its baseline (a partial run would replace a whole one), or None."""
        if self.config.allow_missing or not (self.missing or self.interrupted or not self.results):
            return None
        why = [f"{len(self.missing)} case(s) have no result"] if self.missing else []
        why += [f"the run was interrupted ({self.interrupted})"] if self.interrupted else []
        return (f"did not save the baseline {self.config.save_baseline}: {' and '.join(why) or 'no case has a result'}"
                "; a partial baseline would stop gating the cases it lacks. Finish the run (--specbench-resume="
                f"{self.config.log_path or 'the results log'}) or pass --specbench-allow-missing to save it anyway")

    def _write_outputs(self) -> bool:
        """Write the run's files (report/outputs.py's table, the one ``merge`` writes too); True when one
        failed or the baseline was refused."""
        from ..report.outputs import OutputPaths, write_outputs
        from ..report.summary import environment, run_document

        settings = self.config
        refusal = settings.save_baseline and self._baseline_refusal()
        if refusal:
            self.refusals.append(refusal)
        paths = OutputPaths(csv=settings.csv_path, json=settings.json_path,
                            baseline=None if refusal else settings.save_baseline,
                            figures=settings.plots_dir, report=settings.report_path)
        document = run_document(self.results, settings.raw, environment(), self.missing,
                                interrupted=self.interrupted, resumed=self.replayed)
        # Which machine measured which rows: the replayed ones keep the fingerprint of the run that measured them.
        document["resumed_from"] = self.resumed_from()
        if self.measured_here and settings.history_dir is not None:
            self._new_history_entry()
        document["history_entry"] = str(self.history_entry) if self.history_entry is not None else None
        document["errors"] = list(self.write_errors)  # what went wrong so far (a log on a full disk)
        started = time.time()
        written, errors = write_outputs(paths, document, self.command)
        self.written += written
        self.write_errors += errors
        if self.history_entry is not None:
            self._save_in_history({**document, "errors": list(self.write_errors)}, started)
        return bool(refusal or errors)

    def _new_history_entry(self) -> None:
        from ..results.history import new_entry, short_commit

        try:
            self.history_entry = new_entry(self.config.history_dir, short_commit(self.rootdir or Path.cwd()))
        except OSError as error:
            self.write_errors.append(f"could not save the run in the history {self.config.history_dir}: {error}")

    def _save_in_history(self, document: dict[str, Any], started: float) -> None:
        """The run's files, again, in its history folder: CSV, JSON, the log, and the report and figures when
        the run wrote them."""
        from ..report.outputs import OutputPaths, outputs
        from ..results import history

        entry, settings = self.history_entry, self.config
        figures = entry / history.FIGURES if settings.plots_dir is not None else None
        paths = OutputPaths(csv=entry / history.CSV, json=entry / history.JSON, figures=figures,
                            report=entry / history.REPORT if settings.report_path is not None else None)
        errors = []
        for output in outputs(paths, document, self.command):
            if output.path is None or output.name == "figures":
                continue
            try:
                output.write(output.path)
            except (OSError, ValueError, ImportError) as error:
                errors.append(f"could not save {output.path} in the history: {error}")
        copies = []
        if settings.log_path is not None and settings.log_path in self.written:
            copies.append((settings.log_path, entry / history.LOG))
        if figures is not None and settings.plots_dir in self.written:
            copies += [(png, figures / png.name) for png in sorted(settings.plots_dir.glob("*.png"))
                       if png.stat().st_mtime >= int(started)]  # this run's figures, not an earlier run's
        for source, target in copies:
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)
            except OSError as error:
                errors.append(f"could not save {target} in the history: {error}")
        self.write_errors += errors

    def _gate(self) -> bool:
        from ..results.gate import run_gate

        settings = self.config
        self.gate = run_gate(self.baseline, self.results, settings.baseline, max_acceptance_drop=settings.max_acceptance_drop,
                             max_speedup_drop=settings.max_speedup_drop, allow_missing=settings.allow_missing,
                             config=settings)
        return self.gate.failed

    def summary_sections(self) -> list[tuple[str, list[tuple[str, bool]]]]:
        """``(title, [(line, is_error), ...])`` sections for the terminal; none when nothing was benchmarked."""
        if not (self.cases_collected or self.cases_run or self.rows or self.gate or self.refusals
                or self.skipped_cases):
            return []
        from ..report.summary import summary_lines

        skipped_pairs = self._skipped_pair_lines()
        all_skipped = bool(self.selected) and self.selected <= self.skipped_cases
        if self.measured_nothing and all_skipped and not self.interrupted:
            lines = [(f"no specbench case ran: all {len(self.selected)} selected case(s) were skipped", False)]
            lines += [(line, False) for line in skipped_pairs]
            lines.append(("no file was written: the results files and log of an earlier run are left as they were",
                          False))
            skipped_pairs = []
        elif self.cases_collected and not self.cases_run and not self.interrupted:
            lines = [(line, False) for line in self.availability.empty_selection_lines(self.pairs, self.cases)]
        else:
            lines = [(line, False) for line in summary_lines(self.results, self.config.ci_target)]
        lines += [(line, False) for line in skipped_pairs]
        lines += [(line, False) for line in self._budget_lines()]
        if self.replayed:
            lines.append((f"{len(self.replayed)} case(s) taken from {self.config.resume}, not run again", False))
        lines += [(line, False) for line in self._rerun_lines()]
        if self.interrupted:
            when = " while its files were written," if self.interrupted_while_writing else ""
            lines.append((f"run interrupted ({self.interrupted}){when} with {len(self.rows)} of "
                          f"{len(self.selected) or len(self.rows)} case(s) finished", True))
        if self.missing:
            lines.append((f"no result for {len(self.missing)} case(s): {', '.join(self.missing)}",
                          bool(self.interrupted)))
            if self.config.log_path is not None and self.rows:
                lines.append((f"to run only those: the same command with --specbench-resume={self.config.log_path}",
                              False))
        lines += [(f"results written to {path}", False) for path in self.written]
        if self.history_entry is not None:
            from ..results.history import compare_last_command, number_of

            before = f" (compare it with the run before: {compare_last_command(self.config.history_dir)})" \
                if number_of(self.history_entry) > 1 else ""
            lines.append((f"run saved in the history: {self.history_entry}{before}", False))
        elif self.replayed and not self.measured_here and self.config.history_dir is not None:
            lines.append((f"not saved in the history: every result was taken from {self.config.resume}, "
                          "none was measured", False))
        lines += [(line, True) for line in self.refusals + self.write_errors]
        sections = [("specbench summary", lines)]
        if self.gate is not None:
            sections.append(("specbench gate", [(line, False) for line in self.gate.lines]))
        return sections

    def _rerun_lines(self) -> list[str]:
        """One line naming the logged cases run again because their inputs changed, and what changed."""
        changed = [case.id for case in self.cases if case.id in self.rerun and case.id in self.selected]
        if not changed:
            return []
        by_change: dict[str, list[str]] = {}
        for case in changed:
            by_change.setdefault(", ".join(self.rerun[case]), []).append(case)
        named = "; ".join(f"{', '.join(cases)} ({change})" for change, cases in by_change.items())
        return [f"{len(changed)} case(s) of {self.config.resume} run again, not taken from it: their inputs "
                f"changed since it was logged: {named}"]

    def _budget_lines(self) -> list[str]:
        """A line when the run's budget was spent before every block ran as long as it needed."""
        from ..measure.blocks import RUN_BUDGET
        from ..measure.budget import describe_duration

        short = [row for row in self.results if row.get("timing_stop") == RUN_BUDGET]
        if not short or self.config.run_budget is None:
            return []
        blocks = len({row.get("block") for row in short})
        return [f"the run's budget (--specbench-budget, {describe_duration(self.config.run_budget)[6:]}) was spent: "
                f"{len(short)} case(s) in {blocks} block(s) ran only their {self.config.min_rounds} minimum rounds; "
                "a longer --specbench-budget (or off) times them to the interval target"]

    def _skipped_pair_lines(self) -> list[str]:
        """``pair: N case(s) skipped: reason`` for each pair whose selected cases were all skipped; the reason
        names what fixes it (the ``hf download`` of a missing model, the option)."""
        by_pair: dict[str, list[str]] = {}
        for case in self.cases:
            if case.id in self.selected or case.id in self.skipped_cases:
                by_pair.setdefault(case.pair.name, []).append(case.id)
        lines = []
        for pair, cases in by_pair.items():
            if not set(cases) <= self.skipped_cases:
                continue
            reasons = Counter(_without_prefix(self.skip_reasons.get(case, ""), pair) for case in cases)
            if len(reasons) == 1:
                lines.append(f"{pair}: {len(cases)} case(s) skipped: {next(iter(reasons))}")
            else:
                lines.append(f"{pair}: {len(cases)} case(s) skipped: " +
                             "; ".join(f"{reason} ({count} case(s))" for reason, count in reasons.most_common()))
        return lines


def _without_prefix(reason: str, pair: str) -> str:
    """A skip reason without pytest's ``Skipped: `` and the pair's own name, which the summary line starts with."""
    reason = reason.removeprefix("Skipped: ").strip()
    return reason.removeprefix(f"{pair}: ") or "no reason given"
