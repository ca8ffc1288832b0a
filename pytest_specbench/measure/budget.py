"""The run's timing budget (``--specbench-budget``) as a plan: every block's cost estimated before the first timed
round, each block's share of what is left, the run's expected length, and what would fit when the minimum does not.

Pure arithmetic over estimates (:mod:`.cost_estimate` makes them) and a clock, so the tests drive it with a fake
clock. Before a block is timed, the plan takes what the blocks timed so far measured (their setup and their first
round against the estimate) as two scales for the blocks left: a re-plan after each block.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

#: how the reason of a case left untimed by :meth:`RunPlan.overrun_if_timed` begins (the summary counts them)
NOT_TIMED_FOR_BUDGET = "not timed: the run's budget"
#: the per-round standard deviation of the log decode ratio assumed before any block is timed (pooled over a
#: block's cases: 0.019 to 0.040 on the default CPU run, docs/results/2026-12-04-default-run-c8b3786.md)
ROUND_NOISE_PRIOR = 0.03


@dataclass(frozen=True)
class CaseCost:
    """One case's expected seconds on this machine: a round (its speculative run and its baseline) and what it
    pays before its block's first round (a warm-up and cost probe on its pair's first use in a dtype)."""

    case_id: str
    pair: str
    k: str
    dtype: str
    prompt: str
    round_s: float
    setup_s: float = 0.0


@dataclass(frozen=True)
class BlockCost:
    """One block's expected seconds: its own setup (the target's reference decode of its prompt) and its cases'."""

    block: str
    fixed_s: float
    cases: tuple[CaseCost, ...]

    @property
    def round_s(self) -> float:
        return sum(case.round_s for case in self.cases)

    @property
    def setup_s(self) -> float:
        return self.fixed_s + sum(case.setup_s for case in self.cases)

    def only(self, keep: Callable[[CaseCost], bool]) -> BlockCost | None:
        """The block with only the cases ``keep`` accepts; None where it keeps none."""
        kept = tuple(case for case in self.cases if keep(case))
        return replace(self, cases=kept) if kept else None


