"""Draft-length schedules: how many tokens the drafter proposes at each step.

The engine asks ``next_k()`` before each step and reports ``update(drafted, accepted)`` after it.

- :class:`ConstantSchedule`: the same k every step (the seeds' setting).
- :class:`HeuristicSchedule`: transformers' ``"heuristic"`` draft length and confidence threshold, reset for
  every generation as ``"heuristic_transient"`` does.
- :class:`CostModelSchedule`: the k with the highest predicted speedup under the measured verify-cost curve v(m)
  and a running alpha (:mod:`pytest_specbench.engine.cost_model`), or a plain target step with a probe now and
  then; where v(m) is irregular (a CPU, a large vocabulary head) it follows the curve's cheap lengths instead of
  walking k one step at a time. k=auto uses :meth:`CostModelSchedule.tuned`. Both: docs/engines.md, "k schedules".
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence

from .cost_model import predicted_speedup
from .inputs import check_k


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
        check_k(k)
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

    ``verify_costs[m - 1]`` is v(m), a target pass over m positions (k up to ``len(verify_costs) - 1``);
    ``cost_ratio`` is one drafted token's time over v(1). Alpha is :func:`~pytest_specbench.engine.cost_model.alpha_mle`
    on counts decaying by ``decay`` per step (acceptance drifts along a text), from a prior ``prior_alpha`` worth
    ``prior_weight`` observations. When no k pays it takes plain steps, but the first and every ``probe_every``-th
    plain step in a row draft, or it could never learn the draft beats the prior. A model draft also ends a block at
    a token below ``confidence_threshold``, so k is a cap. ``unsure_weight`` counts that unsure token in alpha;
    ``grow`` (None: on when ``cost_ratio > 0``) makes a block after one accepted whole at least ``grow_factor`` as
    long; ``open_long`` opens a generation with the longest k; ``carry`` keeps that share of the counts across
    :meth:`reset`. No rule looks at the tokens, so the output stays the target's. The defaults are the generic rule;
    k=auto's per-drafter setting, :meth:`tuned`, and why: docs/engines.md, "k schedules".
    """

    def __init__(
        self,
        verify_costs: Sequence[float],
        cost_ratio: float,
        *,
        prior_alpha: float = 0.8,
        prior_weight: float = 1.0,
        decay: float = 0.8,
        probe_every: int = 4,
        confidence_threshold: float | None = 0.4,
        carry: float = 0.0,
        grow: bool | None = False,
        unsure_weight: float = 1.0,
        grow_factor: float = 2.0,
        open_long: bool = False,
    ) -> None:
        if len(verify_costs) < 2 or min(verify_costs) <= 0:
            raise ValueError("verify_costs must hold v(1), v(2), ... (at least two positive times)")
        if cost_ratio < 0:
            raise ValueError(f"cost_ratio must be >= 0, got {cost_ratio!r}")
        if not 0.0 <= carry <= 1.0:
            raise ValueError(f"carry must be between 0 and 1, got {carry!r}")
        self.verify_costs = [float(v) for v in verify_costs]
        self.cost_ratio = float(cost_ratio)
        self.prior_alpha, self.prior_weight, self.decay = prior_alpha, prior_weight, decay
        self.probe_every = probe_every
        self.confidence_threshold = confidence_threshold
        self.carry = carry
        self.grow = self.cost_ratio > 0 if grow is None else grow
        self.unsure_weight = unsure_weight
        self.grow_factor = grow_factor
        self.open_long = open_long
        self._accepted = 0.0
        self._rejections = 0.0
        self.reset()

    @classmethod
    def tuned(cls, verify_costs: Sequence[float], cost_ratio: float, *, confidence_stop: bool) -> CostModelSchedule:
        """k=auto's schedule for a drafter: the setting chosen offline for it (see the class notes).

        ``confidence_stop``: whether a model draft's blocks end at an unsure token (greedy decoding; the engine
        passes no threshold when sampling). How it compares with the best constant k per prompt, in simulation:
        docs/results/2026-12-01-kauto-held-out-tuned.md.
        """
        if cost_ratio > 0 and confidence_stop:
            # A high prior, as the sure tokens' acceptance in the traces; blocks open long and grow while accepted.
            return cls(
                verify_costs,
                cost_ratio,
                prior_alpha=0.9,
                prior_weight=2.0,
                decay=0.9,
                open_long=True,
                grow=True,
                unsure_weight=0.0,
            )
        if cost_ratio == 0:
            # Prompt lookup proposes only what it matched: a weak prior it leaves quickly, probing often.
            return cls(verify_costs, cost_ratio, prior_alpha=0.6, prior_weight=0.5, probe_every=2)
        return cls(verify_costs, cost_ratio)  # a draft model under sampling: not tuned, the generic rule

    def reset(self) -> None:
        self._accepted *= self.carry
        self._rejections *= self.carry
        self._plain_steps = 0
        self._observed = False
        self._asked = 0  # the k the last next_k returned
        self._run = 0  # the last block's length when it drafted all it was asked and was accepted whole, else 0

    @property
    def alpha(self) -> float:
        weight = self.prior_weight
        return (self._accepted + self.prior_alpha * weight) / (self._accepted + self._rejections + weight)

    def next_k(self) -> int:
        self._asked = self._choose()
        return self._asked

    def _choose(self) -> int:
        alpha = self.alpha
        longest = len(self.verify_costs) - 1
        if self.open_long and not self._observed:
            return longest
        best_k = max(
            range(1, longest + 1), key=lambda k: (predicted_speedup(alpha, k, self.cost_ratio, self.verify_costs), -k)
        )
        if self.grow and self._run:
            return max(best_k, min(longest, math.ceil(self.grow_factor * self._run)))
        if predicted_speedup(alpha, best_k, self.cost_ratio, self.verify_costs) > 1.0:
            return best_k
        probe = not self._observed or self._plain_steps >= self.probe_every
        return best_k if probe else 0  # k = 0: a plain target step, speedup 1 by definition

    def _stopped_unsure(self, drafted: int) -> bool:
        """Whether a draft model's confidence stop ended the block (fewer tokens than asked for; prompt lookup,
        whose c is 0, proposes fewer when its earlier match ends, which says nothing of its confidence)."""
        return self.cost_ratio > 0 and self.confidence_threshold is not None and drafted < self._asked

    def update(self, drafted: int, accepted: int) -> None:
        self._accepted *= self.decay
        self._rejections *= self.decay
        if drafted > 0:
            if self._stopped_unsure(drafted):
                # The block's last token is the one the draft was unsure of: alpha is the acceptance of the
                # tokens it was sure of, and the unsure one counts at unsure_weight.
                sure = drafted - 1
                self._accepted += min(accepted, sure)
                self._rejections += accepted < sure
                if accepted >= sure:
                    self._accepted += self.unsure_weight * (accepted == drafted)
                    self._rejections += self.unsure_weight * (accepted < drafted)
            else:
                self._accepted += accepted
                self._rejections += accepted < drafted
            self._observed = True
            self._plain_steps = 0
            self._run = drafted if accepted == drafted and drafted >= self._asked else 0
        else:
            self._plain_steps += 1
            self._run = 0
