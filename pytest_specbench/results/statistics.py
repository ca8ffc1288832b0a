"""Speedups with confidence intervals, from timed rounds of baseline and speculative decoding.

A speedup is baseline time / speculative time for the same work. Timing noise is multiplicative, so the statistics
are on log times: the estimate is the geometric mean of the per-round ratios and its 95% interval Student's t
interval of the mean log ratio, mapped back (defined from two rounds on, where an order-statistics interval for a
median needs six, and always around its estimate). Rounds that ran both side by side are *paired* (drift common to
both cancels); a baseline timed once and shared, or one of another block (a dtype's rows against the float32
greedy baseline: report/dtype_view.py), is compared *unpaired* (Welch), or reached through the row's own paired
speedup times the ratio of the two baselines (:func:`chained_speedup_interval`). Cases timed in the same rounds share
one noise, so their spread can be *pooled* (:func:`pooled_spread`), unless Bartlett's test rejects one variance at
1%. Why and how well: docs/measuring.md, "The interval".
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Interval:
    """An estimate with its confidence interval; ``low``/``high`` are None below two rounds."""

    estimate: float
    low: float | None
    high: float | None
    #: the standard error of log(estimate) and its degrees of freedom, where a later test reads them
    log_se: float | None = None
    dof: float | None = None

    @property
    def relative_half_width(self) -> float:
        """Half the interval's width over the estimate (inf when there is no interval)."""
        if self.low is None or self.high is None or not self.estimate > 0:
            return math.inf
        return (self.high - self.low) / (2 * self.estimate)


@dataclass(frozen=True)
class PooledSpread:
    """The standard deviation of per-round log ratios pooled over cases, with its degrees of freedom."""

    sd: float
    dof: int


#: below this p-value of Bartlett's test the cases' spreads differ and are not pooled
HOMOGENEITY_ALPHA = 0.01


def pooled_spread(
    samples: Sequence[Sequence[float]], homogeneity_alpha: float = HOMOGENEITY_ALPHA
) -> PooledSpread | None:
    """The spread of several cases' values, each around its own mean. None with no degree of freedom, or when
    Bartlett's test says the cases' variances differ (p below ``homogeneity_alpha``): then each keeps its own."""
    import warnings

    from scipy import stats

    groups = [list(values) for values in samples if len(values) >= 2]
    dof = sum(len(values) - 1 for values in groups)
    if dof < 1:
        return None
    squares = [sum((value - sum(values) / len(values)) ** 2 for value in values) for values in groups]
    if len(groups) >= 2 and any(squares):
        if not all(squares):  # a case without spread beside ones with it: not one variance
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            if stats.bartlett(*groups).pvalue < homogeneity_alpha:
                return None
    return PooledSpread(math.sqrt(sum(squares) / dof), dof)


def log_ratios(baseline_s: Sequence[float], speculative_s: Sequence[float]) -> list[float]:
    """Per-round log(baseline / speculative) of paired rounds: what a paired interval and a pooled spread read."""
    if len(baseline_s) != len(speculative_s):
        raise ValueError(f"paired rounds need equal counts, got {len(baseline_s)} and {len(speculative_s)}")
    if min(*baseline_s, *speculative_s) <= 0:
        raise ValueError("times must be positive")
    return [math.log(b) - math.log(s) for b, s in zip(baseline_s, speculative_s)]


def speedup_interval(
    baseline_s: Sequence[float],
    speculative_s: Sequence[float],
    *,
    paired: bool,
    confidence: float = CONFIDENCE,
    spread: PooledSpread | None = None,
) -> Interval:
    """Speedup of ``speculative_s`` over ``baseline_s`` (seconds for the same work) with its interval.

    ``paired``: round i of one side ran beside round i of the other (equal lengths). ``spread`` (paired only):
    the per-round spread pooled over the cases timed with this one, used in place of this case's own.
    """
    import warnings

    from scipy import stats

    if not baseline_s or not speculative_s:
        raise ValueError("need at least one timed run on each side")
    if min(*baseline_s, *speculative_s) <= 0:
        raise ValueError("times must be positive")
    if spread is not None and not paired:
        raise ValueError("a pooled spread is for paired rounds")
    if paired:
        diffs = log_ratios(baseline_s, speculative_s)
        mean = sum(diffs) / len(diffs)
        estimate = math.exp(mean)
        if spread is not None:
            half = float(stats.t.ppf(0.5 + confidence / 2, spread.dof)) * spread.sd / math.sqrt(len(diffs))
            return Interval(estimate, math.exp(mean - half), math.exp(mean + half))
        if len(diffs) < 2:
            return Interval(estimate, None, None)
        if max(diffs) == min(diffs):  # identical ratios: no spread to speak of
            return Interval(estimate, estimate, estimate)
        with warnings.catch_warnings():  # nearly equal ratios: scipy warns, and the interval is a near-point
            warnings.simplefilter("ignore", RuntimeWarning)
            low, high = stats.ttest_1samp(diffs, 0.0).confidence_interval(confidence)
    else:
        log_base = [math.log(value) for value in baseline_s]
        log_spec = [math.log(value) for value in speculative_s]
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