@dataclass
class RunPlan:
    """The blocks still to time on this process, as estimated, and the budget over them (``budget_s`` None: none).

    ``workers``: processes timing the run's blocks side by side (xdist), each taking about an equal part.
    """

    budget_s: float | None
    blocks: dict[str, BlockCost]
    min_rounds: int
    max_rounds: int
    ci_target: float
    workers: int = 1
    clock: Callable[[], float] = time.perf_counter
    started: float | None = None
    prior_noise: float = ROUND_NOISE_PRIOR
    noises: list[float] = field(default_factory=list)  # the per-round noise each block timed showed
    #: per block timed: (estimated setup, its setup, estimated first round, its first round), in seconds
    timed: list[tuple[float, float, float, float]] = field(default_factory=list)
    spent_at_block: int | None = None  # the first block that found the budget spent (0-based)

    def __post_init__(self) -> None:
        if self.started is None:
            self.started = self.clock()

    # --- what the blocks timed so far say about the estimates

    def elapsed_s(self) -> float:
        return self.clock() - self.started

    @property
    def setup_scale(self) -> float:
        """Measured over estimated setup, over the blocks timed (1 before any)."""
        return _ratio([(estimate, actual) for estimate, actual, _, _ in self.timed])

    @property
    def round_scale(self) -> float:
        """Measured over estimated first round, over the blocks timed (1 before any)."""
        return _ratio([(estimate, actual) for _, _, estimate, actual in self.timed])

    def record(self, block: str, setup_s: float, first_round_s: float | None, noise: float | None = None) -> None:
        """A block's setup and first round as timed (``first_round_s`` None: it timed no round), and the noise its
        rounds showed; the block leaves the plan."""
        cost = self.blocks.pop(block, None)
        if cost is not None and first_round_s is not None:
            self.timed.append((cost.setup_s, setup_s, cost.round_s, first_round_s))
        if noise is not None:
            self.noises.append(noise)

    @property
    def noise(self) -> float:
        """The per-round noise a block is expected to show: the root mean square of the blocks' timed so far, the
        prior before any."""
        if not self.noises:
            return self.prior_noise
        return math.sqrt(sum(value**2 for value in self.noises) / len(self.noises))

    # --- the expected seconds of what is left

    def rounds_needed(self, cases: int = 1) -> int:
        """The rounds a block of ``cases`` is expected to need for its interval target, between min and max rounds:
        the first n whose 95% t half-width, with the noise pooled over the cases (n - 1 degrees of freedom each),
        is within the target."""
        from scipy.stats import t

        for rounds in range(max(self.min_rounds, 2), self.max_rounds + 1):
            half_width = t.ppf(0.975, cases * (rounds - 1)) * self.noise / math.sqrt(rounds)
            if half_width <= self.ci_target:
                return rounds
        return self.max_rounds

    def _setup(self, cost: BlockCost) -> float:
        return cost.setup_s * self.setup_scale / self.workers

    def _round(self, cost: BlockCost) -> float:
        return cost.round_s * self.round_scale / self.workers

    def minimum_s(self, blocks: Iterable[BlockCost] | None = None) -> float:
        """The run's length with every block left at its minimum rounds."""
        chosen = list(self.blocks.values()) if blocks is None else list(blocks)
        return self.elapsed_s() + sum(self._setup(cost) + self.min_rounds * self._round(cost) for cost in chosen)

    def expected_s(self) -> float:
        """The run's expected length: every block left its expected rounds, within the budget where it fits."""
        unbounded = self.elapsed_s() + sum(
            self._setup(cost) + self.rounds_needed(len(cost.cases)) * self._round(cost) for cost in self.blocks.values()
        )
        if self.budget_s is None:
            return unbounded
        return max(min(unbounded, self.budget_s), self.minimum_s())

    def overrun_allowed_s(self, blocks: Iterable[BlockCost] | None = None) -> float:
        """What a run may end past its budget: the largest block's minimum rounds (a block never runs fewer)."""
        chosen = list(self.blocks.values()) if blocks is None else list(blocks)
        return max((self.min_rounds * self._round(cost) for cost in chosen), default=0.0)

    def fits(self, reserve: float = 0.0) -> bool:
        """The blocks left fit at their minimum rounds: within the budget plus one block's minimum rounds, or, with
        a ``reserve`` (a share of the budget), within the rest of the budget, that share left for the blocks that
        need more than their minimum rounds."""
        return self._fits(list(self.blocks.values()), reserve)

    def _fits(self, blocks: list[BlockCost], reserve: float) -> bool:
        if self.budget_s is None:
            return True
        if reserve > 0:
            return self.minimum_s(blocks) <= (1 - reserve) * self.budget_s
        return self.minimum_s(blocks) <= self.budget_s + self.overrun_allowed_s(blocks)

    def share_s(self, block: str) -> float | None:
        """Seconds of timed rounds for ``block``, its setup done, from what is left of the budget after the other
        blocks' setups: where that covers every block's expected rounds (:meth:`rounds_needed`), the others' and
        the rest to this one; where it covers only their minimum rounds, each its minimum and the rest in
        proportion to what each is expected to need beyond it; where not even that, what the others' minimum rounds
        leave (0: the block runs its minimum, blocks.round_fits). A block stops once its cases are tight, so a
        quiet block leaves its share to the next. None: no budget."""
        if self.budget_s is None:
            return None
        own = self.blocks.get(block)
        others = [cost for name, cost in self.blocks.items() if name != block]
        left = self.budget_s - self.elapsed_s() - sum(self._setup(cost) for cost in others)
        if left <= 0 and self.spent_at_block is None:
            self.spent_at_block = len(self.timed)
        if own is None:  # not in the plan (it was not pending when the plan was made): an equal part
            return max(left, 0.0) / (len(others) + 1)
        minimum = {id(cost): self.min_rounds * self._round(cost) for cost in [own, *others]}
        expected = {
            id(cost): max(self.rounds_needed(len(cost.cases)), self.min_rounds) * self._round(cost)
            for cost in [own, *others]
        }
        if left >= sum(expected.values()):
            return left - sum(expected[id(cost)] for cost in others)
        if left >= sum(minimum.values()):
            extra = sum(expected.values()) - sum(minimum.values())
            own_extra = expected[id(own)] - minimum[id(own)]
            return minimum[id(own)] + (left - sum(minimum.values())) * (own_extra / extra if extra > 0 else 0.0)
        return max(left - sum(minimum[id(cost)] for cost in others), 0.0)

    def overrun_if_timed(self, block: str) -> str | None:
        """Why ``block`` is not timed, or None: timed at its minimum rounds, at the speed the blocks timed so far
        ran at, it would end the run past its budget by more than one block's minimum rounds. A probe that misjudged
        the machine's speed (a busy moment) is caught once a block has run; before one has, the plan's own check
        stands. The block then leaves the plan."""
        cost = self.blocks.get(block)
        if self.budget_s is None or cost is None or not self.timed:
            return None
        own_s = cost.setup_s * self.setup_scale + self.min_rounds * cost.round_s * self.round_scale
        allowed_s = max(self.min_rounds * other.round_s * self.round_scale for other in self.blocks.values())
        spent_s = self.elapsed_s()
        if spent_s + own_s <= self.budget_s + allowed_s:
            return None
        del self.blocks[block]
        return (
            f"{NOT_TIMED_FOR_BUDGET} ({describe_duration(self.budget_s)[6:]}) would be overrun: {spent_s:.0f} s "
            f"spent, and this block needs about {own_s:.0f} s at its {self.min_rounds} minimum rounds (the blocks "
            f"timed so far ran {self.round_scale:.1f}x their estimated rounds); a longer --specbench-budget (or "
            "none), or --specbench-resume with this run's log, times it"
        )

    # --- what would fit where the minimum does not

    def fitting(self, keep: Callable[[CaseCost], bool], reserve: float = 0.0) -> bool:
        """Would the blocks left, with only the cases ``keep`` accepts, fit at their minimum rounds (:meth:`fits`)."""
        kept = [cost for cost in (block.only(keep) for block in self.blocks.values()) if cost is not None]
        return self._fits(kept, reserve)

    def cases(self) -> list[CaseCost]:
        return [case for block in self.blocks.values() for case in block.cases]


