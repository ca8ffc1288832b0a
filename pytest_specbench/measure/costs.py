"""The pair's measured costs (a typed :class:`CostProfile`) and the row fields the cost model derives from them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..engine.cost_model import (accepted_length_histogram, alpha_mle, position_acceptance, predicted_speedup,
                                 predicted_tau, recommended_k)
from ..engine.cost_probe import draft_token_cost, verify_costs
from ..engine.output_head import column_head_rows, settle_head_forms

#: the longest k the cost probe covers when a schedule chooses k (auto, heuristic)
SCHEDULE_MAX_K = 16


@dataclass(frozen=True)
class CostProfile:
    """What one pass costs on this machine, as the native engine runs it."""

    verify_costs_s: list[float]  # v(1) .. v(m): one target pass over m positions
    draft_token_s: float  # one drafted token
    column_head_rows: list[int]  # verify block sizes whose head runs as weight @ hidden.T

    @property
    def cost_ratio(self) -> float:
        """c: a drafted token's cost in one-token target steps."""
        return self.draft_token_s / self.verify_costs_s[0]


def probed_k(ks: Sequence[int | str], new_tokens: int | None = None, room: int | None = None) -> int:
    """The largest k whose verify cost v(k+1) the cost probe measures: the largest k run, at least 16 with a schedule,
    and never a block longer than a run can use (see :func:`probe_positions`)."""
    constant = [k for k in ks if isinstance(k, int)]
    longest = max(constant + ([SCHEDULE_MAX_K] if len(constant) < len(ks) else []))
    return probe_positions(longest, new_tokens, room) - 1


def probe_positions(longest_k: int, new_tokens: int | None = None, room: int | None = None) -> int:
    """How many positions the probe's longest verify block holds: min(k + 1, new tokens, room), and at least 2 where
    the room allows (the cost model needs v(1) and v(2)).

    A run of n new tokens never verifies more than n positions at once (each block is cut to what is left), and
    ``room``, the target's context window less the prompt, is as far as the cache can grow: measuring past either
    would time blocks no case runs, and past the window index past the position table.
    """
    positions = longest_k + 1
    if new_tokens is not None:
        positions = min(positions, max(new_tokens, 2))
    if room is not None:
        positions = min(positions, room)
    return max(positions, 1)


def measure_costs(target_model, drafter, input_ids: torch.Tensor, max_positions: int,
                  head_kernel: str = "auto", compile_length: int | None = None,
                  head_rows: int | None = None) -> CostProfile:
    """The cost model's inputs for one pair: v(1) .. v(max_positions), the draft's per-token cost, and the verify
    block sizes (2 .. ``head_rows``) whose head runs as weight @ hidden.T, every one measured here, before any
    timed run."""
    curve = verify_costs(target_model, input_ids, max_positions, head_kernel=head_kernel,
                         compile_length=compile_length)
    head_rows = max(head_rows or 0, max_positions)
    settle_head_forms(target_model, head_rows, head_kernel)
    return CostProfile(verify_costs_s=curve,
                       draft_token_s=draft_token_cost(drafter, input_ids, compile_length=compile_length),
                       column_head_rows=column_head_rows(target_model, head_kernel, head_rows))


def case_column_head_rows(engine: str, k: int | str, costs: CostProfile | None) -> list[int]:
    """The verify block sizes of a case whose head ran as weight @ hidden.T: native engine only, and at a
    constant k only blocks of k + 1 rows or fewer."""
    if costs is None or engine != "native":
        return []
    rows = list(costs.column_head_rows)
    return [m for m in rows if m <= k + 1] if isinstance(k, int) else rows


def cost_model_fields(k: int | str, drafted_per_step: list[int], accepted_per_step: list[int],
                      costs: CostProfile | None, decode_speedup: float) -> dict[str, Any]:
    """The row's cost-model fields from a run's per-step counts and the pair's measured costs."""
    alpha = alpha_mle(drafted_per_step, accepted_per_step)
    fields: dict[str, Any] = {
        "alpha": alpha,
        "position_acceptance": position_acceptance(drafted_per_step, accepted_per_step),
        "accepted_length_histogram": accepted_length_histogram(drafted_per_step, accepted_per_step),
    }
    if costs is None:
        return fields
    curve, c = costs.verify_costs_s, costs.cost_ratio
    fields.update(cost_ratio=c, draft_token_ms=1000 * costs.draft_token_s, verify_costs_ms=[1000 * v for v in curve])
    if not isinstance(k, int) or k >= len(curve):  # a schedule's k changes step to step: one k's predictions fail
        return fields
    fields["verify_cost_ratio"] = curve[k] / curve[0]
    if alpha is not None:
        predicted = predicted_speedup(alpha, k, c, curve)
        fields.update(predicted_tau=predicted_tau(alpha, k), predicted_speedup=predicted,
                      efficiency=decode_speedup / predicted if predicted > 0 else None,
                      recommended_k=recommended_k(alpha, c, curve))
    return fields
