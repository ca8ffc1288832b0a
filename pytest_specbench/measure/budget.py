"""The run's timing budget (``--specbench-budget``), divided over the blocks still to time."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field


@dataclass
class RunBudget:
    """Seconds for the whole run on this process, from its start; ``total_s`` None is no budget.

    ``blocks`` is how many blocks this process expects to time (under xdist, its share of the run's).
    ``weights`` holds each block's work per round, relative (:func:`block_weight`; a block not named weighs 1).
    Each block gets what is left in proportion to its weight among the blocks left, so a batch-16 block gets
    about 16 times a batch-1 block's share, and a fast block leaves more to the slower ones after it.
    """

    total_s: float | None
    blocks: int
    started: float = field(default_factory=time.perf_counter)
    weights: dict[str, float] = field(default_factory=dict)
    timed: int = 0  # blocks finished
    spent_at_block: int | None = None  # the first block that found the budget spent (0-based)
    done: set[str] = field(default_factory=set)

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started

    def _weight(self, block: str | None) -> float:
        return self.weights.get(block, 1.0) if block is not None else 1.0

    def _weight_left(self, block: str | None) -> float:
        """The weight of the blocks left on this process, ``block`` (the next) included: with every block its
        own, their sum; under xdist, where which blocks come is not known, their mean times how many are left."""
        left = max(self.blocks - self.timed, 1)
        others = [w for name, w in self.weights.items() if name not in self.done and name != block]
        mean = sum(others) / len(others) if others else self._weight(block)
        return self._weight(block) + mean * (left - 1)

    def share_s(self, block: str | None = None) -> float | None:
        """The next block's seconds (0 when the budget is spent: the block then runs its minimum rounds)."""
        if self.total_s is None:
            return None
        left = self.total_s - self.elapsed_s()
        if left <= 0 and self.spent_at_block is None:
            self.spent_at_block = self.timed
        return max(left, 0.0) * self._weight(block) / self._weight_left(block)

    def block_done(self, block: str | None = None) -> None:
        self.timed += 1
        if block is not None:
            self.done.add(block)

    def estimate_s(self, round_s: float, min_rounds: int, max_rounds: int, block: str | None = None) -> float:
        """The run's expected length once one round of ``block`` (being timed) took ``round_s``: every block
        left, that one included, a round as long in proportion to its weight, timed for its share of the
        budget, between min and max rounds each."""
        per_weight = round_s / self._weight(block)
        weight_left = self._weight_left(block)
        if self.total_s is None:
            return self.elapsed_s() + weight_left * max_rounds * per_weight
        share = max(self.total_s - self.elapsed_s(), 0.0) / weight_left
        return self.elapsed_s() + weight_left * min(max(share, min_rounds * per_weight), max_rounds * per_weight)


def block_weight(cases: int, batch: int) -> float:
    """A block's work per round, relative: its cases times the rows of a batch (on a CPU a batch's pass costs
    about in proportion to its rows: docs/results/2026-12-01-batch-axis.md)."""
    return float(cases * batch)


def describe_duration(seconds: float) -> str:
    """'about 14 min', 'about 40 s'."""
    if seconds < 90:
        return f"about {math.ceil(seconds)} s"
    return f"about {round(seconds / 60)} min"
