"""SpecbenchSession: the bookkeeping of one benchmark run, built by :func:`.session_inputs.build_session`.

The hooks hand it what pytest reports and ask it to finish and to summarise; it knows no hook. On the controller
each measured row is logged as it arrives, signals held back meanwhile (:mod:`.signals`), so a signal ends the
run with every finished case written. The files are :class:`..results.run_files.RunFiles`'s, the summary's text
:mod:`..report.run_summary`'s, the gate's outcome :func:`..results.gate.run_gate`'s.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..cases.matrix import Case
from ..cases.pairs import PairSpec
from ..cases.prompts import Prompt
from ..measure.resume import Resume
from ..results.run_files import RunFiles
from ..results.schema import CaseResult
from ..results.tally import CaseRows, CaseTally, RunEnding
from ..settings.config import SpecbenchConfig
from .availability import PairAvailability
from .signals import SignalStop


@dataclass
class SpecbenchSession:
    config: SpecbenchConfig
    pairs: list[PairSpec]  # the pairs this run selected
    prompts: list[Prompt]  # every prompt of the file: batches and --specbench-context-tokens padding draw on them
    cases: list[Case]  # the matrix, in order
    availability: PairAvailability = field(repr=False)  # which pairs can run here, and which the user chose
    files: RunFiles = field(repr=False)  # the run's files; only the controller claims and writes them
    signals: SignalStop = field(default_factory=SignalStop, repr=False)  # active on the controller only
    baseline: dict[str, Any] | None = None  # the loaded baseline document, when gating
    resume: Resume = field(default_factory=Resume)  # the rows --specbench-resume replays, the cases it reruns
    prompt_sample: str = ""  # which prompts of the file run, and how they were drawn: the summary's line
    tally: CaseTally = field(init=False)  # which cases were collected, selected, began, failed, skipped
    rows: CaseRows = field(init=False)  # the typed row of each finished case, measured here or replayed
    began_at: float = field(default_factory=time.perf_counter, repr=False)  # the run's budget counts from here
    ending: RunEnding = field(default_factory=RunEnding)  # what stopped the run early, the gate's outcome

    def __post_init__(self) -> None:
        order = [case.id for case in self.cases]
        self.tally = CaseTally(order)
        self.rows = CaseRows(order, replayable=self.resume.rows)

    def release(self) -> None:
        """The end of the pytest run: the signal handlers back (not after a signal: a further SIGTERM while
        Python shuts down would kill it), the files' locks let go."""
        if self.signals.received is None:
            self.signals.restore()
        self.files.release()

    # --- what pytest reports -----------------------------------------------------

    def count_collected(self, has_case: Iterable[bool]) -> None:
        """Items collected before -k/-m deselect: lets the summary explain a selection that matched none."""
        self.tally.collected += sum(has_case)

    def select(self, case_ids: Iterable[str]) -> None:
        """The cases this run will run (after -k/-m), as each process (or xdist worker) collected them. From here
        on, on the controller, SIGTERM and SIGINT end the run cleanly."""
        self.tally.select(case_ids)
        if self.tally.selected:
            self.signals.install()

    def add_report(
        self, case_id: str, when: str, outcome: str, is_case: bool, row: CaseResult | None, skip_reason: str | None
    ) -> None:
        """One test report: count the case, remember a failure or skip, keep the row it carries (logging it when
        this run measured it)."""
        with self.signals.held():
            self.tally.record(case_id, when, outcome, is_case, skip_reason)
            if when == "call" and row is not None and self.rows.add(row):
                self._start_log()
                self.files.log_row(row)

    def _start_log(self) -> None:
        """The log's first line, with the selected cases and the resumed rows, at the run's first result."""
        carried = self.resume.carried(self.tally.selected)
        self.files.start_log(self.tally.selected_in_order, carried.values(), self.resume.origins(set(carried)))

    def replay(self, case_id: str) -> CaseResult | None:
        """The row --specbench-resume took from its log for ``case_id``: the case reports it instead of running."""
        return self.resume.rows.get(case_id)

    # --- the end of the run ------------------------------------------------------

    def finish(self, interrupted: str | None = None) -> bool:
        """Write the files and run the gate; True when the run must fail (a file not written, a regression,
        a baseline refused). ``interrupted`` is what ended the run early, if anything did; a signal caught
        here says so itself. Signals are noted, not raised, until the files are written."""
        with self.signals.finishing():
            self.ending.interrupted = self.signals.received or interrupted
            failed = False
            # Once a case began, the files describe this run, even with no result: never an earlier run's files.
            # A run that measured nothing (every case skipped, none selected) writes nothing and replaces nothing.
            if not self.tally.measured_nothing(self.rows.by_case):
                if self.rows.by_case or self.ending.kept_rounds or self.files.rounds_kept():
                    # Only resumed rows, or only a stopped block's rounds: the new log holds them (the rounds in its
                    # rounds file), so it alone can resume this run.
                    self._start_log()
                missing = self.tally.missing(self.rows.by_case)
                self.files.end_log(missing, self.ending.interrupted, self.ending.lost_mid_block)
                failed |= self._write_files()
            if self.baseline is not None:
                failed |= self._gate()
            if self.signals.received and not self.ending.interrupted:
                # Held back until the files were complete; the summary and the exit status still say so.
                self.ending.interrupted, self.ending.while_writing = self.signals.received, True
            return failed or bool(self.files.errors)

    def _write_files(self) -> bool:
        """The run's document, composed here, and its files: report/outputs.py's table of them (the one ``merge``
        writes too), written by the run's files, then again in its history folder."""
        from ..report import outputs
        from ..report.summary import environment, run_document

        rows, files = self.rows, self.files
        missing, interrupted = self.tally.missing(rows.by_case), self.ending.interrupted
        document = run_document(
            rows.in_order(), self.config.raw, environment(), missing, interrupted=interrupted, resumed=rows.replayed
        )
        # Which machine measured which rows: the replayed ones keep the fingerprint of the run that measured them.
        document.resumed_from = self.resume.origins(set(rows.replayed))
        document.lost_mid_block = list(self.ending.lost_mid_block)
        document.history_entry = files.open_history(rows.measured_here)
        document.errors = list(files.errors)  # what went wrong so far (a log on a full disk)
        failed = files.write_outputs(outputs.outputs(files.output_paths(document), document, files.command))
        in_history = files.history_paths()
        if in_history is not None:
            document.errors = list(files.errors)
            files.save_in_history(outputs.outputs(in_history, document, files.command))
        return failed

    def _gate(self) -> bool:
        from ..results.gate import run_gate

        # The limits and --specbench-allow-missing are the config's.
        self.ending.gate = run_gate(self.baseline, self.rows.in_order(), self.config.baseline, config=self.config)
        return self.ending.gate.failed

    def summary_sections(self) -> list[tuple[str, list[tuple[str, bool]]]]:
        """``(title, [(line, is_error), ...])`` sections for the terminal; none when nothing was benchmarked."""
        from ..report.run_summary import RunSnapshot, summary_sections

        snapshot = RunSnapshot(
            config=self.config,
            cases=self.cases,
            tally=self.tally,
            rows=self.rows,
            rerun=self.resume.rerun,
            ending=self.ending,
            files=self.files,
            empty_selection=lambda: self.availability.empty_selection_lines(self.pairs, self.cases),
            left_out=self.availability.left_out(),
            prompt_sample=self.prompt_sample,
            unmatched_resume=self.resume.unmatched_line([case.id for case in self.cases]),
        )
        return summary_sections(snapshot)
