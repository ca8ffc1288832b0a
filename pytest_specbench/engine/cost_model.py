"""The cost model behind a speedup: acceptance alpha, tokens per step tau(k) and the predicted speedup.

Plain formulas on built-in types (no torch, no pytest), after Leviathan, Kalman and Matias,
"Fast Inference from Transformers via Speculative Decoding" (ICML 2023), with one change: the
cost of a verify pass is the measured curve v(m) over its length m, not one target step.

- alpha: each drafted token is accepted with probability alpha, independently, until the first
  rejection. A step that drafted d tokens and accepted a < d saw a accepts and one rejection; a
  step with a == d saw d accepts and was cut (censored) at d. The likelihood is
  alpha^(sum a) * (1 - alpha)^(rejections), so the maximum-likelihood alpha is
  sum(a) / (sum(a) + rejections). Steps that drafted nothing say nothing about alpha.
- tau(k) = (1 - alpha^(k+1)) / (1 - alpha): expected tokens per verify pass (k + 1 when alpha is 1).
- predicted decode speedup = tau(k) * v(1) / (k * c * v(1) + v(k + 1)), with c the draft's
  per-token cost over v(1): a greedy step costs v(1) per token; a speculative step costs k draft
  tokens plus one verify pass over k + 1 positions and commits tau(k) tokens.
"""

from __future__ import annotations

from collections.abc import Sequence


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
    return [(sum(1 for d, _ in steps if d >= i), sum(1 for d, a in steps if d >= i and a >= i))
            for i in range(1, longest + 1)]


def accepted_length_histogram(drafted_per_step: Sequence[int], accepted_per_step: Sequence[int]) -> list[int]:
    """Entry a: decode steps (that drafted something) which accepted exactly a tokens."""
    steps = _decode_steps(drafted_per_step, accepted_per_step)
    counts = [0] * (max((d for d, _ in steps), default=0) + 1)
    for _, a in steps:
        counts[a] += 1
    return counts