def chained_speedup_interval(
    own: Interval,
    own_dof: int | None,
    reference_baseline_s: Sequence[float],
    own_baseline_s: Sequence[float],
    baseline_spread: PooledSpread | None = None,
    confidence: float = CONFIDENCE,
) -> Interval:
    """A speedup over another baseline than its own: ``own`` (over its own baseline, with the degrees of freedom
    of its interval) times its own baseline's speed over the reference baseline, from each baseline's per-round
    times (seconds for the same work, timed in different blocks: unpaired). On log times the two add, and so do
    their variances, the degrees of freedom by Welch-Satterthwaite. ``baseline_spread``: the spread of a
    baseline's log round times pooled over more blocks (the same models on other prompts), in place of these two
    blocks' own. Both factors share the own baseline's noise, which cancels in the estimate but is counted twice
    in the interval: it errs wide. No interval where either factor has none."""
    from scipy import stats

    log_base = [math.log(value) for value in reference_baseline_s]
    log_own = [math.log(value) for value in own_baseline_s]
    estimate = own.estimate * math.exp(sum(log_base) / len(log_base) - sum(log_own) / len(log_own))
    if baseline_spread is not None:
        ratio_parts = [(baseline_spread.sd**2 * (1 / len(log_base) + 1 / len(log_own)), float(baseline_spread.dof))]
    elif len(log_base) >= 2 and len(log_own) >= 2:
        ratio_parts = [
            (statistics.variance(log_base) / len(log_base), len(log_base) - 1.0),
            (statistics.variance(log_own) / len(log_own), len(log_own) - 1.0),
        ]
    else:
        ratio_parts = []
    if not ratio_parts or own.low is None or own.high is None or not own_dof or own_dof < 1:
        return Interval(estimate, None, None)
    quantile = 0.5 + confidence / 2
    own_se = with_log_se(own, own_dof, confidence).log_se or 0.0
    parts = [(own_se**2, float(own_dof)), *ratio_parts]
    variance = sum(part for part, _ in parts)
    if variance <= 0:
        return Interval(estimate, estimate, estimate)
    dof = variance**2 / sum(part**2 / dof for part, dof in parts if part > 0)
    half = float(stats.t.ppf(quantile, dof)) * math.sqrt(variance)
    return Interval(estimate, estimate * math.exp(-half), estimate * math.exp(half), math.sqrt(variance), dof)


def with_log_se(interval: Interval, dof: int | None, confidence: float = CONFIDENCE) -> Interval:
    """``interval`` (a t interval of a log mean with ``dof`` degrees of freedom) with its standard error on the log
    scale, read back from its width; unchanged where it has no width or no dof."""
    from scipy import stats

    if interval.low is None or interval.high is None or not dof or dof < 1 or not interval.low > 0:
        return interval
    se = (math.log(interval.high) - math.log(interval.low)) / (2 * float(stats.t.ppf(0.5 + confidence / 2, dof)))
    return dataclasses.replace(interval, log_se=se, dof=float(dof))


def slower_p_from_intervals(best: Interval, other: Interval) -> float | None:
    """p-value of "``other`` is slower than ``best``" (two speedups over one baseline, each with its log standard
    error and dof): one-sided t on the difference of their logs, the variances added (Welch-Satterthwaite). Where
    both reached the baseline through a shared factor its noise is counted twice: it errs towards a tie. None
    where either lacks its standard error."""
    from scipy.special import stdtr

    if best.log_se is None or other.log_se is None or not best.dof or not other.dof:
        return None
    variance = best.log_se**2 + other.log_se**2
    difference = math.log(best.estimate) - math.log(other.estimate)
    if variance <= 0:
        return 0.0 if difference > 0 else 1.0
    dof = variance**2 / (best.log_se**4 / best.dof + other.log_se**4 / other.dof)
    return float(stdtr(dof, -difference / math.sqrt(variance)))


def geometric_mean_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The geometric mean of positive ``values`` (one speedup or ratio per case or prompt) with Student's t
    interval over their logs; no interval for one value. It is :func:`speedup_interval`'s paired interval, 1
    against 1/value per "round" having the log ratio log(value): one t interval for rounds, cases and prompts
    alike, rather than a second one written beside it."""
    if not values:
        raise ValueError("need at least one value")
    if min(values) <= 0:
        raise ValueError("values must be positive")
    return speedup_interval([1.0] * len(values), [1.0 / value for value in values], paired=True, confidence=confidence)


def slower_p_unpaired(best_s: Sequence[float], other_s: Sequence[float]) -> float | None:
    """p-value of "``other_s`` is slower than ``best_s``" (seconds for the same work, timed in different blocks,
    so no round pairs with another): Welch's one-sided t test on the mean log times. None below two times on
    either side; with no spread on either side, 0 or 1 by which mean is higher."""
    import warnings

    from scipy import stats

    if len(best_s) < 2 or len(other_s) < 2:
        return None
    if min(*best_s, *other_s) <= 0:
        raise ValueError("times must be positive")
    log_best = [math.log(value) for value in best_s]
    log_other = [math.log(value) for value in other_s]
    if max(log_best) == min(log_best) and max(log_other) == min(log_other):
        return 0.0 if sum(log_other) / len(log_other) > sum(log_best) / len(log_best) else 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_ind(log_other, log_best, equal_var=False, alternative="greater").pvalue)


def coefficient_of_variation(values: Sequence[float]) -> float | None:
    """Sample standard deviation over the mean; None below two values."""
    from scipy import stats

    if len(values) < 2:
        return None
    return float(stats.variation(values, ddof=1))