def _ratio(pairs: list[tuple[float, float]]) -> float:
    """The sum of measured over the sum of estimated seconds (1 without any)."""
    estimated = sum(estimate for estimate, _ in pairs)
    return sum(actual for _, actual in pairs) / estimated if estimated > 0 else 1.0


def fitting_options(plan: RunPlan, ks: list[str], dtypes: list[str], pairs: list[str], prompts: list[str]) -> list[str]:
    """The selections that would fit the budget, as options: the most k, dtypes, pairs or prompts that still fit
    (dropping from the end of each list as given), and the budget the minimum needs."""
    options: list[str] = []

    def largest(values: list[str], flag: str, attribute: str) -> None:
        for count in range(len(values) - 1, 0, -1):
            chosen = set(values[:count])
            if plan.fitting(lambda case: getattr(case, attribute) in chosen):
                options.append(f"{flag}={','.join(values[:count])}")
                return

    largest(ks, "--specbench-k", "k")
    for dtype in dtypes if len(dtypes) > 1 else []:
        if plan.fitting(lambda case, dtype=dtype: case.dtype == dtype):
            options.append(f"--specbench-dtype={dtype}")
            break
    largest(pairs, "--specbench-pairs", "pair")
    largest(prompts, "-k", "prompt")
    if options and options[-1].startswith("-k="):
        chosen = options.pop().removeprefix("-k=").split(",")
        options.append(f'-k "{" or ".join(chosen)}"')
    options.append(f"--specbench-budget={math.ceil((plan.minimum_s() - plan.overrun_allowed_s()) * 1.1 / 60)}m")
    return options


def describe_duration(seconds: float) -> str:
    """'about 14 min', 'about 40 s'."""
    if seconds < 90:
        return f"about {math.ceil(seconds)} s"
    return f"about {round(seconds / 60)} min"
