"""Blocked rounds: the cases that share a target, a prompt and a device are timed together.

A block (:attr:`..matrix.Case.block`) is timed in rounds. Each round runs the target-only baseline once and the
speculative decode of every case still being timed once, in an order that rotates from round to round, so drift
hits all alike. A case's speedups are paired with the baselines of the rounds it ran in. Within a (pair, engine,
prompt) the constant k race (:mod:`..results.racing`): one slower than the leader at 95% stops being timed and
is marked eliminated. A case also stops once its intervals are within the target (or its own budget, when given,
is spent). The block stops when no case is left, at max rounds, or when its share of the run's budget is spent,
never below min rounds.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..engine.stats import GenerationResult
from ..results.racing import eliminations
from ..settings.config import SpecbenchConfig
from .matrix import Case
from .timing import precision

#: the race's family-wise false-elimination rate within one (pair, engine, prompt), over all its looks
RACE_ALPHA = 0.05
#: why a case stopped being timed (the row's ``timing_stop``)
TIGHT, ELIMINATED, CASE_BUDGET, BLOCK_BUDGET, RUN_BUDGET, MAX_ROUNDS = (
    "tight", "eliminated", "case budget", "block budget", "run budget", "max rounds")


@dataclass
class TimedCase:
    """One case of a block: how to run it once, and what its rounds gave."""

    case: Case
    run: Callable[[], GenerationResult]
    rounds: list[int] = field(default_factory=list)  # the block rounds it ran in
    runs: list[GenerationResult] = field(default_factory=list)
    eliminated_by: int | str | None = None
    stop: str | None = None  # None while it is still timed


@dataclass
class BlockTiming:
    """The rounds of one block: the baseline of each round that ran one, and every case's runs."""

    cases: list[TimedCase]
    baselines: dict[int, GenerationResult] = field(default_factory=dict)
    rounds: int = 0
    seconds: float = 0.0

    def case_baselines(self, timed: TimedCase, paired: bool) -> list[GenerationResult]:
        """The baselines a case's speedups compare with: of its own rounds when paired, else all."""
        if paired:
            return [self.baselines[index] for index in timed.rounds]
        return [self.baselines[index] for index in sorted(self.baselines)]


def _rotated(items: list, shift: int) -> list:
    shift %= max(len(items), 1)
    return items[shift:] + items[:shift]


def time_block(cases: Sequence[TimedCase], run_baseline: Callable[[], GenerationResult], config: SpecbenchConfig,
               budget_s: float | None, budget_reason: str = BLOCK_BUDGET,
               after_round: Callable[[int, float], None] | None = None) -> BlockTiming:
    """Time the block's rounds; ``budget_s`` is its share of the run's budget (None: no limit).

    ``after_round(round index, seconds it took)`` is called after each round (the run's estimate uses the first).
    """
    block = BlockTiming(list(cases))
    paired = not config.baseline_once
    start = time.perf_counter()
    while True:
        active = [timed for timed in block.cases if timed.stop is None]
        if not active:
            break
        elapsed = time.perf_counter() - start
        if block.rounds >= config.max_rounds:
            _stop_all(active, MAX_ROUNDS)
            break
        if block.rounds >= config.min_rounds and budget_s is not None and \
                elapsed + elapsed / block.rounds > budget_s:
            _stop_all(active, budget_reason)
            break
        index = block.rounds
        with_baseline = paired or index < config.min_rounds
        order: list = ([None] if with_baseline else []) + active
        round_start = time.perf_counter()
        for timed in _rotated(order, index):
            if timed is None:
                block.baselines[index] = run_baseline()
            else:
                timed.runs.append(timed.run())
                timed.rounds.append(index)
        block.rounds += 1
        if after_round is not None:
            after_round(index, time.perf_counter() - round_start)
        if block.rounds >= config.min_rounds:
            _settle(block, config, paired)
    block.seconds = time.perf_counter() - start
    return block


def _stop_all(active: list[TimedCase], reason: str) -> None:
    for timed in active:
        timed.stop = reason


def _settle(block: BlockTiming, config: SpecbenchConfig, paired: bool) -> None:
    """After a round: stop the cases that are tight or over their own budget, then race the rest."""
    for timed in block.cases:
        if timed.stop is not None:
            continue
        baselines = block.case_baselines(timed, paired)
        if precision(baselines, timed.runs, paired) <= config.ci_target:
            timed.stop = TIGHT
        elif config.case_budget is not None:
            spent = sum(run.stats.wall_time_s for run in [*timed.runs, *(baselines if paired else [])])
            if spent + spent / len(timed.runs) > config.case_budget:
                timed.stop = CASE_BUDGET
    looks = race_looks(config.min_rounds, config.max_rounds)
    if config.race and block.rounds in looks:
        for members in _races(block.cases).values():
            _race(members, config, len(looks))


def _races(cases: Sequence[TimedCase]) -> dict[tuple, list[TimedCase]]:
    """The constant-k cases of each (pair, engine, prompt), eliminated ones included: a schedule races nothing."""
    races: dict[tuple, list[TimedCase]] = defaultdict(list)
    for timed in cases:
        case = timed.case
        if isinstance(case.k, int):
            races[(case.pair.name, case.engine, case.prompt.id)].append(timed)
    return {key: members for key, members in races.items() if len(members) > 1}


def race_looks(min_rounds: int, max_rounds: int) -> list[int]:
    """The rounds after which the race tests: from min rounds on, each about 1.5 times the one before, and the
    last round. Few planned looks keep each one's share of the 5% (Bonferroni over looks) large enough to act on."""
    looks, at = [], max(min_rounds, 2)
    while at < max_rounds:
        looks.append(at)
        at = max(at + 1, round(at * 1.5))
    return [*looks, max_rounds] if max_rounds >= max(min_rounds, 2) else looks


def _race(members: list[TimedCase], config: SpecbenchConfig, looks: int) -> None:
    contenders = [timed for timed in members if timed.eliminated_by is None]
    times = {timed.case.k: dict(zip(timed.rounds, (run.stats.time_per_decode_token_s for run in timed.runs)))
             for timed in contenders}
    # The family is every k the race started with; each of the planned looks spends its share of the 5%.
    beaten = eliminations(times, alpha=RACE_ALPHA, min_rounds=max(config.min_rounds, 2), max_looks=looks,
                          family=len(members))
    for timed in contenders:
        if timed.case.k in beaten:
            timed.eliminated_by = beaten[timed.case.k]
            timed.stop = ELIMINATED
