"""Invariants every result row must keep, checked where the row is built: a row that breaks one is *suspect*.

The bound: a decode speedup cannot exceed tau. A speculative run commits tau tokens per target pass; the greedy
baseline commits one per target pass. If a verify pass over k + 1 positions costs at least what the baseline's
one-token step costs (it does, on the same kernels: more rows are never cheaper), the speculative run spends at
least one baseline step per tau tokens, drafting aside, so speedup <= tau. A speedup above tau means a verify pass
cost less than a baseline step: the two runs' target passes ran unequal kernels, and the speedup credits
speculation with a kernel's gain.

The rule (:func:`speedup_bound_cause`): a row is suspect when the low end of its decode speedup's 95% interval (the
estimate itself where there is no interval: timed in one round) exceeds tau by more than
:data:`SUSPECT_TOLERANCE`. The low end, so that timing noise alone rarely flags a row; the tolerance for what the
interval does not hold: the baseline interpolated between its runs, per-token bookkeeping the two loops do not
share, the median runs the figures come from. Honest rows sit well below tau (every step also drafts), so 5% costs
nothing in sensitivity: the asymmetry this was written for read 8.86x at tau 6.20, 43% above.

Checked: rows of one sequence (batch 1) with a measured decode speedup and tau, greedy or sampled, either engine.
Under sampling tau varies run to run and the row's is its last run's, so the bound is the largest tau of its
requests. At batch > 1 the speedup is the whole batch's and tau a mean over rows that stop at different steps, so
the bound is not exact there: those rows are not checked.
"""

from __future__ import annotations

from typing import Any

from ..engine.numbers import is_finite_number
from ..settings.engines import runs_own_loop
from .schema import CaseResult

#: how far above tau the interval's low end may lie before the row is suspect (a fraction of tau)
SUSPECT_TOLERANCE = 0.05


def _positive(value: object) -> bool:
    return is_finite_number(value) and value > 0


def checked(row: CaseResult) -> bool:
    """Whether the bound applies to ``row``: one sequence, a measured decode speedup and a tau."""
    return row.batch == 1 and _positive(row.decode_speedup) and _positive(row.tau)


def tau_bound(row: CaseResult) -> float:
    """The tau the speedup is held to: the row's; under sampling the largest of its requests' (runs differ)."""
    if not row.temperature:
        return float(row.tau)
    return max([float(row.tau), *(float(tau) for tau in row.request_tau if _positive(tau))])


def verify_pass_share(row: CaseResult) -> float | None:
    """The median run's seconds per verify pass over the baseline's seconds per decode step (one token a step):
    below 1, a verify pass cost less than a baseline step. None where the row lacks the figures."""
    decoded = row.new_tokens - row.prefill_tokens
    if decoded <= 0 or not _positive(row.tau) or not _positive(row.verify_time_s):
        return None
    if not _positive(row.baseline_decode_tps):
        return None
    passes = decoded / row.tau
    return row.verify_time_s / passes * row.baseline_decode_tps


def _speedup_text(row: CaseResult) -> str:
    low, high = row.decode_speedup_ci_low, row.decode_speedup_ci_high
    interval = f"[{low:.2f}, {high:.2f}]" if low is not None and high is not None else "[no interval: one round]"
    return f"{row.decode_speedup:.2f} {interval}"


def _found(row: CaseResult) -> str:
    """What the row's timings say of the two passes' costs, in words with the figures."""
    share = verify_pass_share(row)
    probe = row.verify_cost_ratio
    probed = f"; the cost probe put v(k+1)/v(1) at {probe:.2f}" if _positive(probe) else ""
    if share is None:
        return f"the row has no verify time per pass to set against a baseline step{probed}"
    if share < 1:
        # Only what was measured: on the native engine the runs share one object of forms, kept per machine, so the
        # kernels differ only where a pass's rows ran another form; a peer engine's runs both keep its own kernels.
        why = (
            "so the two runs' kernels differ, or the machine's load changed between them"
            if runs_own_loop(row.engine)
            else f"yet both runs kept the {row.engine} engine's own kernels, so the machine's load changed between them"
        )
        return (
            f"a verify pass cost {share:.2f} of a baseline step{probed}, {why}, and the speedup is not "
            "speculation's alone"
        )
    return (
        f"yet a verify pass cost {share:.2f} of a baseline step in the median runs{probed}: the rounds' "
        "baselines and the median runs disagree"
    )


def speedup_bound_cause(row: CaseResult, tolerance: float = SUSPECT_TOLERANCE) -> str | None:
    """Why ``row``'s decode speedup breaks the bound speedup <= tau (see the module docstring), in words with the
    figures; None when it keeps it or is not checked."""
    if not checked(row):
        return None
    bound = tau_bound(row)
    low = row.decode_speedup_ci_low if row.decode_speedup_ci_low is not None else row.decode_speedup
    if not is_finite_number(low) or low <= bound * (1 + tolerance):
        return None
    return f"decode speedup {_speedup_text(row)} exceeds tau {bound:.2f} by more than {tolerance:.0%}: {_found(row)}"


def suspect_fields(row: CaseResult) -> dict[str, Any]:
    """The row's ``suspect`` and ``suspect_cause`` fields, from :func:`speedup_bound_cause`."""
    cause = speedup_bound_cause(row)
    return {"suspect": cause is not None, "suspect_cause": cause}
