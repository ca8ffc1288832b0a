"""SpecbenchSession: one pytest session's benchmark run, from the case matrix to the files and the gate.

Built once in ``pytest_configure`` from the validated config. The plugin's
hooks hand it what pytest reports (collected items, test reports) and ask it
to finish (files, gate, exit status) and to summarise; it knows no hook.

On the controller (the only process without xdist) it also keeps the results
log, appending each finished case as it arrives, and holds SIGTERM and SIGINT
back while it does (:mod:`.signals`), so a signal ends the run with every
finished case in the log, the CSV and the JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..settings.config import SpecbenchConfig, result_settings
from ..measure.matrix import Case, build_matrix, shard_pairs
from ..measure.pairs import PairSpec, all_pairs, select_pairs
from ..measure.prompts import Prompt, load_prompts, select_prompts
from ..results.log import ResultsLog, read_log, settings_differences
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
    controller: bool = True  # False on an xdist worker: no log, no signal handling, no files
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)  # by case id; a rerun replaces its row
    cases_collected: int = 0  # specbench cases collected, before -k/-m deselect
    cases_run: int = 0
    selected: set[str] = field(default_factory=set)  # cases to run, after -k/-m deselect
    failed_cases: set[str] = field(default_factory=set)
    skipped_cases: set[str] = field(default_factory=set)
    interrupted: str | None = None  # what ended the run early: a signal, a failure limit
    written: list[Path] = field(default_factory=list)
    write_errors: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)  # outputs deliberately not written, and why
    gate: GateOutcome | None = None  # the comparison with --specbench-baseline, once the run has ended
    command: str | None = None  # the pytest command line, for the report
    signals: SignalStop = field(default_factory=SignalStop, repr=False)
    availability: PairAvailability = field(init=False, repr=False)
    _log: ResultsLog | None = field(default=None, repr=False)

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
            from ..results.gate import load_baseline

            baseline = load_baseline(config.baseline)
        resumed = {}
        if config.resume is not None:
            log = read_log(config.resume)
            differences = settings_differences(log.settings, result_settings(config))
            if differences:
                raise ValueError(f"--specbench-resume={config.resume}: the log was measured with other settings "
                                 f"({'; '.join(differences)}); resume with the options of the run it logged")
            resumed = log.rows
        session = cls(config=config, pairs=pairs, defined=defined, prompts=all_prompts,
                      cases=build_matrix(pairs, config.ks, prompts, config.engines), baseline=baseline, resumed=resumed,
                      controller=controller)
        if controller and config.log_path is not None:
            session._log = ResultsLog(config.log_path, result_settings(config))
        return session

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
                   properties: Sequence[tuple[str, Any]]) -> None:
        """One test report: count the case, remember a failure or skip, keep (and log) the result row it carries."""
        with self.signals.held():
            if when == "setup" and is_case:
                self.cases_run += 1
                if self._log is not None and not self._log.started:
                    # The first case begins: a new log, holding the resumed rows, so it alone can resume this run.
                    self._log_safely(lambda: self._log.start(self.resumed.values()))
            if case_id in self.case_ids:
                if outcome == "failed":
                    self.failed_cases.add(case_id)  # a crashed worker's case arrives only as a failure
                elif outcome == "skipped":
                    self.skipped_cases.add(case_id)
            if when != "call":
                return
            for name, value in properties:
                if name == RESULT_KEY:
                    self.rows[value["case"]] = value
                    if self._log is not None and self._log.started and value["case"] not in self.resumed:
                        self._log_safely(lambda: self._log.append(value))

    def _log_safely(self, write: Callable[[], None]) -> None:
        """A log that cannot be written (a full disk) must not cost the run: say so, stop logging, go on."""
        try:
            write()
        except OSError as error:
            self.write_errors.append(f"could not write the results log {self._log.path}: {error}; "
                                     "it stops here, the CSV and JSON still hold every finished case")
            self._log.close()
            self._log = None

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

    # --- the end of the run ------------------------------------------------------

    def finish(self, interrupted: str | None = None) -> bool:
        """Write the files and run the gate; True when the run must fail (a file not written, a regression,
        a baseline refused). ``interrupted`` is what ended the run early, if anything did; a signal caught
        here says so itself. Signals are noted, not raised, until the files are written."""
        with self.signals.finishing():
            self.interrupted = self.signals.received or interrupted
            if self._log is not None and self._log.started:
                self._log.close()
                self.written.append(self._log.path)
            failed = False
            # Once a case began, the files describe this run, even with no result: never an earlier run's files.
            if self.results or self.cases_run:
                failed |= self._write_outputs()
            if self.baseline is not None:
                failed |= self._gate()
            return failed

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
        written, errors = write_outputs(paths, document, self.command)
        self.written += written
        self.write_errors += errors
        return bool(refusal or errors)

    def _gate(self) -> bool:
        from ..results.gate import run_gate

        settings = self.config
        self.gate = run_gate(self.baseline, self.results, settings.baseline, max_acceptance_drop=settings.max_acceptance_drop,
                             max_speedup_drop=settings.max_speedup_drop, allow_missing=settings.allow_missing)
        return self.gate.failed

    def summary_sections(self) -> list[tuple[str, list[tuple[str, bool]]]]:
        """``(title, [(line, is_error), ...])`` sections for the terminal; none when nothing was benchmarked."""
        if not (self.cases_collected or self.cases_run or self.rows or self.gate or self.refusals):
            return []
        from ..report.summary import summary_lines

        if self.cases_collected and not self.cases_run and not self.interrupted:
            lines = [(line, False) for line in self.availability.empty_selection_lines(self.pairs, self.cases)]
        else:
            lines = [(line, False) for line in summary_lines(self.results, self.config.ci_target)]
        if self.replayed:
            lines.append((f"{len(self.replayed)} case(s) taken from {self.config.resume}, not run again", False))
        if self.interrupted:
            lines.append((f"run interrupted ({self.interrupted}) with {len(self.rows)} of "
                          f"{len(self.selected) or len(self.rows)} case(s) finished", True))
        if self.missing:
            lines.append((f"no result for {len(self.missing)} case(s): {', '.join(self.missing)}",
                          bool(self.interrupted)))
            if self.config.log_path is not None and self.rows:
                lines.append((f"to run only those: the same command with --specbench-resume={self.config.log_path}",
                              False))
        lines += [(f"results written to {path}", False) for path in self.written]
        lines += [(line, True) for line in self.refusals + self.write_errors]
        sections = [("specbench summary", lines)]
        if self.gate is not None:
            sections.append(("specbench gate", [(line, False) for line in self.gate.lines]))
        return sections
