"""Racing the draft lengths k of one (pair, engine, prompt): which to stop timing, and which are slower at the end.

Each round times every contender once, so the comparisons fit the additive model log time = case + round (drift
common to a round cancels; noise is multiplicative, hence logs) with the residual variance pooled over the race's
cases and rounds, and test differences of case effects one-sided against the leader (:func:`pick_best`).

The promise: within one (pair, engine, prompt) the chance that the race ever eliminates a k that is not slower than
the best is at most ``alpha``, over every comparison and every look (:func:`eliminations` after each round, up to
``max_looks``), when the residuals are normal, independent and of one variance (measured: the
docs/results/2026-12-01-default-cpu-run-pooled.md page). The step-down (:func:`_step_levels`) is corrected for
the leader being picked from the same data. :func:`rank_against_best` is the final ranking: one more look at
``alpha``. Why each correction: docs/measuring.md, "When a case stops being timed".
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

K = TypeVar("K", bound=Hashable)

SLOWER, TIED, UNKNOWN = "slower", "tied", "unknown"


def _logs(times: Mapping[K, Mapping[Hashable, float]]) -> dict[K, dict[Hashable, float]]:
    logs = {}
    for case, rounds in times.items():
        if any(not value > 0 for value in rounds.values()):
            raise ValueError(f"times of {case!r} must be positive")
        logs[case] = {r: math.log(value) for r, value in rounds.items()}
    return logs


@dataclass(frozen=True)
class _Fit:
    """The additive model log time = case + round, fitted by least squares: each case's effect, the factor by
    which the residual variance scales the variance of a difference of two effects, and that variance's estimate
    with its degrees of freedom (the residuals of every case and round pooled)."""

    cases: list
    effects: list[float]
    unscaled: Any  # (X'X)^+ restricted to the case effects
    residual_variance: float
    dof: int

    def difference(self, a: Hashable, b: Hashable) -> tuple[float, float]:
        """Effect of ``a`` minus effect of ``b``, and the residual variance's factor for its variance."""
        i, j = self.cases.index(a), self.cases.index(b)
        u = self.unscaled
        return self.effects[i] - self.effects[j], float(u[i, i] + u[j, j] - 2 * u[i, j])


def _fit(logs: Mapping[K, Mapping[Hashable, float]], with_rounds: bool = True) -> _Fit:
    import numpy as np

    cases = [case for case, values in logs.items() if values]
    rounds = list(dict.fromkeys(r for case in cases for r in logs[case])) if with_rounds else []
    where = {r: i for i, r in enumerate(rounds)}
    cells = [(c, r, value) for c, case in enumerate(cases) for r, value in logs[case].items()]
    # Case dummies, then round dummies but the first (the model is defined up to that constant).
    design = np.zeros((len(cells), len(cases) + max(len(rounds) - 1, 0)))
    for row, (c, r, _) in enumerate(cells):
        design[row, c] = 1.0
        if with_rounds and where[r]:
            design[row, len(cases) + where[r] - 1] = 1.0
    observed = np.array([value for _, _, value in cells])
    solution, _, rank, _ = np.linalg.lstsq(design, observed, rcond=None)
    residuals = observed - design @ solution
    dof = len(cells) - int(rank)
    variance = float(residuals @ residuals) / dof if dof > 0 else math.nan
    unscaled = np.linalg.pinv(design.T @ design)[: len(cases), : len(cases)]
    return _Fit(cases, [float(value) for value in solution[: len(cases)]], unscaled, variance, dof)


def case_effects(times: Mapping[K, Mapping[Hashable, float]]) -> dict[K, float]:
    """Each case's effect in the additive model log time = case + round (least squares): with every case
    timed in the same rounds, its mean log time up to a shared constant; cases timed in different rounds stay
    comparable through the rounds they share. Cases without a time are left out."""
    fit = _fit(_logs(times))
    return dict(zip(fit.cases, fit.effects))


def pick_best(times: Mapping[K, Mapping[Hashable, float]]) -> K:
    """The case with the lowest effect in :func:`case_effects` (the first given on a tie): the leader of a
    race, and the fastest k of a finished one."""
    effects = case_effects(times)
    if not effects:
        raise ValueError("no case has a time")
    return min(effects, key=effects.__getitem__)


