"""A case's speedups over its baselines, and how precise they are so far (the rounds: :mod:`.blocks`)."""

from __future__ import annotations

from collections.abc import Sequence

from ..engine.stats import GenerationResult
from ..results.statistics import Interval, PooledSpread, log_ratios, pooled_spread, speedup_interval

#: the end-to-end and the decode spread pooled over a block's cases (None: each case's own)
Spreads = tuple[PooledSpread | None, PooledSpread | None]
NO_SPREADS: Spreads = (None, None)


def _wall(runs: list[GenerationResult]) -> list[float]:
    return [run.stats.wall_time_s for run in runs]


def _per_token(runs: list[GenerationResult]) -> list[float]:
    return [run.stats.time_per_decode_token_s for run in runs]


def speedups(
    baselines: list[GenerationResult], speculative: list[GenerationResult], paired: bool, spreads: Spreads = NO_SPREADS
) -> tuple[Interval, Interval]:
    """End-to-end and decode-only speedup intervals (wall time, and wall time after the first token)."""
    if paired:
        baselines = baselines[: len(speculative)]
    else:
        spreads = NO_SPREADS
    end_to_end = speedup_interval(_wall(baselines), _wall(speculative), paired=paired, spread=spreads[0])
    decode = speedup_interval(_per_token(baselines), _per_token(speculative), paired=paired, spread=spreads[1])
    return end_to_end, decode


def block_spreads(cases: Sequence[tuple[list[GenerationResult], list[GenerationResult]]]) -> Spreads:
    """The end-to-end and decode spreads pooled over a block's paired cases, each given as (its paired
    baselines, its runs): the cases share the machine and the rounds, so they share the noise."""
    timed = [(baselines[: len(runs)], runs) for baselines, runs in cases if runs]
    return (
        pooled_spread([log_ratios(_wall(base), _wall(runs)) for base, runs in timed]),
        pooled_spread([log_ratios(_per_token(base), _per_token(runs)) for base, runs in timed]),
    )


def precision(
    baselines: list[GenerationResult], speculative: list[GenerationResult], paired: bool, spreads: Spreads = NO_SPREADS
) -> float:
    """The wider relative half-width of the two speedup intervals so far (infinite before a round)."""
    if not baselines or not speculative:
        return float("inf")
    return max(interval.relative_half_width for interval in speedups(baselines, speculative, paired, spreads))
