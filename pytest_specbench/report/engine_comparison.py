"""The engines side by side: per (pair, dtype, k) that several engines ran, each engine's speedups over the same
prompts, and each over the first, paired by prompt; shared by the terminal summary and the Markdown report."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..results.schema import CaseResult
from ..results.statistics import Interval, geometric_mean_interval
from ..settings.engines import ENGINE_NAMES
from .analysis import Further, further_cells, further_columns, further_values, k_order, speedup_left_out
from .batch import per_k_rows
from .dtype_view import dtype_order
from .formatting import value_with_interval


def _engine_order(name: str) -> int:
    return ENGINE_NAMES.index(name) if name in ENGINE_NAMES else len(ENGINE_NAMES)


@dataclass(frozen=True)
class EngineComparison:
    """One (pair, dtype, k) run by several engines on the same prompts: per engine and figure (``decode_speedup``,
    ``speedup``: end to end), the geometric mean over the prompts, and each engine's paired ratio to the first one's.
    Means and ratios are :class:`..results.statistics.Interval` s: a 95% t interval over the prompts' logs (from two
    prompts), which holds the spread between prompts as well as the timing noise."""

    pair: str
    dtype: str
    k: int | str
    engines: tuple[str, ...]
    prompts: tuple[str, ...]
    # (figure, engine) -> geometric mean over prompts; (figure, engine) -> that engine's / the first engine's
    means: dict[tuple[str, str], Interval]
    ratios: dict[tuple[str, str], Interval]
    further: Further = ()  # its value on each further axis the report groups by


#: the figures the engines are set side by side on: speedups, each over a greedy baseline in its own engine, and
#: tokens per second
ENGINE_FIGURES: tuple[tuple[str, str], ...] = (
    ("decode_speedup", "decode"),
    ("speedup", "end to end"),
    # each engine's own tokens per second: engines' greedy baselines differ, so a ratio of speedups misleads alone
    ("decode_tps", "decode tok/s"),
    ("baseline_decode_tps", "greedy tok/s"),
)


def compare_engines(results: Sequence[CaseResult]) -> list[EngineComparison]:
    """Per (pair, dtype, k) that two engines or more ran: every engine's speedups over the prompts they all measured
    (:func:`speedup_left_out`: no diverged or suspect row counts), engines in ``--specbench-engine``'s order; each
    ratio is over the first of them that ran.

    Decode and end to end both: the engines split prefill and decoding differently (transformers' first target pass
    reads the prompt and verifies a draft block at once; a server's first token waits on its scheduler).
    """

    by_case: dict[tuple[str, str, int | str, Further], dict[str, dict[str, CaseResult]]] = {}
    for row in per_k_rows(results):
        if speedup_left_out(row) is None and row.speedup is not None and row.speedup > 0:
            key = (row.pair, row.dtype, row.k, further_values(row))
            by_case.setdefault(key, {}).setdefault(row.engine, {})[row.prompt] = row
    comparisons = []
    for (pair, dtype, k, further), engine_rows in by_case.items():
        order = sorted(engine_rows, key=_engine_order)
        engines, prompts = [order[0]], list(engine_rows[order[0]])
        for engine in order[1:]:  # an engine that shares no prompt with those before it is left out, not the rest
            shared = [prompt for prompt in prompts if prompt in engine_rows[engine]]
            if shared:
                engines, prompts = [*engines, engine], shared
        if len(engines) < 2:
            continue
        means, ratios = {}, {}
        for figure, _ in ENGINE_FIGURES:
            values = {e: [getattr(engine_rows[e][p], figure) for p in prompts] for e in engines}
            for engine in engines:
                means[figure, engine] = geometric_mean_interval(values[engine])
                if engine != engines[0]:
                    paired = [mine / first for mine, first in zip(values[engine], values[engines[0]])]
                    ratios[figure, engine] = geometric_mean_interval(paired)
        comparisons.append(EngineComparison(pair, dtype, k, tuple(engines), tuple(prompts), means, ratios, further))
    dtypes = dtype_order([c.dtype for c in comparisons])
    return sorted(comparisons, key=lambda c: (c.pair, dtypes.index(c.dtype), k_order(c.k)))


def engine_table(comparisons: Sequence[EngineComparison]) -> tuple[list[str], list[list[str]]]:
    """Headers and text cells of the engines side by side: a line per (dtype, k, figure), a column per engine (its
    geometric mean over the prompts), then each other engine over the first one, paired by prompt."""
    present = {engine for c in comparisons for engine in c.engines}
    engines = sorted(present, key=_engine_order)
    reference, others = engines[0], engines[1:]  # a line without the reference engine has no ratios
    further = further_columns(comparisons)
    headers = [
        "dtype", "k", *further, "prompts", "figure", *engines, *(f"{engine} / {reference}" for engine in others)
    ]  # fmt: skip

    def cell(interval: Interval | None) -> str:
        return "" if interval is None else value_with_interval(interval.estimate, interval.low, interval.high)

    lines = []
    for c in comparisons:
        for figure, label in ENGINE_FIGURES:
            means = [cell(c.means.get((figure, engine))) for engine in engines]
            ratios = [cell(c.ratios.get((figure, engine)) if c.engines[0] == reference else None) for engine in others]
            lines.append([c.dtype, str(c.k), *further_cells(c, further), str(len(c.prompts)), label, *means, *ratios])
    return headers, lines
