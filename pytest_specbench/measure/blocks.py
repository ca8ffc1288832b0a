"""Blocked rounds: the cases that share a target, a prompt and a device are timed together.

A block (:attr:`..cases.matrix.Case.block`) is timed in rounds, each running every case still being timed once, in an
order that rotates. Each run is paired with its baseline as the block's pairing says (:mod:`.pairing`):
``interleaved`` runs target-only greedy steps between the run's own (:mod:`..engine.interleave`), so both are timed
over the same seconds of a machine whose speed changes within a second; ``rounds`` runs whole baselines between
the cases and interpolates them in time. The intervals pool the noise over the block's cases
(:func:`.speedup_intervals.block_spreads`), and the constant k race (:mod:`..results.racing`) stops timing a k
slower than the leader. A case also stops once its intervals are within the target or its own budget is spent; the
block stops when no case is left, at max rounds or when its share of the run's budget is spent, never below min
rounds. Why each: docs/measuring.md, "Timing".
"""

from __future__ import annotations

import dataclasses
import math
import time
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..cases.matrix import Case
from ..engine.interleave import InterleavedBaseline
from ..engine.stats import GenerationResult
from ..results.racing import eliminations
from ..settings.config import SpecbenchConfig
from .pairing import OWN_BASELINE, Pairing
from .speedup_intervals import NO_SPREADS, Spreads, block_spreads, precision

#: the race's family-wise false-elimination rate within one (pair, engine, prompt), over all its looks
RACE_ALPHA = 0.05
#: why a case stopped being timed (the row's ``timing_stop``)
TIGHT, ELIMINATED, CASE_BUDGET, BLOCK_BUDGET, RUN_BUDGET, MAX_ROUNDS = (
    "tight",
    "eliminated",
    "case budget",
    "block budget",
    "run budget",
    "max rounds",
)


@dataclass
class TimedCase:
    """One case of a block: how to run it once, and what its rounds gave."""

    case: Case
    run: Callable[..., GenerationResult]  # takes ``between_steps`` where the block's pairing interleaves
    rounds: list[int] = field(default_factory=list)  # the block rounds it ran in
    runs: list[GenerationResult] = field(default_factory=list)
    # Per run, the baseline it is paired with (interpolated in time); empty where rounds ran no baseline.
    paired_baselines: list[GenerationResult] = field(default_factory=list)
    eliminated_by: int | str | None = None
    stop: str | None = None  # None while it is still timed
    # Its own baseline, where the block's cases do not share one (a served engine's block holds several prompts).
    baseline: Callable[[], GenerationResult] | None = None


class RoundStrategy(ABC):
    """How a block's rounds time its baseline beside its cases' runs: one object per pairing kind (:mod:`.pairing`),
    chosen once per block by :func:`round_strategy`."""

    #: each run is compared with a baseline of its own (interleaved or interpolated), not with them all
    paired: bool = True

    @abstractmethod
    def run_round(self, block: BlockTiming, index: int, order: list[TimedCase]) -> None:
        """Run one round of ``order`` (the active cases, rotated), recording runs and baselines in ``block``."""

    def case_baselines(self, block: BlockTiming, timed: TimedCase) -> list[GenerationResult]:
        """The baselines a case's speedups compare with: its paired ones, one per run."""
        return list(timed.paired_baselines)


@dataclass
class InterleavedRounds(RoundStrategy):
    """Each case's run with its own baseline timed between its steps."""

    new_interleaved: Callable[[], InterleavedBaseline]

    def run_round(self, block: BlockTiming, index: int, order: list[TimedCase]) -> None:
        _run_interleaved_round(block, index, order, self.new_interleaved)


@dataclass
class WholeBaselineRounds(RoundStrategy):
    """Whole baseline runs between the cases, each run paired with the baseline interpolated in time."""

    run_baseline: Callable[[], GenerationResult]
    every: int

    def run_round(self, block: BlockTiming, index: int, order: list[TimedCase]) -> None:
        _run_round(block, index, order, self.every, self.run_baseline)


@dataclass
class OwnBaselineRounds(RoundStrategy):
    """Each case's run right after a baseline run of its own input: the block's cases decode different prompts (a
    served engine's block), so no baseline serves them all."""

    def run_round(self, block: BlockTiming, index: int, order: list[TimedCase]) -> None:
        baselines = []
        for timed in order:
            baseline = timed.baseline()
            baselines.append(baseline)
            timed.runs.append(timed.run())
            timed.rounds.append(index)
            timed.paired_baselines.append(baseline)
        block.baselines[index] = baselines


