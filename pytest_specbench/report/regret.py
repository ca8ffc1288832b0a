"""What a draft-length schedule gives up, with intervals: k=auto (or k=heuristic) against the best constant k,
and native k=auto against transformers' own default schedule (the hf engine's k=auto).

:func:`ratio_to_best` is the schedule's decode speedup as a share of the best constant k's, paired over the rounds
both ran in their block (keys (run, block, round)): the geometric mean of the per-round ratios, with Student's t
95% interval. Pairing makes it tight, since a round's drift hits both; rows without shared rounds give no interval
rather than a wrong one. :func:`ratio_to_hf` compares end to end (prefill included: transformers' first target pass
also verifies a draft block), paired over ``round_wall_s``. :func:`over_prompts` takes the geometric mean over
prompts, each weighing the same. Why the ratio to the best is conservative: docs/measuring.md, "The answer".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..results.schema import CaseResult
from ..results.statistics import geometric_mean_interval, speedup_interval
from .records import JsonRecord

#: a round's key: (run, block, round); round i of one run or block never pairs with round i of another
RoundKey = tuple[Any, ...]


@dataclass(frozen=True)
class PairedRatio(JsonRecord):
    """One speed over another's, paired over the rounds both ran: the geometric mean of the per-round ratios with
    its 95% t interval (None without one: a single round, or no shared rounds), and how many rounds paired (0:
    none could, the ratio then of the two rows' own speedups)."""

    ratio: float
    ci_low: float | None
    ci_high: float | None
    rounds: int


@dataclass(frozen=True)
class AgainstHf(JsonRecord):
    """Native k=auto over the hf engine's k=auto on one prompt, end to end; ``paired`` False where the rows have
    no per-round wall times (the ratio of their end-to-end speedups, no interval; None when either lacks it)."""

    k: int | str
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    rounds: int
    paired: bool


@dataclass(frozen=True)
class OverPrompts(JsonRecord):
    """Per-prompt ratios over the prompts: their geometric mean with a t interval over the prompts."""

    prompts: int
    ratio: float
    ci_low: float | None
    ci_high: float | None


@dataclass(frozen=True)
class ScheduleSummary(JsonRecord):
    """A schedule's decode speedup as a share of the best constant k's, over one (pair, engine, dtype)'s prompts."""

    k: int | str
    prompts: int
    ratio: float
    ci_low: float | None
    ci_high: float | None


@dataclass(frozen=True)
class HfSummary(JsonRecord):
    """Native k=auto over hf k=auto over the prompts that hold the comparison; how many of them paired rounds."""

    k: int | str
    prompts: int
    ratio: float
    ci_low: float | None
    ci_high: float | None
    paired_prompts: int


class Ratio(Protocol):
    """A ratio with its interval, as :func:`over_prompts` reads one per prompt."""

    @property
    def ratio(self) -> float | None: ...

    @property
    def ci_low(self) -> float | None: ...

    @property
    def ci_high(self) -> float | None: ...


def round_times(row: CaseResult, field: str = "round_decode_token_s") -> dict[RoundKey, float] | None:
    """The row's per-round ``field`` keyed by (run, block, round); None without usable round data. Round i of
    one run and round i of another (a row replayed by --specbench-resume beside one measured now) never pair.

    Seconds per decode token are read over the baseline each run was paired with, where the row has one per
    round: the machine's drift between two cases' runs then cancels (rows of one round's single baseline rank
    the same either way, the baseline dividing both)."""
    rounds, block, times = row.block_rounds, row.block, getattr(row, field)
    if not block or not rounds or not times or len(rounds) != len(times):
        return None
    if field == "round_decode_token_s":
        baselines = row.baseline_round_decode_token_s
        if baselines and len(baselines) == len(times) and all(_positive(value) for value in baselines):
            times = [value / base if _positive(value) else value for value, base in zip(times, baselines)]
    if not all(_positive(t) for t in times):
        return None
    return {(row.run_id, block, r): float(t) for r, t in zip(rounds, times)}


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and value > 0


def paired_ratio(
    faster_if_above: dict[RoundKey, float] | None, reference: dict[RoundKey, float] | None
) -> PairedRatio | None:
    """Reference seconds over ``faster_if_above``'s, paired over the (run, block, round) keys both hold; None
    when they share none (two blocks or two runs never pair). Above 1: the first is faster."""
    if faster_if_above is None or reference is None:
        return None
    common = [key for key in reference if key in faster_if_above]
    if not common:
        return None
    interval = speedup_interval(
        [reference[key] for key in common], [faster_if_above[key] for key in common], paired=True
    )
    return PairedRatio(interval.estimate, interval.low, interval.high, len(common))


def ratio_to_best(schedule: CaseResult, best: CaseResult) -> PairedRatio:
    """The schedule row's decode speedup as a share of the best constant k's row (see the module docstring): the
    paired estimate when the rows share rounds, else the ratio of their decode speedups (``rounds`` 0, no
    interval); no interval either with one shared round."""
    paired = paired_ratio(round_times(schedule), round_times(best))
    if paired is None:
        return PairedRatio(schedule.decode_speedup / best.decode_speedup, None, None, 0)
    return paired


def ratio_to_hf(native: CaseResult, hf: CaseResult) -> AgainstHf:
    """Native k=auto's end-to-end speed over the hf engine's k=auto on one prompt: hf wall seconds / native's,
    paired over rounds (``round_wall_s``). Without per-round wall times: the ratio of the rows' end-to-end
    speedups (``paired`` False, no interval), or None when either lacks it."""
    paired = paired_ratio(round_times(native, "round_wall_s"), round_times(hf, "round_wall_s"))
    if paired is not None:
        return AgainstHf(native.k, paired.ratio, paired.ci_low, paired.ci_high, paired.rounds, True)
    a, b = native.speedup, hf.speedup
    ratio = a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a > 0 and b > 0 else None
    return AgainstHf(native.k, ratio, None, None, 0, False)


def over_prompts(ratios: Sequence[Ratio]) -> OverPrompts | None:
    """Geometric mean of per-prompt ratios, with a t interval over the prompts' log ratios
    (:func:`..results.statistics.geometric_mean_interval`); one prompt keeps its own interval. None without any."""
    items = [item for item in ratios if isinstance(item.ratio, (int, float)) and item.ratio > 0]
    if not items:
        return None
    if len(items) == 1:
        (item,) = items
        return OverPrompts(1, item.ratio, item.ci_low, item.ci_high)
    interval = geometric_mean_interval([item.ratio for item in items])
    return OverPrompts(len(items), interval.estimate, interval.low, interval.high)


def interval_text(ratio: float | None, low: float | None, high: float | None) -> str:
    """``0.97 [0.93, 1.01]``; the estimate alone without an interval; ``unknown`` without an estimate."""
    if ratio is None:
        return "unknown"
    return f"{ratio:.2f}" + (f" [{low:.2f}, {high:.2f}]" if low is not None and high is not None else "")
