"""Draft-length schedules: how many tokens the drafter proposes at each step.

The engine asks ``next_k()`` before each step and reports ``update(drafted, accepted)`` after
it. Three schedules:

- :class:`ConstantSchedule`: the same k every step (the seeds' setting).
- :class:`HeuristicSchedule`: Hugging Face's ``"heuristic"`` draft length (start at 20, +2 after
  a fully accepted block, -1 otherwise, never below 1) with its confidence threshold (a model
  drafter stops a block after a token whose probability is below 0.4), reset for every
  generation as transformers' ``"heuristic_transient"`` does.
- :class:`CostModelSchedule`: each step drafts the k that maximises the predicted decode speedup
  under the measured verify-cost curve v(m) and a running estimate of the acceptance alpha
  (see :mod:`pytest_specbench.engine.cost_model`); k = 0 (a plain target step) when no k is
  predicted to beat it, with a probe block now and then so the estimate can recover. Where v(m) is
  irregular, as on CPU with a large vocabulary head, this follows the curve's cheap lengths
  instead of walking k one step at a time.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from .cost_model import predicted_speedup


class DraftSchedule(ABC):
    """Chooses each step's draft length from what the previous steps accepted."""

    #: a model drafter ends its block after a token whose probability is below this (None: never)
    confidence_threshold: float | None = None

    def reset(self) -> None:
        """Start a new generation."""

    @abstractmethod
    def next_k(self) -> int:
        """Draft tokens to propose at the next step (0: a plain target step)."""

    def update(self, drafted: int, accepted: int) -> None:
        """The last step drafted ``drafted`` tokens and the target accepted the first ``accepted``."""


class ConstantSchedule(DraftSchedule):
    def __init__(self, k: int) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k (draft tokens per step) must be an integer >= 1, got {k!r}")
        self.k = k

    def next_k(self) -> int:
        return self.k


class HeuristicSchedule(DraftSchedule):
    """transformers' heuristic draft length: +2 after a fully accepted block, -1 otherwise."""

    def __init__(self, start: int = 20, confidence_threshold: float | None = 0.4) -> None:
        self.start = start
        self.confidence_threshold = confidence_threshold
        self.reset()

    def reset(self) -> None:
        self.k = self.start

    def next_k(self) -> int:
        return self.k

    def update(self, drafted: int, accepted: int) -> None:
        self.k = self.k + 2 if accepted == drafted else max(1, self.k - 1)


class CostModelSchedule(DraftSchedule):
    """Drafts the k with the highest predicted speedup under the measured costs and the running alpha.

    ``verify_costs[m - 1]`` is v(m), the time of a target pass over m positions (k up to
    ``len(verify_costs) - 1`` is considered); ``cost_ratio`` is one drafted token's time over v(1).
    Alpha is estimated as in :func:`~pytest_specbench.cost_model.alpha_mle` from counts that
    decay by ``decay`` per step (acceptance drifts along a text), starting from a prior of
    ``prior_alpha`` worth ``prior_weight`` observations. The prior does not decay, so it bounds
    alpha below 1: worth half an observation, it lets a draft that keeps being right reach alpha
    0.98 within the counts' memory (measured on Gemma 3 270M with its int8 copy, a prior worth 2
    capped alpha near 0.95 and k at 3 where blocks of 8 paid more). When no k is predicted to pay, it takes
    plain target steps, but the first step and every ``probe_every``-th plain step in a row still
    draft the most promising block: a schedule that never drafts would never learn that the
    draft is better than the prior says (measured on CPU: with v(2) = 1.9 v(1), an int8 draft pays
    only above alpha 0.78, and a prior of 0.6 alone would never draft).

    A model drafter also ends a block at a token it is unsure of (``confidence_threshold``, 0.4 as
    in transformers), so k is a cap and the blocks stay where the draft is likely right; alpha is
    then the acceptance of the tokens it was sure enough to draft.
    """

    def __init__(self, verify_costs: Sequence[float], cost_ratio: float, *, prior_alpha: float = 0.6,
                 prior_weight: float = 0.5, decay: float = 0.8, probe_every: int = 4,
                 confidence_threshold: float | None = 0.4) -> None:
        if len(verify_costs) < 2 or min(verify_costs) <= 0:
            raise ValueError("verify_costs must hold v(1), v(2), ... (at least two positive times)")
        if cost_ratio < 0:
            raise ValueError(f"cost_ratio must be >= 0, got {cost_ratio!r}")
        self.verify_costs = [float(v) for v in verify_costs]
        self.cost_ratio = float(cost_ratio)
        self.prior_alpha, self.prior_weight, self.decay = prior_alpha, prior_weight, decay
        self.probe_every = probe_every
        self.confidence_threshold = confidence_threshold
        self.reset()

    def reset(self) -> None:
        self._accepted = 0.0
        self._rejections = 0.0
        self._plain_steps = 0
        self._observed = False

    @property
    def alpha(self) -> float:
        weight = self.prior_weight
        return (self._accepted + self.prior_alpha * weight) / (self._accepted + self._rejections + weight)

    def next_k(self) -> int:
        alpha = self.alpha
        best_k = max(range(1, len(self.verify_costs)),
                     key=lambda k: (predicted_speedup(alpha, k, self.cost_ratio, self.verify_costs), -k))
        if predicted_speedup(alpha, best_k, self.cost_ratio, self.verify_costs) > 1.0:
            return best_k
        probe = not self._observed or self._plain_steps >= self.probe_every
        return best_k if probe else 0  # k = 0: a plain target step, speedup 1 by definition

    def update(self, drafted: int, accepted: int) -> None:
        self._accepted *= self.decay
        self._rejections *= self.decay
        if drafted > 0:
            self._accepted += accepted
            self._rejections += accepted < drafted
            self._observed = True
            self._plain_steps = 0
        else:
            self._plain_steps += 1