@dataclass
class BaselineOnceRounds(RoundStrategy):
    """``--specbench-baseline-once``: one baseline per round in the first rounds, every run compared with them all
    (unpaired)."""

    run_baseline: Callable[[], GenerationResult]
    min_rounds: int
    paired = False

    def run_round(self, block: BlockTiming, index: int, order: list[TimedCase]) -> None:
        if index < self.min_rounds:
            block.baselines[index] = [self.run_baseline()]
        for timed in order:
            timed.runs.append(timed.run())
            timed.rounds.append(index)

    def case_baselines(self, block: BlockTiming, timed: TimedCase) -> list[GenerationResult]:
        """Every baseline run of the block."""
        return [run for index in sorted(block.baselines) for run in block.baselines[index]]


def round_strategy(
    pairing: Pairing,
    run_baseline: Callable[[], GenerationResult] | None,
    config: SpecbenchConfig,
    new_interleaved: Callable[[], InterleavedBaseline] | None = None,
) -> RoundStrategy:
    """The strategy of ``pairing``'s kind; an interleaved one takes ``new_interleaved``, a fresh interleaved
    baseline per call; every kind but ``own-baseline`` (each case's :attr:`TimedCase.baseline`) takes
    ``run_baseline``, the block's."""
    if pairing.kind == OWN_BASELINE:
        return OwnBaselineRounds()
    if run_baseline is None:
        raise ValueError(f"a block of pairing {pairing.kind} needs run_baseline, its cases' shared baseline")
    if pairing.interleaved:
        if new_interleaved is None:
            raise ValueError("an interleaved pairing needs new_interleaved, a fresh interleaved baseline per call")
        return InterleavedRounds(new_interleaved)
    if pairing.paired:
        return WholeBaselineRounds(run_baseline, config.baseline_every)
    return BaselineOnceRounds(run_baseline, config.min_rounds)


@dataclass
class BlockTiming:
    """The rounds of one block: the baseline runs of each round that ran them, and every case's runs."""

    cases: list[TimedCase]
    strategy: RoundStrategy
    baselines: dict[int, list[GenerationResult]] = field(default_factory=dict)
    rounds: int = 0
    seconds: float = 0.0
    resumed_rounds: int = 0  # the first rounds, which a stopped run timed and this one continued from

    @property
    def paired(self) -> bool:
        return self.strategy.paired

    def case_baselines(self, timed: TimedCase) -> list[GenerationResult]:
        """The baselines a case's speedups compare with (its strategy's)."""
        return self.strategy.case_baselines(self, timed)

    def spreads(self) -> Spreads:
        """The block's noise, pooled over its cases' paired rounds (none when unpaired)."""
        if not self.paired:
            return NO_SPREADS
        return block_spreads([(self.case_baselines(timed), timed.runs) for timed in self.cases])


@dataclass(frozen=True)
class RestoredRound:
    """A round a stopped run finished (:mod:`.kept_rounds`): by case id its run and paired baseline (None where
    its rounds pair none), the round's baseline runs, and its seconds."""

    runs: dict[str, tuple[GenerationResult, GenerationResult | None]]
    baselines: list[GenerationResult]
    seconds: float


#: whole baselines between the cases: what a block runs when nothing else is asked
WHOLE_ROUNDS = Pairing()


def _rotated(items: list, shift: int) -> list:
    shift %= max(len(items), 1)
    return items[shift:] + items[:shift]


