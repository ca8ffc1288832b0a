"""The cost model behind a speedup: acceptance alpha, tokens per step and the predicted speedup.

Plain formulas on built-in types (no torch, no pytest), after Leviathan, Kalman and Matias (ICML 2023), changed
where a CPU differs from the textbook: a verify pass costs the measured curve v(m) over its length m, not one target
step; a step drafts what the drafter actually proposed, not always k; and the draft's catch-up pass (reading its
own last token after a block accepted whole) is priced. :func:`predict_steps` predicts a row from its steps as they
ran; :func:`predict_proposals` predicts any k for the recommendation; the textbook :func:`predicted_speedup` and
:func:`recommended_k` serve the schedules that choose k step by step. Each formula, alpha's censored maximum
likelihood and tau(d) included: docs/engines.md, "The cost model".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: the lowest v(m)/v(1) a probe may report: at equal kernels more rows never cost less, so a wider pass well below a
#: one-row step is the probe's noise or an unequal kernel, not a cost
CURVE_FLOOR = 0.9
#: tries of the cost probe's curve while it dips below the floor (measure/costs.py)
PROBE_TRIES = 3


def lowest_ratio(verify_costs: Sequence[float], longest: int | None = None) -> tuple[int, float]:
    """The m in 2 .. ``longest`` (all: None) whose v(m)/v(1) is lowest, and that ratio; (1, 1.0) for a curve of one
    point. ``verify_costs[m - 1]`` is v(m)."""
    last = len(verify_costs) if longest is None else min(longest, len(verify_costs))
    ratios = [(m, verify_costs[m - 1] / verify_costs[0]) for m in range(2, last + 1) if verify_costs[0] > 0]
    return min(ratios, key=lambda pair: pair[1], default=(1, 1.0))


def bounded_curve(verify_costs: Sequence[float]) -> list[float]:
    """The curve priced: each v(m) at least v(1). At equal kernels more rows never cost less; a wider pass measured a
    little below a one-row step (within :data:`CURVE_FLOOR`: the probe's noise) is priced as one, so that a step never
    costs less than the greedy token it replaces. A dip past the floor is a fault, flagged (:func:`curve_dip`)."""
    return [max(v, verify_costs[0]) for v in verify_costs]


def curve_dip(verify_costs: Sequence[float], longest: int | None = None, floor: float = CURVE_FLOOR) -> str:
    """Why the curve up to v(``longest``) is no cost (its lowest v(m)/v(1) below ``floor``), in words with the figure;
    "" where it is one."""
    m, ratio = lowest_ratio(verify_costs, longest)
    if ratio >= floor:
        return ""
    return f"v({m})/v(1) = {ratio:.2f}, below {floor:.2f}: a {m}-row pass cheaper than a one-row step"


def _decode_steps(drafted_per_step: Sequence[int], accepted_per_step: Sequence[int]) -> list[tuple[int, int]]:
    # Index 0 is the prefill (0 drafted); steps that drafted nothing carry no acceptance information.
    return [(d, a) for d, a in zip(drafted_per_step, accepted_per_step) if d > 0]


def alpha_mle(drafted_per_step: Sequence[int], accepted_per_step: Sequence[int]) -> float | None:
    """Maximum-likelihood per-token acceptance under the i.i.d. model, truncated at each step's drafted count.

    None when no step drafted anything (prompt lookup that never found a match).
    """
    steps = _decode_steps(drafted_per_step, accepted_per_step)
    if not steps:
        return None
    accepted = sum(a for _, a in steps)
    rejections = sum(1 for d, a in steps if a < d)
    return accepted / (accepted + rejections) if accepted + rejections else 0.0


def predicted_tau(alpha: float, k: int) -> float:
    """Expected tokens committed per verify pass with k drafted: (1 - alpha^(k+1)) / (1 - alpha)."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def expected_tau_of_steps(alpha: float, drafted_per_step: Sequence[int]) -> float:
    """Mean predicted tau over the decode steps as they ran (a shortened last block, a step with 0 drafted).

    The measured tau of a run averages over its actual blocks, so this is what it should equal
    in expectation; index 0 (the prefill) is left out.
    """
    steps = list(drafted_per_step[1:])
    return sum(predicted_tau(alpha, d) for d in steps) / len(steps) if steps else 0.0


def predicted_speedup(alpha: float, k: int, cost_ratio: float, verify_costs: Sequence[float]) -> float:
    """tau(k) * v(1) / (k * c * v(1) + v(k+1)); ``verify_costs[m - 1]`` is v(m)."""
    v1 = verify_costs[0]
    return predicted_tau(alpha, k) * v1 / (k * cost_ratio * v1 + verify_costs[k])


def recommended_k(alpha: float, cost_ratio: float, verify_costs: Sequence[float]) -> int:
    """The k in 1 .. len(verify_costs) - 1 with the highest predicted speedup (the smallest on a tie)."""
    ks = range(1, len(verify_costs))
    if not ks:
        raise ValueError("the verify-cost curve needs v(1) and v(2) at least")
    return max(ks, key=lambda k: (predicted_speedup(alpha, k, cost_ratio, verify_costs), -k))


def position_acceptance(drafted_per_step: Sequence[int], accepted_per_step: Sequence[int]) -> list[float | None]:
    """Entry i - 1: of the steps that drafted at least i tokens, the share whose i-th token was accepted."""
    steps = _decode_steps(drafted_per_step, accepted_per_step)
    longest = max((d for d, _ in steps), default=0)
    shares: list[float | None] = []
    for i in range(1, longest + 1):
        reached = [a for d, a in steps if d >= i]
        shares.append(sum(1 for a in reached if a >= i) / len(reached) if reached else None)
    return shares


def position_counts(drafted_per_step: Sequence[int], accepted_per_step: Sequence[int]) -> list[tuple[int, int]]:
    """Entry i - 1: (steps that drafted at least i tokens, those whose i-th token was accepted); pools across runs."""
    steps = _decode_steps(drafted_per_step, accepted_per_step)
    longest = max((d for d, _ in steps), default=0)
    return [
        (sum(1 for d, _ in steps if d >= i), sum(1 for d, a in steps if d >= i and a >= i))
        for i in range(1, longest + 1)
    ]


def accepted_length_histogram(drafted_per_step: Sequence[int], accepted_per_step: Sequence[int]) -> list[int]:
    """Entry a: decode steps (that drafted something) which accepted exactly a tokens."""
    steps = _decode_steps(drafted_per_step, accepted_per_step)
    counts = [0] * (max((d for d, _ in steps), default=0) + 1)
    for _, a in steps:
        counts[a] += 1
    return counts


# --- the run as it ran: proposal lengths, the shortened last block, the catch-up pass ---------------


def decode_tokens_of_steps(accepted_per_step: Sequence[int]) -> int:
    """Tokens the decode steps committed: each step's accepted tokens plus its own (index 0, the prefill, left out).

    Exact for a run of fixed length; a run stopped by EOS counts its last step's dropped tokens too.
    """
    return sum(a + 1 for a in accepted_per_step[1:])


def observed_proposals(
    k: int, drafted_per_step: Sequence[int], accepted_per_step: Sequence[int]
) -> list[tuple[int, bool]]:
    """What the drafter proposed at each decode step of a run at constant k: (length, reached k).

    A step that drafted fewer than min(k, tokens left - 1) tokens shows the drafter's whole
    proposal (prompt lookup, whose match ended there). A step that drafted k shows only that the
    drafter would have proposed at least k (``True``). A step cut short by the run's end (fewer
    than k drafted, exactly as many as the tokens left allowed) shows neither and is left out,
    unless every step was: the end of a run is not the drafter's doing.
    """
    left = decode_tokens_of_steps(accepted_per_step)
    observed, cut = [], []
    for d, a in zip(drafted_per_step[1:], accepted_per_step[1:]):
        block = min(k, left - 1)
        if d < block:
            observed.append((d, False))
        elif block >= k:
            observed.append((d, True))
        else:
            cut.append((d, True))
        left -= a + 1
    return observed or cut


def proposals_at(k: int, observed: Sequence[tuple[int, bool]]) -> list[int]:
    """The proposal lengths at another k from one run's (see :func:`observed_proposals`): each capped at k.

    A proposal that reached the run's k is taken to reach any k (exact below the run's k; beyond
    it, an assumption: a draft model always proposes k; prompt lookup is best read from its
    largest-k run, where its proposals stop short of k).
    """
    return [k if reached else min(d, k) for d, reached in observed]


def catch_up_passes(drafted_per_step: Sequence[int], accepted_per_step: Sequence[int]) -> int:
    """How many of a run's draft passes were two-position catch-ups: one after each block accepted whole that
    the next step drafts after (the draft has read neither its own last token nor the target's bonus token)."""
    return sum(
        1
        for step in range(len(drafted_per_step) - 1)
        if drafted_per_step[step] > 0
        and accepted_per_step[step] == drafted_per_step[step]
        and drafted_per_step[step + 1] > 0
    )


def _catch_up_share(alpha: float, drafted: int) -> float:
    """The chance that a step which drafted ``drafted`` tokens was accepted whole, so the draft catches up next."""
    return alpha**drafted if drafted > 0 else 0.0


def _step_cost(
    drafted: int, catch_up: float, cost_ratio: float, catch_up_extra: float, v: Sequence[float], step_overhead: float
) -> float:
    """One verify step in units of v(1): o + v(d + 1) / v(1) + d c, and (c2 - c) times the chance of a catch-up."""
    if drafted == 0:  # a plain target step: nothing drafted, no draft pass
        return step_overhead + 1.0
    return step_overhead + v[drafted] / v[0] + drafted * cost_ratio + catch_up * catch_up_extra


@dataclass(frozen=True)
class Prediction:
    """Predicted tokens and time (in units of v(1)) over some verify steps, and what they imply."""

    tokens: float  # expected tokens committed
    time: float  # expected time / v(1)
    steps: int

    @property
    def speedup(self) -> float:
        """Predicted decode speedup: a greedy token costs v(1)."""
        return self.tokens / self.time if self.time > 0 else 0.0

    @property
    def tau(self) -> float:
        """Predicted tokens per verify step."""
        return self.tokens / self.steps if self.steps else 0.0


def _check_curve(longest: int, verify_costs: Sequence[float]) -> None:
    if longest >= len(verify_costs):
        raise ValueError(
            f"a block of {longest} drafted tokens needs v({longest + 1}); the curve has {len(verify_costs)} points"
        )


def predict_steps(
    alpha: float,
    drafted_per_step: Sequence[int],
    cost_ratio: float,
    verify_costs: Sequence[float],
    catch_up_ratio: float | None = None,
    step_overhead: float = 0.0,
) -> Prediction:
    """The run as it ran: each decode step (index 0, the prefill, left out) at its own drafted length d.

    Tokens: the sum of tau(d) over the steps. Time, in units of v(1): the sum of
    o + v(d + 1) / v(1) + d c + alpha^(d of the step before) (c2 - c) (the catch-up, after a block accepted
    whole; none after a step that drafted nothing). A shortened last block, a step where prompt lookup found
    nothing (a plain target step: v(1)) and a proposal shorter than k all count as they ran.
    ``verify_costs[m - 1]`` is v(m), any unit; c, c2 (None: no dearer than one position) and o are over v(1).
    """
    steps = list(drafted_per_step[1:])
    _check_curve(max(steps, default=0), verify_costs)
    extra = (cost_ratio if catch_up_ratio is None else catch_up_ratio) - cost_ratio
    tokens = time = 0.0
    previous = 0
    for d in steps:
        tokens += predicted_tau(alpha, d)
        time += _step_cost(d, _catch_up_share(alpha, previous), cost_ratio, extra, verify_costs, step_overhead)
        previous = d
    return Prediction(tokens, time, len(steps))


def predict_proposals(
    alpha: float,
    proposals: Sequence[int],
    cost_ratio: float,
    verify_costs: Sequence[float],
    catch_up_ratio: float | None = None,
    step_overhead: float = 0.0,
) -> Prediction:
    """A long run whose steps draft the lengths ``proposals``, each equally likely, one step each.

    Per step: mean tau(q) tokens, for a mean o + v(q + 1) / v(1) + q c, plus (c2 - c) times the chance that a
    step drafts and follows a block accepted whole (P(q > 0) times the mean of alpha^q). With every proposal k
    (a draft model) it is the textbook speedup plus the catch-up and the overhead.
    """
    _check_curve(max(proposals, default=0), verify_costs)
    if not proposals:
        return Prediction(0.0, 0.0, 0)
    extra = (cost_ratio if catch_up_ratio is None else catch_up_ratio) - cost_ratio
    follows_full = sum(_catch_up_share(alpha, q) for q in proposals) / len(proposals)
    tokens = sum(predicted_tau(alpha, q) for q in proposals)
    time = sum(_step_cost(q, follows_full, cost_ratio, extra, verify_costs, step_overhead) for q in proposals)
    return Prediction(tokens, time, len(proposals))


def recommended_k_for(
    alpha: float,
    cost_ratio: float,
    verify_costs: Sequence[float],
    observed: Sequence[tuple[int, bool]] | None = None,
    catch_up_ratio: float | None = None,
    step_overhead: float = 0.0,
) -> int:
    """The k in 1 .. len(verify_costs) - 1 with the highest :func:`predict_proposals` speedup (the smallest on a tie).

    ``observed``: the drafter's proposals from a run (:func:`observed_proposals`), capped at each k by
    :func:`proposals_at`; None: a draft model, k every step. Past the longest proposal that stopped short, a
    larger k drafts nothing more, so the smallest k that reaches it wins: the recommendation means the same for
    prompt lookup as for a draft model.
    """
    ks = range(1, len(verify_costs))
    if not ks:
        raise ValueError("the verify-cost curve needs v(1) and v(2) at least")
    speedups = {
        k: predict_proposals(
            alpha,
            [k] if observed is None else proposals_at(k, observed),
            cost_ratio,
            verify_costs,
            catch_up_ratio,
            step_overhead,
        ).speedup
        for k in ks
    }
    # A relative tolerance, so a k whose extra length is never used ties with the shorter k despite rounding.
    best = max(speedups.values())
    return min(k for k, speedup in speedups.items() if speedup >= best * (1 - 1e-12))
