"""The run's timing budget (``--specbench-budget``), divided over the blocks still to time."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field


@dataclass
class RunBudget:
    """Seconds for the whole run on this process, from its start; ``total_s`` None is no budget.

    ``blocks`` is how many blocks this process expects to time (under xdist, its share of the run's). Each
    block gets what is left over the blocks left, so a fast block leaves more to the slower ones after it.
    """

    total_s: float | None
    blocks: int
    started: float = field(default_factory=time.perf_counter)
    timed: int = 0  # blocks finished
    spent_at_block: int | None = None  # the first block that found the budget spent (0-based)

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started

    def share_s(self) -> float | None:
        """The next block's seconds (0 when the budget is spent: the block then runs its minimum rounds)."""
        if self.total_s is None:
            return None
        left = self.total_s - self.elapsed_s()
        if left <= 0 and self.spent_at_block is None:
            self.spent_at_block = self.timed
        return max(left, 0.0) / max(self.blocks - self.timed, 1)

    def block_done(self) -> None:
        self.timed += 1

    def estimate_s(self, round_s: float, min_rounds: int, max_rounds: int) -> float:
        """The run's expected length once one round of a block took ``round_s``: every block left as long as that
        one, timed for its share of the budget, between min and max rounds each."""
        per_block_max = max_rounds * round_s
        per_block_min = min_rounds * round_s
        left = max(self.blocks - self.timed, 0)
        if self.total_s is None:
            return self.elapsed_s() + left * per_block_max
        share = max(self.total_s - self.elapsed_s(), 0.0) / max(left, 1)
        return self.elapsed_s() + left * min(max(share, per_block_min), per_block_max)


def describe_duration(seconds: float) -> str:
    """'about 14 min', 'about 40 s'."""
    if seconds < 90:
        return f"about {math.ceil(seconds)} s"
    return f"about {round(seconds / 60)} min"