def time_block(
    cases: Sequence[TimedCase],
    run_baseline: Callable[[], GenerationResult] | None,
    config: SpecbenchConfig,
    budget_s: float | None,
    budget_reason: str = BLOCK_BUDGET,
    after_round: Callable[[int, float], None] | None = None,
    pairing: Pairing = WHOLE_ROUNDS,
    new_interleaved: Callable[[], InterleavedBaseline] | None = None,
    restored: Sequence[RestoredRound] = (),
    keep_round: Callable[[BlockTiming, int, float], None] | None = None,
) -> BlockTiming:
    """Time the block's rounds; ``budget_s`` is its share of the run's budget (None: no limit).

    ``after_round(round index, seconds it took)`` is called after each round (the run's estimate uses the first).
    ``pairing`` says how the baseline is timed (:func:`round_strategy`); ``run_baseline`` None: each case's own
    (:attr:`TimedCase.baseline`). The block goes on from the ``restored`` rounds of a stopped run, their seconds
    counted in its share; ``keep_round(block, index, seconds)`` hears each round this call finishes.
    """
    block = BlockTiming(list(cases), round_strategy(pairing, run_baseline, config, new_interleaved))
    _restore(block, restored, config)
    start = time.perf_counter() - sum(restored_round.seconds for restored_round in restored[: block.rounds])
    while True:
        active = [timed for timed in block.cases if timed.stop is None]
        if not active:
            break
        elapsed = time.perf_counter() - start
        if block.rounds >= config.max_rounds:
            _stop_all(active, MAX_ROUNDS)
            break
        if not round_fits(elapsed, block.rounds, budget_s, config.min_rounds):
            _stop_all(active, budget_reason)
            break
        index = block.rounds
        round_start = time.perf_counter()
        block.strategy.run_round(block, index, _rotated(active, index))
        block.rounds += 1
        seconds = time.perf_counter() - round_start
        if keep_round is not None:
            keep_round(block, index, seconds)
        if after_round is not None:
            after_round(index, seconds)
        _after_round(block, config)
    block.seconds = time.perf_counter() - start
    return block


def _after_round(block: BlockTiming, config: SpecbenchConfig) -> None:
    if block.rounds >= config.min_rounds:
        _settle(block, config)
    _race_at_looks(block, config)


def _restore(block: BlockTiming, restored: Sequence[RestoredRound], config: SpecbenchConfig) -> None:
    """Replay ``restored`` rounds into ``block`` as they ran, the stop rules after each; a round whose cases are
    not the ones still timed at that point (stop rules that changed) ends the replay there."""
    by_id = {timed.case.id: timed for timed in block.cases}
    for restored_round in restored:
        active = {timed.case.id for timed in block.cases if timed.stop is None}
        if set(restored_round.runs) != active or block.rounds >= config.max_rounds:
            return
        index = block.rounds
        for case_id, (run, paired) in restored_round.runs.items():
            timed = by_id[case_id]
            timed.runs.append(run)
            timed.rounds.append(index)
            if paired is not None:
                timed.paired_baselines.append(paired)
        if restored_round.baselines:
            block.baselines[index] = list(restored_round.baselines)
        block.rounds += 1
        block.resumed_rounds += 1
        _after_round(block, config)


def round_fits(elapsed_s: float, rounds: int, budget_s: float | None, min_rounds: int) -> bool:
    """May another round start: always below min rounds; after them, where one more round as long as their mean
    ends within the block's seconds (``budget_s`` None: no limit)."""
    if rounds < min_rounds or budget_s is None:
        return True
    return elapsed_s + elapsed_s / rounds <= budget_s