def _one_sided_p(fit: _Fit, candidate: Hashable, leader: Hashable) -> float:
    """p-value of "the candidate is slower": one-sided t test of its effect against the leader's, with the
    residual variance pooled over every case and round of the fit (Student's t at the fit's residual degrees
    of freedom; with two cases, the paired t test)."""
    from scipy.special import stdtr  # Student's t distribution function, without scipy.stats' overhead

    difference, factor = fit.difference(candidate, leader)
    spread = math.sqrt(max(fit.residual_variance, 0.0) * factor)
    if spread <= 1e-12 * max(1.0, abs(difference)):  # no spread: certain, one way or the other
        return 0.0 if difference > 0 else 1.0
    return float(stdtr(fit.dof, -difference / spread))


def _step_levels(alpha: float, looks: int, contenders: int, family: int) -> list[float]:
    """The level of each step of the step-down: ``alpha / looks`` per look (Bonferroni over looks), and step r
    (0-based, smallest p-value first) at ``alpha_look / ((contenders - r) * (family - 1))``. The factor
    ``family - 1`` is what plain Holm against the leader lacks: the leader is picked from the same data, and
    against the observed best a tied case looks slower more often than against a fixed one."""
    return [alpha / looks / ((contenders - r) * (family - 1)) for r in range(contenders - 1)]


def _p_values(
    logs: Mapping[K, Mapping[Hashable, float]], best: K, min_rounds: int, paired: bool = True
) -> dict[K, float | None]:
    """Each other case's p-value against ``best`` (None below ``min_rounds`` rounds in common, or each of its own
    unpaired, or when the fit leaves no residual degree of freedom)."""
    fit = _fit(logs, with_rounds=paired)
    p_values: dict[K, float | None] = {}
    for case, values in logs.items():
        if case == best:
            continue
        common = sum(1 for r in values if r in logs[best]) if paired else min(len(values), len(logs[best]))
        p_values[case] = (
            _one_sided_p(fit, case, best)
            if common >= max(min_rounds, 2) and fit.dof > 0 and case in fit.cases
            else None
        )
    return p_values


def step_down(p_values: Mapping[K, float | None], alpha: float, looks: int, family: int) -> set[K]:
    """The cases the step-down rejects, the best among ``len(p_values) + 1`` contenders."""
    tested = sorted((p, i, case) for i, (case, p) in enumerate(p_values.items()) if p is not None)
    rejected = set()
    for (p, _, case), level in zip(tested, _step_levels(alpha, looks, len(p_values) + 1, family)):
        if p >= level:
            break
        rejected.add(case)
    return rejected


def eliminations(
    times: Mapping[K, Mapping[int, float]],
    *,
    alpha: float = 0.05,
    min_rounds: int = 3,
    max_looks: int,
    family: int | None = None,
) -> dict[K, K]:
    """The contenders to stop timing now, each with the leader that beat it.

    ``times[case][round]``: seconds per decode token of each contender (those not yet eliminated) in each block
    round it ran. A comparison needs ``min_rounds`` rounds in common.
    ``max_looks``: how many times the race may call this (its most rounds); each call spends
    ``alpha / max_looks``. ``family``: how many cases the race started with (default: the contenders); pass it
    for the promise to hold as stated when contenders have dropped out.
    """
    if max_looks < 1:
        raise ValueError(f"max_looks must be at least 1, got {max_looks}")
    logs = _logs(times)
    if sum(1 for values in logs.values() if values) < 2:
        return {}
    family = max(family or len(logs), len(logs))
    leader = pick_best(times)
    beaten = step_down(_p_values(logs, leader, min_rounds), alpha, max_looks, family)
    return {case: leader for case in logs if case in beaten}


def rank_against_best(
    times: Mapping[K, Mapping[Hashable, float]],
    best: K,
    *,
    alpha: float = 0.05,
    min_rounds: int = 2,
    paired: bool = True,
) -> dict[K, str]:
    """Each case but ``best``: "slower" (the step-down of :func:`eliminations` in one look at ``alpha``, over
    the same additive fit), "tied" (the test cannot tell them apart) or "unknown" (fewer than
    ``min_rounds`` rounds in common, or no times). ``paired=False``: cases timed in rounds of their own (a served
    engine's k, each on its own server) are compared without round effects, each needing ``min_rounds`` rounds;
    what drifts between their rounds is then noise the test carries, not removes."""
    logs = _logs(times)
    if best not in logs:
        raise ValueError(f"best case {best!r} has no times")
    p_values = _p_values(logs, best, min_rounds, paired)
    slower = step_down(p_values, alpha, 1, len(logs))
    return {case: SLOWER if case in slower else TIED if p is not None else UNKNOWN for case, p in p_values.items()}
