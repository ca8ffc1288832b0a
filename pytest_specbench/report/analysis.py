"""Read result rows through the cost model: pooled acceptance, the best and the recommended k per prompt.

Shared by the terminal summary, the plots and the Markdown report; rows are the schema's typed
:class:`CaseResult`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..engine.cost_model import alpha_mle, observed_proposals, position_counts, predict_proposals, proposals_at
from ..results.schema import CaseResult
from ..settings import axes
from ..settings.engines import runs_own_loop

#: the per-pair figures, in report order: ``<figure>_<pair>.png``; plus ``speedup_by_category.png``
FIGURES = ("speedup_vs_k", "acceptance_heatmap", "tau_vs_k", "position_acceptance", "verify_cost")


def k_order(k: int | str) -> tuple[int, int, str]:
    """Sort key of k values: the constant draft lengths in order, then the schedules by name."""
    return (1, 0, k) if isinstance(k, str) else (0, k, "")


def row_order(row: CaseResult) -> tuple:
    """Rows of one pair in table order: by prompt, k, engine."""
    return (row.prompt, k_order(row.k), row.engine)


def rows_by_pair(results: Sequence[CaseResult]) -> dict[str, list[CaseResult]]:
    """Each pair's rows, in the order given, the pairs in order of first appearance: the walk of every per-pair
    table, section and figure."""
    pairs: dict[str, list[CaseResult]] = {}
    for row in results:
        pairs.setdefault(row.pair, []).append(row)
    return pairs


def several_engines(results: Sequence[CaseResult]) -> bool:
    """Whether the rows come from more than one engine: only then do the tables have an engine column."""
    return len({row.engine for row in results}) > 1


#: the verdicts :func:`speedup_left_out` reads: the output the target's own, and the output not the target's
LOSSLESS, DIVERGED = "lossless", "diverged"
#: why a row's speedup is left out besides its verdict: it has none, or it is above tau
NO_SPEEDUP, SUSPECT = "no speedup", "suspect"


def speedup_left_out(row: CaseResult, *, lossless_only: bool = False) -> str | None:
    """Why ``row``'s decode speedup is not a measured one; None when it is. The one rule every ranking reads (the
    answer, the view against float32 greedy, the leaderboard view, the best rows of the tables and findings), so
    that none of them ranks, recommends or averages a speedup another leaves out.

    - its verdict, when it ``diverged``: a speedup bought with output other than the target's is no speedup (a
      tie-divergence, a near-tie under half precision, counts; so does ``not-checked``, the hf engine under
      sampling); with ``lossless_only`` (the leaderboard view: only lossless cases, see docs/spec-bench.md) any
      verdict but ``lossless``;
    - :data:`NO_SPEEDUP`: no positive decode speedup (None, NaN, zero or below);
    - :data:`SUSPECT`: a speedup above tau (results/invariants.py), which only unequal kernels in the two runs
      explain. The answer and the view still list such a k apart, marked.

    Round data, an elimination by the race and an unstable interval are no reason here: such a row is measured,
    and the answer ranks it by what it has (slower, or not ranked for want of rounds).
    """
    if row.verdict == DIVERGED or (lossless_only and row.verdict != LOSSLESS):
        return row.verdict
    speedup = row.decode_speedup
    if not (isinstance(speedup, (int, float)) and speedup > 0):  # NaN is not above 0
        return NO_SPEEDUP
    return SUSPECT if row.suspect else None


def constant_k_rows(rows: Sequence[CaseResult]) -> list[CaseResult]:
    """The rows the k sweep and the cost model read: this package's engine at a constant k."""
    return [row for row in rows if isinstance(row.k, int) and runs_own_loop(row.engine)]


def geometric_mean(values: Sequence[float | None]) -> float | None:
    """Geometric mean of the positive values (None when there are none)."""
    from scipy.stats import gmean

    positive = [value for value in values if value is not None and value > 0]
    return float(gmean(positive)) if positive else None