def _run_round(
    block: BlockTiming, index: int, order: list[TimedCase], every: int, run_baseline: Callable[[], GenerationResult]
) -> None:
    """One paired round: a baseline before the first case, after every ``every`` cases (in groups as even as
    they can be: 10 cases by 3 are 3, 3, 2, 2) and after the last; each case's run is paired with the baseline
    interpolated between the two around it."""
    groups = math.ceil(len(order) / every)
    sizes = [len(order) // groups + (1 if group < len(order) % groups else 0) for group in range(groups)]
    clock, base_points, case_points = 0.0, [], []
    baselines: list[GenerationResult] = []

    def baseline() -> None:
        nonlocal clock
        run = run_baseline()
        base_points.append(clock + run.stats.wall_time_s / 2)
        clock += run.stats.wall_time_s
        baselines.append(run)

    baseline()
    at = 0
    for count in sizes:
        for timed in order[at : at + count]:
            run = timed.run()
            case_points.append((timed, run, clock + run.stats.wall_time_s / 2, len(baselines) - 1))
            clock += run.stats.wall_time_s
        at += count
        baseline()
    block.baselines[index] = baselines
    for timed, run, point, before in case_points:
        timed.runs.append(run)
        timed.rounds.append(index)
        timed.paired_baselines.append(
            _interpolated(baselines[before], baselines[before + 1], base_points[before], base_points[before + 1], point)
        )


def interleaved_pair(
    run: Callable[..., GenerationResult], new_interleaved: Callable[[], InterleavedBaseline]
) -> tuple[GenerationResult, GenerationResult]:
    """One speculative run with a fresh baseline timed between its steps: (the baseline, the run)."""
    baseline = new_interleaved()
    speculative = run(between_steps=baseline.after_step)
    return baseline.result(speculative), speculative


def _run_interleaved_round(
    block: BlockTiming, index: int, order: list[TimedCase], new_interleaved: Callable[[], InterleavedBaseline]
) -> None:
    """One interleaved round: each case's run with its own baseline timed between its steps."""
    baselines = []
    for timed in order:
        baseline, run = interleaved_pair(timed.run, new_interleaved)
        baselines.append(baseline)
        timed.runs.append(run)
        timed.rounds.append(index)
        timed.paired_baselines.append(baseline)
    block.baselines[index] = baselines


_TIME_FIELDS = ("wall_time_s", "prefill_time_s", "draft_time_s", "verify_time_s")


def _interpolated(
    before: GenerationResult, after: GenerationResult, at_before: float, at_after: float, at: float
) -> GenerationResult:
    """The baseline as it would have run at ``at`` (seconds into the round): its times linear in time between
    the runs on either side. Linear, so decode time and time per decode token interpolate alike."""
    weight = (at - at_before) / (at_after - at_before) if at_after > at_before else 0.5
    times = {
        name: (1 - weight) * getattr(before.stats, name) + weight * getattr(after.stats, name) for name in _TIME_FIELDS
    }
    return dataclasses.replace(before, stats=dataclasses.replace(before.stats, **times))


def _stop_all(active: list[TimedCase], reason: str) -> None:
    for timed in active:
        timed.stop = reason


def _settle(block: BlockTiming, config: SpecbenchConfig) -> None:
    """After a round from min rounds on: stop the cases that are tight or over their own budget."""
    spreads, paired = block.spreads(), block.paired
    for timed in block.cases:
        if timed.stop is not None:
            continue
        baselines = block.case_baselines(timed)
        if precision(baselines, timed.runs, paired, spreads) <= config.ci_target:
            timed.stop = TIGHT
        elif config.case_budget is not None:
            spent = sum(run.stats.wall_time_s for run in [*timed.runs, *(baselines if paired else [])])
            if spent + spent / len(timed.runs) > config.case_budget:
                timed.stop = CASE_BUDGET


def first_race_look(config: SpecbenchConfig) -> int:
    """The round of the race's first look: min rounds, 2 at least (a case is timed its minimum rounds, as asked)."""
    return max(config.min_rounds, 2)


def _race_at_looks(block: BlockTiming, config: SpecbenchConfig) -> None:
    """After a round that is one of the race's looks: race the cases still timed."""
    looks = race_looks(first_race_look(config), config.max_rounds)
    if config.race and block.rounds in looks:
        for members in _races(block.cases).values():
            _race(members, config, len(looks))


def _races(cases: Sequence[TimedCase]) -> dict[tuple, list[TimedCase]]:
    """The constant-k cases of each (pair, engine, prompt), eliminated ones included: a schedule races nothing."""
    races: dict[tuple, list[TimedCase]] = defaultdict(list)
    for timed in cases:
        case = timed.case
        if isinstance(case.k, int):
            races[case.key("race")].append(timed)  # k is what the race ranks
    return {key: members for key, members in races.items() if len(members) > 1}


def race_looks(min_rounds: int, max_rounds: int) -> list[int]:
    """The rounds after which the race tests: from ``min_rounds`` (its first look) on, each about 1.5 times the
    one before, and the last round. Few planned looks keep each one's share of the 5% (Bonferroni over looks) large
    enough to act on."""
    looks, at = [], max(min_rounds, 2)
    while at < max_rounds:
        looks.append(at)
        at = max(at + 1, round(at * 1.5))
    return [*looks, max_rounds] if max_rounds >= max(min_rounds, 2) else looks


def _race(members: list[TimedCase], config: SpecbenchConfig, looks: int) -> None:
    contenders = [timed for timed in members if timed.eliminated_by is None]
    times = {timed.case.k: dict(zip(timed.rounds, _relative_times(timed))) for timed in contenders}
    # The family is every k the race started with; each of the planned looks spends its share of the 5%.
    beaten = eliminations(
        times, alpha=RACE_ALPHA, min_rounds=first_race_look(config), max_looks=looks, family=len(members)
    )
    for timed in contenders:
        if timed.case.k in beaten:
            timed.eliminated_by = beaten[timed.case.k]
            timed.stop = ELIMINATED


def _relative_times(timed: TimedCase) -> list[float]:
    """Time per decode token of each run, over its paired baseline's when it has one: the drift cancels."""
    own = [run.stats.time_per_decode_token_s for run in timed.runs]
    if len(timed.paired_baselines) != len(own):
        return own
    return [value / base.stats.time_per_decode_token_s for value, base in zip(own, timed.paired_baselines)]
