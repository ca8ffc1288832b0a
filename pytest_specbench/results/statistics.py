"""Speedups with confidence intervals, from timed rounds of baseline and speculative decoding.

A speedup is baseline time / speculative time for the same work. Timing noise
is multiplicative (a busy core slows a run by a factor), so the statistics are
taken on log times: the estimate is the geometric mean of the per-round ratios
and its 95% interval is Student's t interval of the mean log ratio, mapped
back. It is defined from two rounds on, where an order-statistics interval for
a median would need six; the estimate always lies inside its interval.

Rounds that ran baseline and speculative side by side are *paired* (one ratio
per round, so drift common to both cancels); a baseline timed once and shared
by many cases is compared *unpaired* (Welch's interval on the two log samples).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Interval:
    """An estimate with its confidence interval; ``low``/``high`` are None below two rounds."""

    estimate: float
    low: float | None
    high: float | None

    @property
    def relative_half_width(self) -> float:
        """Half the interval's width over the estimate (inf when there is no interval)."""
        if self.low is None or self.high is None or not self.estimate > 0:
            return math.inf
        return (self.high - self.low) / (2 * self.estimate)


def speedup_interval(baseline_s: Sequence[float], speculative_s: Sequence[float], *, paired: bool,
                     confidence: float = CONFIDENCE) -> Interval:
    """Speedup of ``speculative_s`` over ``baseline_s`` (seconds for the same work) with its interval.

    ``paired``: round i of one side ran beside round i of the other (equal lengths).
    """
    import warnings

    from scipy import stats

    if not baseline_s or not speculative_s:
        raise ValueError("need at least one timed run on each side")
    if min(*baseline_s, *speculative_s) <= 0:
        raise ValueError("times must be positive")
    log_base = [math.log(value) for value in baseline_s]
    log_spec = [math.log(value) for value in speculative_s]
    if paired:
        if len(log_base) != len(log_spec):
            raise ValueError(f"paired rounds need equal counts, got {len(log_base)} and {len(log_spec)}")
        diffs = [b - s for b, s in zip(log_base, log_spec)]
        estimate = math.exp(sum(diffs) / len(diffs))
        if len(diffs) < 2:
            return Interval(estimate, None, None)
        if max(diffs) == min(diffs):  # identical ratios: no spread to speak of
            return Interval(estimate, estimate, estimate)
        with warnings.catch_warnings():  # nearly equal ratios: scipy warns, and the interval is a near-point
            warnings.simplefilter("ignore", RuntimeWarning)
            low, high = stats.ttest_1samp(diffs, 0.0).confidence_interval(confidence)
    else:
        estimate = math.exp(sum(log_base) / len(log_base) - sum(log_spec) / len(log_spec))
        if len(log_base) < 2 or len(log_spec) < 2:
            return Interval(estimate, None, None)
        if max(log_base) == min(log_base) and max(log_spec) == min(log_spec):
            return Interval(estimate, estimate, estimate)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            low, high = stats.ttest_ind(log_base, log_spec, equal_var=False).confidence_interval(confidence)
    # Clamp rounding at the edges so estimate <= high and low <= estimate hold exactly.
    return Interval(estimate, min(math.exp(low), estimate), max(math.exp(high), estimate))


def coefficient_of_variation(values: Sequence[float]) -> float | None:
    """Sample standard deviation over the mean; None below two values."""
    from scipy import stats

    if len(values) < 2:
        return None
    return float(stats.variation(values, ddof=1))