def pooled_position_acceptance(rows: Sequence[CaseResult]) -> list[tuple[int, int, float]]:
    """``(position, steps that drafted that far, share accepted)`` pooled over the rows' decode steps."""
    totals: list[list[int]] = []
    for row in rows:
        for i, (reached, accepted) in enumerate(position_counts(row.drafted_per_step, row.accepted_per_step)):
            if i == len(totals):
                totals.append([0, 0])
            totals[i][0] += reached
            totals[i][1] += accepted
    return [(i + 1, reached, accepted / reached) for i, (reached, accepted) in enumerate(totals) if reached]


#: a row's (axis, value) on each further axis the report groups by (:func:`further_values`)
Further = tuple[tuple[str, object], ...]


@dataclass
class PromptAnalysis:
    """One (pair, prompt): the measured best k, and what the cost model fed with every k's steps says."""

    pair: str
    prompt: str
    best_k: int
    best_row: CaseResult
    alpha: float | None  # pooled over every k of the prompt
    recommended_k: int | None
    predicted_curve: list[tuple[int, float]]  # (k, predicted decode speedup) for every k with a measured v(k+1)
    further: Further = ()  # its value on each further axis the report groups by (:func:`further_values`)


def best_row(rows: Sequence[CaseResult]) -> CaseResult:
    """The row with the highest decode speedup among those whose speedup is measured (:func:`speedup_left_out`), or
    among all where none is: what a table or a headline names best, with its verdict and marks beside it."""
    return max([row for row in rows if speedup_left_out(row) is None] or rows, key=lambda row: row.decode_speedup)


def pooled_alpha(rows: Sequence[CaseResult]) -> float | None:
    """The per-token acceptance estimated from every decode step of ``rows`` at once (None when none drafted)."""
    drafted = [d for row in rows for d in row.drafted_per_step]
    accepted = [a for row in rows for a in row.accepted_per_step]
    return alpha_mle(drafted, accepted)


def predicted_curve(rows: Sequence[CaseResult]) -> list[tuple[int, float]]:
    """(k, predicted decode speedup) for every k with a measured v(k+1), from the alpha pooled over ``rows`` (one
    pair and prompt) and what the drafter proposed in the largest-k run: the same per-step model as each row's
    prediction, so the recommendation means the same for prompt lookup as for a draft model."""
    alpha = pooled_alpha(rows)
    costed = [row for row in rows if isinstance(row.k, int) and row.verify_costs_ms and row.cost_ratio is not None]
    if alpha is None or not costed:
        return []
    source = max(costed, key=lambda row: row.k)
    curve, c = source.verify_costs_ms, source.cost_ratio
    if len(curve) < 2:
        return []
    catch_up, token = source.draft_catch_up_ms, source.draft_token_ms
    c2 = c * catch_up / token if catch_up is not None and token else None
    overhead = (source.step_overhead_ms or 0.0) / curve[0]
    observed = observed_proposals(source.k, source.drafted_per_step, source.accepted_per_step)
    return [
        (k, predict_proposals(alpha, proposals_at(k, observed), c, curve, c2, overhead).speedup)
        for k in range(1, len(curve))
    ]


def recommended_among(curve: Sequence[tuple[int, float]], ks: Sequence[int] | None = None) -> int | None:
    """The k with the highest predicted speedup (the smallest on a tie), among ``ks`` when given."""
    candidates = [(k, speedup) for k, speedup in curve if ks is None or k in ks]
    return max(candidates, key=lambda item: (item[1], -item[0]))[0] if candidates else None


def analyse_prompts(results: Sequence[CaseResult]) -> list[PromptAnalysis]:
    """Per (pair, prompt, dtype), in order of appearance, over the constant-k rows of this package's engine (each
    dtype has its own baseline and verify costs). The best is :func:`best_row`; the recommended k is the best
    predicted, never a k whose run's speedup is left out (:func:`speedup_left_out`: diverged or suspect)."""
    results = constant_k_rows(results)
    analyses = []
    keys = dict.fromkeys((row.pair, row.prompt, row.dtype, further_values(row)) for row in results)
    for key in keys:
        pair, prompt = key[:2]
        rows = [row for row in results if (row.pair, row.prompt, row.dtype, further_values(row)) == key]
        best = best_row(rows)
        curve = predicted_curve(rows)
        left_out = {row.k for row in rows if speedup_left_out(row) is not None}
        recommended = recommended_among(curve, [k for k, _ in curve if k not in left_out])
        analyses.append(
            PromptAnalysis(pair, prompt, best.k, best, pooled_alpha(rows), recommended, curve, further_values(best))
        )
    return analyses


