"""Which cases a block times on this process, its share of the run's budget, and the run's estimate.

The first case of a block to run times the whole block (every selected case of it not finished in a resumed
run); the others find their measurement here. Under xdist the block scheduler keeps a block on one worker;
where another scheduler may spread a block's cases over workers, each case is a block of its own.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

from ..measure.blocks import BLOCK_BUDGET, RUN_BUDGET
from ..measure.budget import RunBudget, block_weight, describe_duration
from ..measure.case_run import MeasureContext
from ..measure.matrix import Case
from ..measure.row import Measurement
from ..measure.runner import BlockPlan, measure_block
from .session import SpecbenchSession


class BlockRuns:
    def __init__(
        self,
        session: SpecbenchSession,
        worker: tuple[str | None, int],
        write_line: Callable[[str], None] | None = None,
        whole_blocks: bool = True,
    ) -> None:
        self._session = session
        self._whole_blocks = whole_blocks
        self._outcomes: dict[str, Measurement | BaseException] = {}
        self._write_line = write_line
        self._estimated = False
        self._workers = max(worker[1], 1)
        self._budget: RunBudget | None = None

    @property
    def budget(self) -> RunBudget:
        """The run's budget over the blocks that will be timed, counted once collection is over (at the first
        case): a pair skipped for a missing model times nothing, so its blocks take no share."""
        if self._budget is None:
            pending = self._pending()
            members = Counter(case.block for case in pending)
            batches = {case.block: case.batch for case in pending}
            weights = {block: block_weight(count, batches[block]) for block, count in members.items()}
            self._budget = RunBudget(
                self._session.config.run_budget,
                math.ceil(len(members) / self._workers),
                started=self._session.began_at,
                weights=weights,
            )
        return self._budget

    def _pending(self) -> list[Case]:
        session = self._session
        return [
            case
            for case in session.cases
            if case.id in session.tally.selected
            and session.replay(case.id) is None
            and (session.availability.chosen(case.pair) or session.availability.unavailable_reason(case.pair) is None)
        ]

    def members(self, case: Case) -> list[Case]:
        """The cases timed with ``case``: its block's selected cases not measured yet (itself at least)."""
        if not self._whole_blocks:
            return [case]
        members = [other for other in self._pending() if other.block == case.block and other.id not in self._outcomes]
        return members if case in members else [case, *members]

    def measurement(self, case: Case, store, shared) -> Measurement:
        """The case's measurement, timing its block first if no case of it has run; raises what stopped it."""
        if case.id not in self._outcomes:
            self._outcomes.update(self._time(self.members(case), store, shared))
        outcome = self._outcomes.pop(case.id)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def _time(self, cases: list[Case], store, shared) -> dict[str, Measurement | BaseException]:
        block = cases[0].block
        share = self.budget.share_s(block)
        spent = self.budget.spent_at_block is not None
        plan = BlockPlan(
            budget_s=share,
            budget_reason=RUN_BUDGET if spent else BLOCK_BUDGET,
            after_round=self._after_round(len(cases), block),
        )
        try:
            context = MeasureContext(store, shared, self._session.config, self._session.prompts)
            return measure_block(cases, context, plan)
        except KeyboardInterrupt:  # a signal mid-block: its cases finish together, so none of them finished
            self._session.ending.lost_mid_block = tuple(case.id for case in cases)
            raise
        finally:
            self.budget.block_done(block)

    def _after_round(self, block_cases: int, block: str) -> Callable[[int, float], None] | None:
        if self._estimated or self._write_line is None:
            return None

        def estimate(index: int, seconds: float) -> None:
            if self._estimated:
                return
            self._estimated = True
            config = self._session.config
            total = self.budget.estimate_s(seconds, config.min_rounds, config.max_rounds, block)
            cases = len(self._pending())
            budget = "no budget" if config.run_budget is None else f"budget {describe_duration(config.run_budget)[6:]}"
            over = (
                "; the blocks' minimum rounds (--specbench-min-rounds) need more than the budget"
                if config.run_budget is not None and total > 1.1 * config.run_budget
                else ""
            )
            self._write_line(
                f"pytest-specbench: {describe_duration(total)} for {cases} cases in "
                f"{self.budget.blocks} blocks ({budget}; a round of the first block, {block_cases} "
                f"cases and their baselines, took {seconds:.1f} s{over})"
            )

        return estimate
