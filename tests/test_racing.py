"""Racing the k values of one (pair, engine, prompt): exact cases, then simulated races with fixed seeds.

A simulated block: log time of case k in round r = log(true time of k) + drift of round r (shared by every case
of the round) + noise of its own. The race calls eliminations() after every round and drops what it returns.
The checks that judge the race (false-alarm rate, power) are also run on planted bugs, and must catch them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping

import numpy as np
import pytest
from scipy import stats

from pytest_specbench.results import racing
from pytest_specbench.results.racing import case_effects, eliminations, pick_best, rank_against_best

ALPHA = 0.05
KS = (1, 2, 4, 8, 16)
ROUNDS = 16
BLOCKS = 400


def _round_times(rng: np.random.Generator, true: Mapping[int, float], drift: float, noise: float) -> dict[int, float]:
    shared = rng.normal(0.0, drift)
    return {k: t * math.exp(shared + rng.normal(0.0, noise)) for k, t in true.items()}


def race(
    true: Mapping[int, float], seed: int, *, rounds: int = ROUNDS, drift: float = 0.05, noise: float = 0.04
) -> dict[int, int]:
    """One simulated race; returns {eliminated k: the round it went}."""
    rng = np.random.default_rng(seed)
    times: dict[int, dict[int, float]] = {k: {} for k in true}
    out: dict[int, int] = {}
    for r in range(rounds):
        # Every case draws its noise each round, run or not, so a seed gives the same times to every variant.
        for k, value in _round_times(rng, true, drift, noise).items():
            if k not in out:
                times[k][r] = value
        beaten = eliminations(
            {k: times[k] for k in true if k not in out}, alpha=ALPHA, max_looks=rounds, family=len(true)
        )
        out.update(dict.fromkeys(beaten, r))
    return out


def races(true: Mapping[int, float], seed: int, **kw) -> list[dict[int, int]]:
    return [race(true, seed + i, **kw) for i in range(BLOCKS)]


def within_alpha(errors: int, trials: int = BLOCKS) -> bool:
    """The false-alarm check: fails when a binomial test says the rate is above alpha (p < 0.01)."""
    return stats.binomtest(errors, trials, ALPHA, alternative="greater").pvalue >= 0.01


def rate(outcomes: list[dict[int, int]], event: Callable[[dict[int, int]], bool]) -> float:
    return sum(map(event, outcomes)) / len(outcomes)


NULL = dict.fromkeys(KS, 1.0)
# k=4 is best, 10% faster than the next (k=2); k=1 and k=16 are clearly slower.
SEPARATED = {1: 1.35, 2: 1.10, 4: 1.00, 8: 1.12, 16: 1.50}


def _null_false_alarms(seed: int = 1000) -> int:
    return sum(bool(outcome) for outcome in races(NULL, seed))


def _keeps_best_and_finds_slower(seed: int, **kw) -> tuple[bool, bool]:
    """(the best kept within alpha, every slower k eliminated, the 10% slower ones too, in 90% of blocks)."""
    outcomes = races(SEPARATED, seed, **kw)
    best_lost = sum(4 in outcome for outcome in outcomes)
    found = rate(outcomes, lambda outcome: all(k in outcome for k in (1, 2, 8, 16)))
    return within_alpha(best_lost), found >= 0.9


# --- exact cases ------------------------------------------------------------------------------


def test_nothing_to_race_below_two_contenders_or_min_rounds():
    assert eliminations({}, max_looks=5) == {}
    assert eliminations({1: {0: 1.0, 1: 1.0, 2: 1.0}}, max_looks=5) == {}
    # A clearly slower case, but only two rounds in common: not compared yet.
    assert eliminations({1: {0: 1.0, 1: 1.01}, 2: {0: 2.0, 1: 2.02}}, max_looks=5) == {}
    with pytest.raises(ValueError, match="max_looks"):
        eliminations({1: {0: 1.0}}, max_looks=0)
    with pytest.raises(ValueError, match="positive"):
        eliminations({1: {0: 0.0}, 2: {0: 1.0}}, max_looks=1)


def test_a_clearly_slower_case_goes_to_the_leader_and_a_tied_one_stays():
    drift = [1.0, 1.3, 0.8, 1.1, 0.9, 1.2, 1.05, 0.95]  # large round drift, cancelled by pairing
    wiggle = [1.01, 1.0, 1.02, 0.99, 1.01, 1.0, 0.99, 1.01]
    times = {
        "fast": {r: 1.0 * d for r, d in enumerate(drift)},
        "tied": {r: 1.0 * d * w for r, (d, w) in enumerate(zip(drift, wiggle))},
        "slow": {r: 1.5 * d * w for r, (d, w) in enumerate(zip(drift, reversed(wiggle)))},
    }
    assert pick_best(times) == "fast"
    assert eliminations(times, max_looks=8) == {"slow": "fast"}
    assert rank_against_best(times, "fast") == {"tied": "tied", "slow": "slower"}


def test_cases_timed_in_different_rounds_are_compared_over_the_rounds_they_share():
    # Additive log data: case effects are recovered exactly however the rounds overlap.
    effect = {"a": 0.0, "b": 0.2, "c": 0.5}
    drift = [0.0, 0.4, -0.3, 0.1, 0.6, -0.2]
    ran = {"a": range(0, 6), "b": range(2, 6), "c": range(0, 3)}
    times = {case: {r: math.exp(effect[case] + drift[r]) for r in ran[case]} for case in effect}
    effects = case_effects(times)
    assert effects["b"] - effects["a"] == pytest.approx(0.2) and effects["c"] - effects["a"] == pytest.approx(0.5)
    assert pick_best(times) == "a"
    # c and a share 3 rounds, b and a 4; with no spread the differences are certain.
    assert eliminations(times, max_looks=1) == {"b": "a", "c": "a"}
    assert eliminations(times, max_looks=1, min_rounds=4) == {"b": "a"}
    assert rank_against_best({**times, "d": {9: 1.0}}, "a") == {"b": "slower", "c": "slower", "d": "unknown"}


# --- simulated races ----------------------------------------------------------------------------


def test_null_race_keeps_the_family_wise_false_alarm_rate_within_alpha():
    errors = _null_false_alarms()
    assert within_alpha(errors), f"{errors}/{BLOCKS} null races eliminated some k"


def test_race_keeps_the_best_k_and_eliminates_the_clearly_slower_ones():
    kept, found = _keeps_best_and_finds_slower(2000)
    assert kept and found


def test_final_ranking_of_tied_cases_keeps_alpha():
    assert within_alpha(_final_ranking_false_alarms())


def _final_ranking_false_alarms(seed: int = 3000, rounds: int = 10) -> int:
    """One look at the end: how many null blocks call some k slower than the picked best."""
    errors = 0
    for i in range(BLOCKS):
        rng = np.random.default_rng(seed + i)
        times: dict[int, dict[int, float]] = {k: {} for k in KS}
        for r in range(rounds):
            for k, value in _round_times(rng, NULL, 0.05, 0.04).items():
                times[k][r] = value
        errors += racing.SLOWER in rank_against_best(times, pick_best(times)).values()
    return errors


# --- planted bugs: the checks above must catch them ------------------------------------------------


def test_the_check_catches_a_race_without_correction(monkeypatch):
    # Plain alpha for every comparison at every look.
    monkeypatch.setattr(racing, "_step_levels", lambda alpha, looks, contenders, family: [alpha] * (contenders - 1))
    errors = _null_false_alarms()
    assert not within_alpha(errors) and errors / BLOCKS > 2 * ALPHA


def test_the_check_catches_holm_against_the_picked_best_alone(monkeypatch):
    # Holm over the comparisons with the best, blind to the best being picked from the same data.
    monkeypatch.setattr(
        racing,
        "_step_levels",
        lambda alpha, looks, contenders, family: [alpha / looks / (contenders - 1 - r) for r in range(contenders - 1)],
    )
    assert not within_alpha(_final_ranking_false_alarms())


def test_the_check_catches_an_unpaired_comparison(monkeypatch):
    # A fit without round effects: the shared round drift stays in the noise, and power is lost.
    assert _keeps_best_and_finds_slower(4000, drift=0.10) == (True, True)
    fit = racing._fit
    monkeypatch.setattr(racing, "_fit", lambda logs, with_rounds=True: fit(logs, with_rounds=False))
    kept, found = _keeps_best_and_finds_slower(4000, drift=0.10)
    assert not found


def test_the_check_catches_a_variance_pooled_without_its_degrees_of_freedom(monkeypatch):
    # The pooled variance read as if known (a normal quantile): at 3 rounds of 5 tied cases, too many false alarms.
    fit = racing._fit

    def as_if_known(logs, with_rounds=True):
        result = fit(logs, with_rounds)
        return dataclasses.replace(result, dof=10**6) if result.dof > 0 else result

    assert within_alpha(_final_ranking_false_alarms(rounds=3))
    monkeypatch.setattr(racing, "_fit", as_if_known)
    assert not within_alpha(_final_ranking_false_alarms(rounds=3))


# --- unpaired: each k timed in rounds of its own (a served engine's k, one server each) ----------------------


def _unpaired_block(true: Mapping[int, float], seed: int, rounds: int) -> dict[int, dict[tuple[int, int], float]]:
    rng = np.random.default_rng(seed)
    # Each k's round is its own (k, r): its drift is noise of its own, which the unpaired test must carry.
    return {
        k: {(k, r): t * math.exp(rng.normal(0.0, 0.05) + rng.normal(0.0, 0.04)) for r in range(rounds)}
        for k, t in true.items()
    }


def _unpaired_best(times: Mapping[int, Mapping]) -> int:
    return min(times, key=lambda k: float(np.mean(np.log(list(times[k].values())))))


def _unpaired_outcomes(true: Mapping[int, float], seed: int, rounds: int = 6) -> list[dict[int, str]]:
    outcomes = []
    for i in range(BLOCKS):
        times = _unpaired_block(true, seed + i, rounds)
        outcomes.append(rank_against_best(times, _unpaired_best(times), paired=False))
    return outcomes


def _unpaired_false_alarms(seed: int = 5000) -> int:
    return sum(racing.SLOWER in outcome.values() for outcome in _unpaired_outcomes(NULL, seed))


def test_unpaired_final_ranking_of_tied_cases_keeps_alpha():
    errors = _unpaired_false_alarms()
    assert within_alpha(errors), f"{errors}/{BLOCKS} null blocks called some k slower"


def test_unpaired_ranking_finds_the_clearly_slower_k():
    outcomes = _unpaired_outcomes(SEPARATED, 6000, rounds=8)
    assert rate(outcomes, lambda outcome: outcome[1] == outcome[16] == racing.SLOWER) >= 0.9
    assert all(set(outcome) == {1, 2, 8, 16} for outcome in outcomes)  # the best, k=4, is picked in every block


def test_the_unpaired_check_catches_a_test_blind_to_the_best_being_picked(monkeypatch):
    assert within_alpha(_unpaired_false_alarms())
    monkeypatch.setattr(
        racing,
        "_step_levels",
        lambda alpha, looks, contenders, family: [alpha / looks / (contenders - 1 - r) for r in range(contenders - 1)],
    )
    assert not within_alpha(_unpaired_false_alarms())


def test_cases_sharing_no_round_are_unknown_unless_compared_unpaired():
    times = _unpaired_block(SEPARATED, 7000, 4)
    assert set(rank_against_best(times, 4).values()) == {racing.UNKNOWN}
    assert rank_against_best(times, 4, paired=False, min_rounds=5) == dict.fromkeys((1, 2, 8, 16), racing.UNKNOWN)
