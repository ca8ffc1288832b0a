"""Speedup intervals: hand-computed values, the estimate inside its interval, and coverage by simulation."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from pytest_specbench.results.statistics import (
    Interval,
    PooledSpread,
    coefficient_of_variation,
    pooled_spread,
    speedup_interval,
)


def test_paired_interval_matches_a_hand_computed_t_interval():
    baseline = [2.0, 2.2, 1.8, 2.1]
    speculative = [1.0, 1.0, 1.0, 1.2]
    diffs = [math.log(b / s) for b, s in zip(baseline, speculative)]
    mean = sum(diffs) / 4
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 3)
    half = 3.182446305284263 * sd / 2  # t(0.975, 3) * sd / sqrt(4)
    interval = speedup_interval(baseline, speculative, paired=True)
    assert interval.estimate == pytest.approx(math.exp(mean))
    assert interval.low == pytest.approx(math.exp(mean - half))
    assert interval.high == pytest.approx(math.exp(mean + half))
    assert interval.relative_half_width == pytest.approx((interval.high - interval.low) / (2 * interval.estimate))


def test_identical_ratios_give_a_point_interval_and_one_round_gives_none():
    assert speedup_interval([2.0, 4.0], [1.0, 2.0], paired=True) == Interval(2.0, 2.0, 2.0)
    one = speedup_interval([3.0], [1.5], paired=True)
    assert one.estimate == pytest.approx(2.0) and one.low is None and one.high is None
    assert one.relative_half_width == math.inf


def test_unpaired_interval_is_welchs_on_log_times():
    baseline = [2.0, 2.1, 1.9]
    speculative = [1.0, 1.1, 0.9, 1.05]
    interval = speedup_interval(baseline, speculative, paired=False)
    log_b = [math.log(v) for v in baseline]
    log_s = [math.log(v) for v in speculative]
    low, high = stats.ttest_ind(log_b, log_s, equal_var=False).confidence_interval(0.95)
    assert interval.estimate == pytest.approx(math.exp(sum(log_b) / 3 - sum(log_s) / 4))
    assert (interval.low, interval.high) == pytest.approx((math.exp(low), math.exp(high)))


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="at least one"):
        speedup_interval([], [1.0], paired=False)
    with pytest.raises(ValueError, match="positive"):
        speedup_interval([1.0, 0.0], [1.0, 1.0], paired=True)
    with pytest.raises(ValueError, match="equal counts"):
        speedup_interval([1.0, 2.0], [1.0], paired=True)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 100), st.floats(0.01, 100)), min_size=1, max_size=12), st.booleans())
def test_the_estimate_always_lies_inside_its_interval(pairs, paired):
    interval = speedup_interval([b for b, _ in pairs], [s for _, s in pairs], paired=paired)
    if interval.low is not None:
        assert interval.low <= interval.estimate <= interval.high


def test_coefficient_of_variation():
    assert coefficient_of_variation([1.0]) is None
    assert coefficient_of_variation([1.0, 3.0]) == pytest.approx(math.sqrt(2) / 2)


# --- coverage: the interval holds the true speedup about 95% of the time ---------------------------
#
# 2000 simulated cases of 4 paired rounds, log-normal noise (sd 0.1 per run) around a true speedup of
# 1.5, fixed seed. Coverage is binomial(2000, 0.95): sd 0.49%, so [0.93, 0.97] is +/-4 sd around 95%
# (a false alarm below 1e-4 for a correct interval). The planted bug, a normal quantile in place of
# Student's t at 4 rounds, covers about 88% and is rejected.

TRUE_SPEEDUP = 1.5


def _coverage(make_interval, rounds: int = 4, cases: int = 2000, seed: int = 1234) -> float:
    rng = random.Random(seed)
    covered = 0
    for _ in range(cases):
        drift = [rng.gauss(0, 0.2) for _ in range(rounds)]  # shared by both runs of a round: cancels when paired
        baseline = [TRUE_SPEEDUP * math.exp(d + rng.gauss(0, 0.1)) for d in drift]
        speculative = [math.exp(d + rng.gauss(0, 0.1)) for d in drift]
        interval = make_interval(baseline, speculative)
        covered += interval.low <= TRUE_SPEEDUP <= interval.high
    return covered / cases


def _normal_quantile_interval(baseline, speculative):
    diffs = [math.log(b / s) for b, s in zip(baseline, speculative)]
    mean = sum(diffs) / len(diffs)
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1))
    half = 1.959964 * sd / math.sqrt(len(diffs))
    return Interval(math.exp(mean), math.exp(mean - half), math.exp(mean + half))


@pytest.mark.slow
def test_paired_interval_covers_the_true_speedup_at_its_nominal_rate():
    coverage = _coverage(lambda b, s: speedup_interval(b, s, paired=True))
    assert 0.93 <= coverage <= 0.97, coverage


def test_coverage_check_rejects_a_normal_quantile_interval():
    coverage = _coverage(_normal_quantile_interval)
    assert not 0.93 <= coverage <= 0.97, coverage


# --- pooled over a block: the cases of one block share the machine, and with it the noise ------------------


def test_pooled_spread_is_each_cases_spread_around_its_own_mean():
    spread = pooled_spread([[1.0, 2.0, 3.0], [10.0, 12.0], [5.0]])
    # Squares 2 and 2 over 2 + 1 degrees of freedom; the one-value case adds none.
    assert spread is not None and spread.dof == 3 and spread.sd == pytest.approx(math.sqrt(4 / 3))
    assert pooled_spread([[1.0], [2.0]]) is None


def test_a_pooled_interval_is_students_at_the_pooled_degrees_of_freedom():
    baseline, speculative = [2.0, 2.2, 1.9], [1.0, 1.0, 1.0]
    spread = PooledSpread(0.05, 20)
    interval = speedup_interval(baseline, speculative, paired=True, spread=spread)
    mean = sum(math.log(b) for b in baseline) / 3
    half = stats.t.ppf(0.975, 20) * 0.05 / math.sqrt(3)
    assert interval.estimate == pytest.approx(math.exp(mean))
    assert (interval.low, interval.high) == pytest.approx((math.exp(mean - half), math.exp(mean + half)))
    with pytest.raises(ValueError, match="paired"):
        speedup_interval(baseline, speculative, paired=False, spread=spread)


def test_cases_of_unequal_spread_are_not_pooled():
    rng = random.Random(5)
    quiet = [[rng.gauss(0, 0.02) for _ in range(4)] for _ in range(5)]
    loud = [[rng.gauss(0, 0.3) for _ in range(4)]]
    assert pooled_spread(quiet) is not None
    assert pooled_spread(quiet + loud) is None
    assert pooled_spread([[0.1, 0.1, 0.1], [0.1, 0.2, 0.3]]) is None  # one without spread beside one with


# Coverage of the pooled interval, simulated as the default run's blocks are: 10 cases of different true
# speedups, 3 rounds, per-round log noise of 4.5% of each run's own plus 2% shared by the cases next to one
# baseline (pairs of cases, as --specbench-baseline-every=2 groups them). Only the first case of each of 2000
# blocks is scored, so the trials are independent: binomial(2000, 0.95) has sd 0.49%, and [0.93, 0.97] is
# +/-4 sd (a false alarm below 1e-4). Planted bugs: the half-width over the block's rounds instead of the
# case's (covers about 50%), and the spread taken around the block's mean instead of each case's (about 100%).

BLOCK_SPEEDUPS = [1.05, 0.84, 0.84, 0.59, 0.38, 1.29, 1.30, 1.57, 1.57, 1.48]


def _pooled_coverage(make_interval, blocks: int = 2000, rounds: int = 3, seed: int = 4321) -> float:
    rng = random.Random(seed)
    covered = 0
    for _ in range(blocks):
        ratios: list[list[float]] = [[] for _ in BLOCK_SPEEDUPS]
        for _ in range(rounds):
            shared = [rng.gauss(0, 0.02) for _ in range(len(BLOCK_SPEEDUPS) // 2)]
            for case, true in enumerate(BLOCK_SPEEDUPS):
                ratios[case].append(math.log(true) + shared[case // 2] + rng.gauss(0, 0.045))
        interval = make_interval(ratios)
        covered += interval.low <= BLOCK_SPEEDUPS[0] <= interval.high
    return covered / blocks


def _pooled(ratios):
    spread = pooled_spread(ratios)
    own = ratios[0]
    return speedup_interval([math.exp(r) for r in own], [1.0] * len(own), paired=True, spread=spread)


def _over_the_blocks_rounds(ratios):
    spread = pooled_spread(ratios, homogeneity_alpha=0.0)
    mean, total = sum(ratios[0]) / len(ratios[0]), sum(map(len, ratios))
    half = stats.t.ppf(0.975, spread.dof) * spread.sd / math.sqrt(total)
    return Interval(math.exp(mean), math.exp(mean - half), math.exp(mean + half))


def _around_the_blocks_mean(ratios):
    flat = [value for values in ratios for value in values]
    spread = pooled_spread([flat])
    return speedup_interval([math.exp(r) for r in ratios[0]], [1.0] * len(ratios[0]), paired=True, spread=spread)


@pytest.mark.slow
def test_the_pooled_interval_covers_the_true_speedup_at_its_nominal_rate():
    coverage = _pooled_coverage(_pooled)
    assert 0.93 <= coverage <= 0.97, coverage


@pytest.mark.parametrize("planted", [_over_the_blocks_rounds, _around_the_blocks_mean])
def test_the_pooled_coverage_check_rejects_a_planted_bug(planted):
    coverage = _pooled_coverage(planted)
    assert not 0.93 <= coverage <= 0.97, coverage
