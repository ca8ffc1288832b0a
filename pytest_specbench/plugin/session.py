"""SpecbenchSession: the bookkeeping of one pytest session's benchmark run.

Built once in ``pytest_configure`` from the validated config. The plugin's hooks hand it what pytest reports
(collected items, test reports) and ask it to finish (files, gate, exit status) and to summarise; it knows no
hook. It keeps the case matrix, which cases were selected, began, failed or were skipped
(:class:`..results.tally.CaseTally`), and the row of each finished case.

On the controller (the only process without xdist) each row goes to the run's files as it arrives
(:class:`..results.run_files.RunFiles`: the results log, the locks, the run history, the CSV, JSON, report
and figures), with SIGTERM and SIGINT held back meanwhile (:mod:`.signals`), so a signal ends the run with
every finished case in the log, the CSV and the JSON. The summary's text is :mod:`..report.run_summary`'s,
the gate's outcome :func:`..results.gate.run_gate`'s.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..measure.matrix import Case, build_matrix, shard_pairs
from ..measure.pairs import PairSpec, all_pairs, select_pairs
from ..measure.prompts import Prompt, load_prompts, select_prompts
from ..measure.resume import Resume, load_resume
from ..results.log import new_run_id
from ..results.run_files import RunFiles
from ..results.tally import CaseTally
from ..settings.config import SpecbenchConfig
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
    prompts: list[Prompt]  # every prompt of the file: padding for --specbench-context-tokens uses them all
    cases: list[Case]
    availability: PairAvailability = field(repr=False)  # which pairs can run here, and which the user chose
    files: RunFiles = field(repr=False)  # the run's files; only the controller claims and writes them
    signals: SignalStop = field(default_factory=SignalStop, repr=False)  # active on the controller only
    baseline: dict[str, Any] | None = None  # the loaded baseline document, when gating
    resume: Resume = field(default_factory=Resume)  # the rows --specbench-resume replays, the cases it reruns
    tally: CaseTally = field(init=False)  # which cases were collected, selected, began, failed, skipped
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)  # by case id; a rerun replaces its row
    run_id: str = field(default_factory=new_run_id)  # the run_id of the rows this run measures
    began_at: float = field(default_factory=time.perf_counter, repr=False)  # the run's budget counts from here
    interrupted: str | None = None  # what ended the run early: a signal, a failure limit
    interrupted_while_writing: bool = False  # a signal came while the files were written (completed first)
    gate: GateOutcome | None = None  # the comparison with --specbench-baseline, once the run has ended

    def __post_init__(self) -> None:
        self.tally = CaseTally([case.id for case in self.cases])

    @classmethod
    def build(
        cls, config: SpecbenchConfig, rootdir: Path, controller: bool = True, command: str | None = None
    ) -> SpecbenchSession:
        """Raise ValueError (a usage error) for unknown pairs, categories, bad files or a log of other
        settings. ``rootdir`` is pytest's (its git commit names the run in the history), ``command`` the
        pytest command line."""
        defined = all_pairs(rootdir, config.pairs_file)  # every pair (built in, pyproject, pairs file)
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
        return cls(
            config=config,
            pairs=pairs,
            prompts=all_prompts,
            cases=cases,
            availability=PairAvailability(config, defined),
            files=RunFiles(config, command, rootdir),
            signals=SignalStop(active=controller),
            baseline=baseline,
            resume=load_resume(config, cases, all_prompts),
        )

    def release(self) -> None:
        """The end of the pytest run (also after a failure or a signal): put the signal handlers back and let the
        files' locks go. After a signal the handlers stay: the process is ending, and a further SIGTERM while
        Python shuts down would otherwise kill it (status 143) after the summary was printed."""
        if self.signals.received is None:
            self.signals.restore()
        self.files.release()

    # --- what pytest reports -----------------------------------------------------

    def unavailable_reason(self, pair: PairSpec, probe_hub: bool = True) -> str | None:
        return self.availability.unavailable_reason(pair, probe_hub)

    def chosen(self, pair: PairSpec) -> bool:
        return self.availability.chosen(pair)

    @property
    def case_ids(self) -> set[str]:
        return {case.id for case in self.cases}

    @property
    def selected(self) -> set[str]:
        """The cases this run will run, after -k/-m deselect."""
        return self.tally.selected

    def count_collected(self, has_case: Iterable[bool]) -> None:
        """Items collected before -k/-m deselect: lets the summary explain a selection that matched none."""
        self.tally.collected += sum(has_case)

    def select(self, case_ids: Iterable[str]) -> None:
        """The cases this run will run (after -k/-m), as each process (or xdist worker) collected them.

        From here on, on the controller, SIGTERM and SIGINT end the run cleanly.
        """
        self.tally.select(case_ids)
        if self.tally.selected:
            self.signals.install()

    def add_report(
        self,
        case_id: str,
        when: str,
        outcome: str,
        is_case: bool,
        properties: Sequence[tuple[str, Any]],
        skip_reason: str | None = None,
    ) -> None:
        """One test report: count the case, remember a failure or skip, keep (and log) the result row it carries."""
        with self.signals.held():
            self.tally.record(case_id, when, outcome, is_case, skip_reason)
            if when != "call":
                return
            for name, value in properties:
                if name == RESULT_KEY:
                    self.rows[value["case"]] = value
                    if value["case"] not in self.resume.rows:
                        value["run_id"] = self.run_id  # a replayed row keeps its own run's
                        self._start_log()
                        self.files.log_row(value)

    def _start_log(self) -> None:
        """The log's first line, with the selected cases and the resumed rows, at the run's first result."""
        if self.files.log_to_start:
            self.files.start_log(
                [case.id for case in self.cases if case.id in self.tally.selected],
                self.resume.rows.values(),
                self.resume.origins(set(self.resume.rows)),
            )

    def replay(self, case_id: str) -> dict[str, Any] | None:
        """The row --specbench-resume took from its log for ``case_id``: the case reports it instead of running."""
        return self.resume.rows.get(case_id)

    @property
    def results(self) -> list[dict[str, Any]]:
        """The rows in matrix order, whatever order xdist workers finished them in."""
        order = {case.id: index for index, case in enumerate(self.cases)}
        return sorted(self.rows.values(), key=lambda row: order.get(row["case"], len(order)))

    @property
    def replayed(self) -> list[str]:
        """Cases of this run whose result came from the resumed log."""
        return [row["case"] for row in self.results if row["case"] in self.resume.rows]

    @property
    def measured_here(self) -> bool:
        """A row was measured by this run, not only replayed: only such a run is a new run of the history."""
        return any(case not in self.resume.rows for case in self.rows)

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
            if not self.tally.measured_nothing(self.rows):
                if self.rows:
                    self._start_log()  # only resumed rows: the new log holds them, so it alone can resume this run
                self.files.end_log(self.tally.missing(self.rows), self.interrupted)
                failed |= self._write_files()
            if self.baseline is not None:
                failed |= self._gate()
            if self.signals.received and not self.interrupted:
                # Held back until the files were complete; the summary and the exit status still say so.
                self.interrupted, self.interrupted_while_writing = self.signals.received, True
            return failed or bool(self.files.errors)

    def _write_files(self) -> bool:
        """The run's document, written by report/outputs.py's table (the one ``merge`` writes too)."""
        from ..report import outputs
        from ..report.summary import environment, run_document

        document = run_document(
            self.results,
            self.config.raw,
            environment(),
            self.tally.missing(self.rows),
            interrupted=self.interrupted,
            resumed=self.replayed,
        )
        # Which machine measured which rows: the replayed ones keep the fingerprint of the run that measured them.
        document["resumed_from"] = self.resume.origins(set(self.replayed))
        return self.files.write(document, self.measured_here, outputs)

    def _gate(self) -> bool:
        from ..results.gate import run_gate

        settings = self.config
        self.gate = run_gate(
            self.baseline,
            self.results,
            settings.baseline,
            max_acceptance_drop=settings.max_acceptance_drop,
            max_speedup_drop=settings.max_speedup_drop,
            allow_missing=settings.allow_missing,
            config=settings,
        )
        return self.gate.failed

    def summary_sections(self) -> list[tuple[str, list[tuple[str, bool]]]]:
        """``(title, [(line, is_error), ...])`` sections for the terminal; none when nothing was benchmarked."""
        from ..report.run_summary import RunSnapshot, summary_sections

        return summary_sections(
            RunSnapshot(
                config=self.config,
                cases=self.cases,
                tally=self.tally,
                results=self.results,
                replayed=self.replayed,
                rerun=self.resume.rerun,
                measured_here=self.measured_here,
                interrupted=self.interrupted,
                interrupted_while_writing=self.interrupted_while_writing,
                files=self.files,
                gate=self.gate,
                empty_selection=lambda: self.availability.empty_selection_lines(self.pairs, self.cases),
            )
        )
