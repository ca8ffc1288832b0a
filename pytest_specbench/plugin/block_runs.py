"""Which cases a block times on this process, the run's plan over its budget, and each block's share of it.

The first case of a block to run times the whole block (every selected case of it not finished in a resumed
run); the others find their measurement here. Under xdist the block scheduler keeps a block on one worker;
where another scheduler may spread a block's cases over workers, each case is a block of its own.

Before the first block, the plan (measure/budget.py) estimates every block from a short probe of the models and
says what it expects; where the minimum rounds cannot fit the budget, it says so and what would, before anything
is timed. Before each block's rounds it re-plans with what the blocks so far took.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import pytest

from ..cases.matrix import Case
from ..measure.blocks import BLOCK_BUDGET, RUN_BUDGET
from ..measure.budget import RunPlan, describe_duration, fitting_options
from ..measure.case_run import MeasureContext
from ..measure.cost_estimate import ASSUMED_ACCEPTANCE, estimate_blocks
from ..measure.kept_rounds import RoundKeeper
from ..measure.row import Measurement
from ..measure.runner import BlockPlan, BlockShare, measure_block
from ..models.base import NotApplicable
from ..results.round_log import rounds_path
from ..settings.config import result_settings
from .session import SpecbenchSession

#: the share of the budget the default matrix keeps beyond its minimum rounds, for the blocks whose noise needs
#: more (on the AVX2 cap a repetitive prompt's block needed 6 rounds where the others needed 2)
DEFAULT_RESERVE = 0.2
#: the options that choose the matrix: where the user gave none of them, the run may leave k out to fit
MATRIX_OPTIONS = frozenset({"ks", "dtypes", "pairs", "prompt_categories", "prompts_per_category", "batches"})


class BudgetCannotFit(Exception):
    """The selected cases' minimum rounds cannot fit the run's budget; the message says what would."""


class BlockRuns:
    def __init__(
        self,
        session: SpecbenchSession,
        worker: tuple[str | None, int],
        write_line: Callable[[str], None] | None = None,
        whole_blocks: bool = True,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._session = session
        self._whole_blocks = whole_blocks
        self._outcomes: dict[str, Measurement | BaseException] = {}
        self._write_line = write_line
        self._workers = max(worker[1], 1)
        self._controller = worker[0] is None
        self._clock = clock
        self._plan: RunPlan | None = None
        self.left_out: dict[str, str] = {}  # case id: why the plan left it out
        self._timed: set[str] = set()  # cases whose block this process timed
        self._keeper: RoundKeeper | None = None

    def _pending(self) -> list[Case]:
        session = self._session
        return [
            case
            for case in session.cases
            if case.id in session.tally.selected
            and case.id not in self.left_out
            and session.replay(case.id) is None
            and (session.availability.chosen(case.pair) or session.availability.unavailable_reason(case.pair) is None)
        ]

    def members(self, case: Case) -> list[Case]:
        """The cases timed with ``case``: its block's selected cases not measured yet (itself at least)."""
        if not self._whole_blocks:
            return [case]
        members = [other for other in self._pending() if other.block == case.block and other.id not in self._outcomes]
        return members if case in members else [case, *members]

    def plan(self, context: MeasureContext) -> RunPlan:
        """The run's plan over the blocks this process will time, made once, before the first block (it loads
        and probes the models the run needs); raises :class:`BudgetCannotFit` where even the minimum overruns."""
        if self._plan is None:
            config = self._session.config
            store = context.store
            store.load_smaller_dtypes_first((case.pair, store.dtype_for(case)) for case in self._pending())
            estimates = estimate_blocks(self._pending(), context)
            self._plan = RunPlan(
                config.run_budget,
                estimates.blocks,
                config.min_rounds,
                config.max_rounds,
                config.ci_target,
                workers=self._workers,
                clock=self._clock,
                started=self._session.began_at,
            )
            self._fit(self._plan)
            self._say(self._plan_line(self._plan, estimates.steps_s))
        return self._plan

    def measurement(self, case: Case, store, shared) -> Measurement:
        """The case's measurement, timing its block first if no case of it has run; raises what stopped it."""
        if case.id in self.left_out:
            raise NotApplicable(self.left_out[case.id])
        if case.id not in self._outcomes:
            context = MeasureContext(store, shared, self._session.config, self._session.prompts)
            try:
                plan = self.plan(context)
            except BudgetCannotFit as error:
                pytest.exit(str(error), returncode=pytest.ExitCode.USAGE_ERROR)
            if case.id in self.left_out:
                raise NotApplicable(self.left_out[case.id])
            members = self.members(case)
            overrun = plan.overrun_if_timed(case.block)
            if overrun:
                self.left_out.update((member.id, overrun) for member in members)
                raise NotApplicable(overrun)
            self._outcomes.update(self._time(members, context, plan))
            self._timed.update(member.id for member in members)
            # What no later block needs is freed: a dtype's models after its last block.
            store.release(
                (later.pair, store.dtype_for(later)) for later in self._pending() if later.id not in self._timed
            )
        outcome = self._outcomes.pop(case.id)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def _time(
        self, cases: list[Case], context: MeasureContext, plan: RunPlan
    ) -> dict[str, Measurement | BaseException]:
        block = cases[0].block
        start = self._clock()
        setup: list[float] = []
        first_round: list[float] = []

        def share() -> BlockShare:
            setup.append(self._clock() - start)
            seconds = plan.share_s(block)
            return BlockShare(seconds, RUN_BUDGET if plan.spent_at_block is not None else BLOCK_BUDGET)

        def after_round(index: int, seconds: float) -> None:
            if index == 0:
                first_round.append(seconds)

        outcomes: dict[str, Measurement | BaseException] = {}
        try:
            outcomes = measure_block(
                cases, context, BlockPlan(share=share, after_round=after_round, keeper=self._round_keeper())
            )
            return outcomes
        except KeyboardInterrupt:  # a signal mid-block: its cases finish together, so none of them finished
            self._session.ending.lost_mid_block = tuple(case.id for case in cases)
            self._session.ending.kept_rounds = self._round_keeper().kept.get(block, 0)
            raise
        finally:
            plan.record(
                block,
                setup[0] if setup else self._clock() - start,
                first_round[0] if first_round else None,
                _noise(outcomes.values()),
            )

    def _round_keeper(self) -> RoundKeeper:
        """Each finished round to the log's rounds file; the rounds of the log being resumed, offered."""
        if self._keeper is None:
            config, resume = self._session.config, self._session.resume
            path = rounds_path(config.log_path) if config.log_path is not None else None
            source = rounds_path(config.resume) if config.resume is not None else None
            self._keeper = RoundKeeper(path, result_settings(config), resume.rounds, source)
        return self._keeper

    # --- what the plan says and chooses

    def _say(self, line: str) -> None:
        if self._write_line is not None:
            self._write_line(f"pytest-specbench: {line}")

    def _plan_line(self, plan: RunPlan, steps_s: dict[str, float]) -> str:
        config = self._session.config
        cases = sum(len(block.cases) for block in plan.blocks.values())
        budget = "no budget" if config.run_budget is None else f"budget {describe_duration(config.run_budget)[6:]}"
        rounds = sorted({plan.rounds_needed(len(block.cases)) for block in plan.blocks.values()}) or [config.min_rounds]
        needed = f"{rounds[0]}" if len(rounds) == 1 else f"{rounds[0]} to {rounds[-1]}"
        probed = ", ".join(f"{name} {1000 * seconds:.0f} ms" for name, seconds in steps_s.items())
        return (
            f"plan: {describe_duration(plan.expected_s())} for {cases} cases in {len(plan.blocks)} blocks ({budget}; "
            f"at least {describe_duration(plan.minimum_s())[6:]} at {config.min_rounds} rounds a block). "
            f"Assumed: {needed} rounds a block for +/-{config.ci_target:.0%} (per-round noise {plan.noise:.0%}), "
            f"acceptance {ASSUMED_ACCEPTANCE}, a decode step of {probed or 'no target'}; "
            f"{describe_duration(plan.elapsed_s())[6:]} spent loading and probing"
        )

    def _fit(self, plan: RunPlan) -> None:
        """Where the user chose no matrix: leave out the largest k until the minimum rounds leave a reserve of the
        budget (else until they fit), saying which. Where the minimum cannot fit a chosen matrix: stop before
        timing, saying the minimum and which selections would fit."""
        if not self._controller:
            return
        config = self._session.config
        default = not (config.given & MATRIX_OPTIONS)
        if plan.fits(DEFAULT_RESERVE if default else 0.0):
            return
        ks = sorted(dict.fromkeys(case.k for case in plan.cases()), key=_k_order)  # largest last, schedules after
        minimum = describe_duration(plan.minimum_s())[6:]
        for reserve in (DEFAULT_RESERVE, 0.0) if default else ():
            if reserve == 0.0 and plan.fits():
                return
            for count in range(len(ks) - 1, 1, -1):
                kept = set(ks[:count])
                if plan.fitting(lambda case: case.k in kept, reserve):
                    self._leave_out(plan, kept, minimum, reserve)
                    return
        options = fitting_options(
            plan,
            ks,
            list(dict.fromkeys(case.dtype for case in plan.cases())),
            list(dict.fromkeys(case.pair for case in plan.cases())),
            list(dict.fromkeys(case.prompt for case in plan.cases())),
        )
        raise BudgetCannotFit(
            f"pytest-specbench: the selected cases need at least {minimum} at {config.min_rounds} rounds a block "
            f"(estimated from a probe of each model), more than the budget "
            f"(--specbench-budget, {describe_duration(config.run_budget or 0)[6:]}) with one block's minimum rounds "
            f"past it; nothing was timed. "
            f"Would fit: {'; '.join(options)}; or --specbench-min-rounds lower, or --specbench-budget=none"
        )

    def _leave_out(self, plan: RunPlan, kept: set[str], minimum: str, reserve: float) -> None:
        config = self._session.config
        dropped = [k for k in dict.fromkeys(case.k for case in plan.cases()) if k not in kept]
        budget = f"the run's budget (--specbench-budget, {describe_duration(config.run_budget or 0)[6:]})"
        why = (
            f"every k needed at least {minimum} of {budget} at the minimum rounds, leaving less than "
            f"{reserve:.0%} of it for the blocks that need more"
            if reserve
            else f"every k needed at least {minimum}, more than {budget}"
        )
        reason = f"left out of the default matrix: {why}; name k with --specbench-k to choose"
        for block in list(plan.blocks.values()):
            for case in block.cases:
                if case.k not in kept:
                    self.left_out[case.case_id] = reason
            smaller = block.only(lambda case: case.k in kept)
            if smaller is None:
                del plan.blocks[block.block]
            else:
                plan.blocks[block.block] = smaller
        self._say(
            f"timing k={','.join(sorted(kept, key=_k_order))} and leaving out k={','.join(dropped)}: {why} "
            f"(now at least {describe_duration(plan.minimum_s())[6:]})"
        )


def _k_order(k: str) -> tuple[int, str]:
    return (int(k), "") if k.isdigit() else (math.inf, k)  # type: ignore[return-value]


def _noise(outcomes) -> float | None:
    """The per-round noise a block's rounds showed (its pooled decode spread), if any case had one."""
    for outcome in outcomes:
        spreads = getattr(outcome, "spreads", None)
        if spreads and spreads[1] is not None:
            return spreads[1].sd
    return None
