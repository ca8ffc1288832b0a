"""Timed rounds of a case: baseline and speculative decoding side by side until the interval is tight."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..engine.stats import GenerationResult
from ..results.statistics import Interval, speedup_interval
from ..settings.config import SpecbenchConfig

# (run the speculative decode, run the baseline before each timed round or None, rounds) -> None.
# pytest-benchmark's pedantic() is one: it times the first rounds, the adaptive loop the rest.
RoundTimer = Callable[[Callable[[], Any], Callable[[], Any] | None, int], None]


def time_rounds(run_speculative: Callable[[], Any], run_baseline: Callable[[], Any] | None,
                relative_half_width: Callable[[], float], config: SpecbenchConfig,
                timer: RoundTimer | None = None) -> int:
    """Time rounds until the speedup interval is tight enough, the budget is spent, or max rounds ran.

    A round runs the baseline (when given) and the speculative decode side by side, in
    alternating order so neither always runs on a cache the other warmed. The first
    ``min_rounds`` may go through ``timer`` (pytest-benchmark); the budget never cuts
    below ``min_rounds``. Returns the number of rounds.
    """
    rounds = 0
    start = time.perf_counter()
    if timer is not None:
        timer(run_speculative, run_baseline, config.min_rounds)
        rounds = config.min_rounds
    while rounds < config.max_rounds:
        elapsed = time.perf_counter() - start
        if rounds >= config.min_rounds:
            # Stop when precise enough, or when one more round (at the mean round's cost) would overrun.
            if relative_half_width() <= config.ci_target or elapsed + elapsed / rounds > config.case_budget:
                break
        first, second = (run_baseline, run_speculative) if rounds % 2 == 0 else (run_speculative, run_baseline)
        for run in (first, second):
            if run is not None:
                run()
        rounds += 1
    return rounds


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