@dataclass
class CategorySpeedup:
    """One (pair, category, k, dtype): the decode speedup over the category's prompts, each weighted equally."""

    pair: str
    category: str
    k: int
    prompts: int
    speedup: float  # geometric mean of the prompts' decode speedups
    low: float | None  # 95% interval: t over the prompts' log speedups (one prompt: its own interval)
    high: float | None
    dtype: str = ""
    further: Further = ()  # its value on each further axis the report groups by (:func:`further_values`)


def category_speedups(results: Sequence[CaseResult]) -> list[CategorySpeedup]:
    """Per (pair, category, k, dtype) of the constant-k rows of this package's engine, in order of appearance.

    With several prompts, the interval is Student's t over the prompts' log speedups: it holds the spread between
    prompts as well as each one's timing noise, and is what another prompt of the category may expect. Only
    measured speedups count (:func:`speedup_left_out`): a diverged or suspect case is no alternative of its k.
    """
    from ..results.statistics import Interval, geometric_mean_interval

    groups: dict[tuple[str, str, int, str, Further], list[CaseResult]] = {}
    for row in constant_k_rows(results):
        if speedup_left_out(row) is None:
            groups.setdefault((row.pair, row.category, row.k, row.dtype, further_values(row)), []).append(row)
    speedups = []
    for (pair, category, k, dtype, further), rows in groups.items():
        if len(rows) == 1:
            row = rows[0]
            interval = Interval(row.decode_speedup, row.decode_speedup_ci_low, row.decode_speedup_ci_high)
        else:
            interval = geometric_mean_interval([row.decode_speedup for row in rows])
        speedups.append(
            CategorySpeedup(
                pair, category, k, len(rows), interval.estimate, interval.low, interval.high, dtype, further
            )
        )
    return speedups


def best_category_speedups(results: Sequence[CaseResult]) -> list[CategorySpeedup]:
    """Per (pair, category, dtype): the k with the highest geometric mean among those that ran on all its
    prompts."""
    speedups = category_speedups(results)
    best: dict[tuple[str, str, str, Further], CategorySpeedup] = {}
    for item in speedups:
        key = (item.pair, item.category, item.dtype, item.further)
        most = max(s.prompts for s in speedups if (s.pair, s.category, s.dtype, s.further) == key)
        if item.prompts == most and (key not in best or item.speedup > best[key].speedup):
            best[key] = item
    return list(best.values())


def median(values: Sequence[float]) -> float | None:
    """The median of ``values`` (None when there are none)."""
    import statistics

    return statistics.median(values) if values else None


#: the axes an answer names in fields of its own, and the batch size, whose rows the batch view answers
_NAMED_AXES = ("pair", "engine", "prompt", "dtype", "batch")


def further_values(row: CaseResult) -> Further:
    """``row``'s (axis, value) on each axis the report groups by that an answer does not name in a field of its own:
    a new axis splits the answers by its declaration alone."""
    return tuple((name, getattr(row, name)) for name in axes.report_groups(exclude=_NAMED_AXES))


def with_further(name: str, further: Further) -> str:
    """``name`` with its values on the further axes, where it has any: ``tiny (context=6)``."""
    return name + (f" ({', '.join(f'{axis}={value}' for axis, value in further)})" if further else "")


def further_columns(grouped: Sequence[Any]) -> list[str]:
    """The further axes any of ``grouped`` (answers or views, each with ``further``) names: a table column each."""
    return list(dict.fromkeys(name for item in grouped for name, _ in item.further))


def further_cells(item: Any, columns: Sequence[str]) -> list[str]:
    """``item``'s value in each of the further axes' ``columns`` ("" where it has none)."""
    values = dict(item.further)
    return [str(values.get(name, "")) for name in columns]
