"""Which cases of a run's matrix were collected, selected, began, failed and were skipped: what tells the
cases without a result (missing) from those nobody asked for (skipped), and a run that measured nothing."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field


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
