"""The bookkeeping of one run's cases: which were collected, selected, began, failed and were skipped
(:class:`CaseTally`: what tells the cases without a result from those nobody asked for, and a run that measured
nothing), the row of each finished case (:class:`CaseRows`), and how the run ended (:class:`RunEnding`)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .log import new_run_id
from .schema import CaseResult

if TYPE_CHECKING:
    from .gate import GateOutcome


@dataclass
class CaseTally:
    order: list[str]  # the matrix's case ids, in matrix order
    collected: int = 0  # specbench cases collected, before -k/-m deselect
    selected: set[str] = field(default_factory=set)  # cases to run, after -k/-m deselect
    began: set[str] = field(default_factory=set)  # cases whose setup ran (not skipped there)
    failed: set[str] = field(default_factory=set)
    skipped: dict[str, str] = field(default_factory=dict)  # by case id: why it was skipped

    def select(self, case_ids: Iterable[str]) -> None:
        """The cases this run will run, as each process (or xdist worker) collected them; ids not in the
        matrix are ignored."""
        known = set(self.order)
        self.selected.update(case_id for case_id in case_ids if case_id in known)

    @property
    def selected_in_order(self) -> list[str]:
        """The selected cases, in matrix order."""
        return [case_id for case_id in self.order if case_id in self.selected]

    def record(self, case_id: str, when: str, outcome: str, is_case: bool, skip_reason: str | None) -> None:
        """One test report's outcome (``is_case``: the test carries the specbench marker)."""
        if when == "setup" and is_case and outcome != "skipped":
            self.began.add(case_id)
        if case_id in self.order:
            if outcome == "failed":
                self.failed.add(case_id)  # a crashed worker's case arrives only as a failure
            elif outcome == "skipped":
                self.skipped[case_id] = skip_reason or "no reason given"

    def missing(self, finished: Collection[str]) -> list[str]:
        """Cases selected to run that left no result (not in ``finished``): failed before measuring, a crashed
        worker, or never reached because the run was interrupted. Skipped cases (built-in pairs nobody asked
        for) are not missing."""
        expected = self.selected or self.failed
        order = {case_id: index for index, case_id in enumerate(self.order)}
        return sorted(expected - set(finished) - set(self.skipped), key=lambda case_id: order.get(case_id, 0))

    def measured_nothing(self, finished: Collection[str]) -> bool:
        """No case began (all skipped, or none selected) and no result came: the run leaves every file as it
        was."""
        return not finished and not (self.began - set(self.skipped))

    @property
    def all_skipped(self) -> bool:
        """Cases were selected, and every one of them was skipped."""
        return bool(self.selected) and self.selected <= set(self.skipped)


@dataclass
class CaseRows:
    """The typed row of each finished case, by case id: measured by this run, or replayed from the log that
    ``--specbench-resume`` reads (a replayed row keeps the ``run_id`` of the run that measured it)."""

    order: list[str]  # the matrix's case ids, in matrix order
    replayable: Mapping[str, CaseResult] = field(default_factory=dict)  # the resumed log's rows, by case id
    run_id: str = field(default_factory=new_run_id)  # the run_id of the rows this run measures
    by_case: dict[str, CaseResult] = field(default_factory=dict)  # a rerun replaces its row

    def add(self, row: CaseResult) -> bool:
        """Keep ``row``; True when this run measured it (it then carries this run's id), False when replayed."""
        self.by_case[row.case] = row
        if row.case in self.replayable:
            return False
        row.run_id = self.run_id
        return True

    def in_order(self) -> list[CaseResult]:
        """The rows in matrix order, whatever order xdist workers finished them in."""
        position = {case_id: index for index, case_id in enumerate(self.order)}
        return sorted(self.by_case.values(), key=lambda row: position.get(row.case, len(position)))

    @property
    def replayed(self) -> list[str]:
        """The cases whose row came from the resumed log, in matrix order."""
        return [row.case for row in self.in_order() if row.case in self.replayable]

    @property
    def measured_here(self) -> bool:
        """A row was measured by this run, not only replayed: only such a run is a new run of the history."""
        return any(case_id not in self.replayable for case_id in self.by_case)


@dataclass
class RunEnding:
    """How the run ended: what stopped it early, if anything did, and the gate's outcome."""

    interrupted: str | None = None  # a signal, a failure limit (-x, --maxfail), Ctrl-C
    while_writing: bool = False  # the signal came while the files were written (they were completed first)
    # the cases of the block being timed when the run stopped: a block's cases finish together, so none has a row;
    # its finished rounds are in the rounds file (``kept_rounds`` of them), for a resume to go on from
    lost_mid_block: tuple[str, ...] = ()
    kept_rounds: int = 0
    gate: GateOutcome | None = None  # the comparison with --specbench-baseline, when one was given
