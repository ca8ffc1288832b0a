"""Read result rows through the cost model: pooled acceptance, the best and the recommended k per prompt.

Shared by the terminal summary, the plots and the Markdown report; rows are plain dicts of the
schema's fields.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..engine.cost_model import alpha_mle, position_counts, predicted_speedup, recommended_k
from ..results.schema import row_value

#: the per-pair figures, in report order: ``<figure>_<pair>.png``; plus ``speedup_by_category.png``
FIGURES = ("speedup_vs_k", "acceptance_heatmap", "tau_vs_k", "position_acceptance", "verify_cost")


def k_order(k: int | str) -> tuple[int, int, str]:
    """Sort key of k values: the constant draft lengths in order, then the schedules by name."""
    return (1, 0, k) if isinstance(k, str) else (0, k, "")


def row_order(row: dict[str, Any]) -> tuple:
    """Rows of one pair in table order: by prompt, k, engine."""
    return (row["prompt"], k_order(row["k"]), row_value(row, "engine"))


def rows_by_pair(results: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each pair's rows, in the order given, the pairs in order of first appearance: the walk of every per-pair
    table, section and figure."""
    pairs: dict[str, list[dict[str, Any]]] = {}
    for row in results:
        pairs.setdefault(row["pair"], []).append(row)
    return pairs


def several_engines(results: Sequence[dict[str, Any]]) -> bool:
    """Whether the rows come from more than one engine: only then do the tables have an engine column."""
    return len({row_value(row, "engine") for row in results}) > 1


def constant_k_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows the k sweep and the cost model read: this package's engine at a constant k."""
    return [row for row in rows if isinstance(row["k"], int) and row_value(row, "engine") == "native"]


@dataclass
class EngineComparison:
    """One (pair, k) run by both engines: end-to-end speedups over the baseline, geometric means over prompts."""

    pair: str
    k: int | str
    prompts: int
    native_speedup: float
    hf_speedup: float
    ratio: float  # native / hf: geometric mean of the per-prompt ratios of speedups


def geometric_mean(values: Sequence[float | None]) -> float | None:
    """Geometric mean of the positive values (None when there are none)."""
    from scipy.stats import gmean

    positive = [value for value in values if value is not None and value > 0]
    return float(gmean(positive)) if positive else None


def compare_engines(results: Sequence[dict[str, Any]]) -> list[EngineComparison]:
    """Per (pair, k) where both engines ran the same prompts: each engine's speedup and native / hf.

    End to end (prefill included), because the engines split prefill and decoding differently:
    transformers' first target pass reads the prompt and verifies a draft block at once.
    """
    by_case = {(row["pair"], row["k"], row["prompt"], row_value(row, "engine")): row for row in results}
    comparisons = []
    for pair, k in dict.fromkeys((row["pair"], row["k"]) for row in results):
        prompts = [prompt for (p, kk, prompt, engine) in by_case if (p, kk, engine) == (pair, k, "native")
                   and (pair, k, prompt, "hf") in by_case]
        if not prompts:
            continue
        native = [by_case[pair, k, prompt, "native"]["speedup"] for prompt in prompts]
        hf = [by_case[pair, k, prompt, "hf"]["speedup"] for prompt in prompts]
        comparisons.append(EngineComparison(pair, k, len(prompts), geometric_mean(native), geometric_mean(hf),
                                            geometric_mean([n / h for n, h in zip(native, hf) if h > 0])))
    return sorted(comparisons, key=lambda c: (c.pair, k_order(c.k)))


def pooled_position_acceptance(rows: Sequence[dict[str, Any]]) -> list[tuple[int, int, float]]:
    """``(position, steps that drafted that far, share accepted)`` pooled over the rows' decode steps."""
    totals: list[list[int]] = []
    for row in rows:
        for i, (reached, accepted) in enumerate(position_counts(row_value(row, "drafted_per_step"),
                                                                row_value(row, "accepted_per_step"))):
            if i == len(totals):
                totals.append([0, 0])
            totals[i][0] += reached
            totals[i][1] += accepted
    return [(i + 1, reached, accepted / reached) for i, (reached, accepted) in enumerate(totals) if reached]


@dataclass
class PromptAnalysis:
    """One (pair, prompt): the measured best k, and what the cost model fed with every k's steps says."""

    pair: str
    prompt: str
    best_k: int
    best_row: dict[str, Any]
    alpha: float | None  # pooled over every k of the prompt
    recommended_k: int | None
    predicted_curve: list[tuple[int, float]]  # (k, predicted decode speedup) for every k with a measured v(k+1)


def pooled_alpha(rows: Sequence[dict[str, Any]]) -> float | None:
    drafted = [d for row in rows for d in row_value(row, "drafted_per_step")]
    accepted = [a for row in rows for a in row_value(row, "accepted_per_step")]
    return alpha_mle(drafted, accepted)


def analyse_prompts(results: Sequence[dict[str, Any]]) -> list[PromptAnalysis]:
    """Per (pair, prompt), in order of appearance, over the constant-k rows of this package's engine."""
    results = constant_k_rows(results)
    analyses = []
    keys = dict.fromkeys((row["pair"], row["prompt"]) for row in results)
    for pair, prompt in keys:
        rows = [row for row in results if row["pair"] == pair and row["prompt"] == prompt]
        best = max(rows, key=lambda row: row["decode_speedup"])
        alpha = pooled_alpha(rows)
        curve_ms = next((row["verify_costs_ms"] for row in rows if row_value(row, "verify_costs_ms")), None)
        cost_ratio = next((row["cost_ratio"] for row in rows if row_value(row, "cost_ratio") is not None), None)
        recommended, curve = None, []
        if alpha is not None and curve_ms and cost_ratio is not None and len(curve_ms) > 1:
            recommended = recommended_k(alpha, cost_ratio, curve_ms)
            curve = [(k, predicted_speedup(alpha, k, cost_ratio, curve_ms)) for k in range(1, len(curve_ms))]
        analyses.append(PromptAnalysis(pair, prompt, best["k"], best, alpha, recommended, curve))
    return analyses


def median(values: Sequence[float]) -> float | None:
    import statistics

    return statistics.median(values) if values else None
