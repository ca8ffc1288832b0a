"""A case's speedups over its baselines, and how precise they are so far (the rounds: :mod:`.blocks`)."""

from __future__ import annotations

from ..engine.stats import GenerationResult
from ..results.statistics import Interval, speedup_interval


def speedups(baselines: list[GenerationResult], speculative: list[GenerationResult], paired: bool
             ) -> tuple[Interval, Interval]:
    """End-to-end and decode-only speedup intervals (wall time, and wall time after the first token)."""
    if paired:
        baselines = baselines[: len(speculative)]
    end_to_end = speedup_interval([run.stats.wall_time_s for run in baselines],
                                  [run.stats.wall_time_s for run in speculative], paired=paired)
    decode = speedup_interval([run.stats.time_per_decode_token_s for run in baselines],
                              [run.stats.time_per_decode_token_s for run in speculative], paired=paired)
    return end_to_end, decode


def precision(baselines: list[GenerationResult], speculative: list[GenerationResult], paired: bool) -> float:
    """The wider relative half-width of the two speedup intervals so far (infinite before a round)."""
    if not baselines or not speculative:
        return float("inf")
    return max(interval.relative_half_width for interval in speedups(baselines, speculative, paired))
