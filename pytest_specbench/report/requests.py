"""Per-request statistics across a run's cases (results/requests.py): per (pair, engine, dtype, k, batch), every
request of every prompt, round and turn pooled, each counted once; the report's section and the summary's cell.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tabulate import tabulate

from ..results.requests import PERCENTILE_METHOD, SPREAD_PERCENTILES, TPOT_PERCENTILES, mean, percentiles
from ..results.schema import CaseResult
from .analysis import k_order
from .dtype_view import dtype_order
from .formatting import number

#: the figure of per-request acceptance, one per pair: ``request_acceptance_<pair>.png``
REQUEST_FIGURE = "request_acceptance"


@dataclass(frozen=True)
class RequestGroup:
    """The requests of one (pair, engine, dtype, k, batch), pooled over its cases."""

    pair: str
    engine: str
    dtype: str
    k: int | str
    batch: int
    cases: int
    acceptance: list[float | None]  # every request's, in case order
    tau: list[float | None]
    tpot_ms: list[float | None]
    token_weighted_acceptance: float | None  # accepted over drafted tokens, the cases' rows summed

    @property
    def requests(self) -> int:
        return len(self.tpot_ms)


def request_groups(results: Sequence[CaseResult]) -> list[RequestGroup]:
    """Each (pair, engine, dtype, k, batch) whose rows hold requests (rows of an older version hold none), the
    pairs in order of appearance, then dtype, k, engine and batch."""
    rows = [row for row in results if row.requests]
    pairs = list(dict.fromkeys(row.pair for row in rows))
    dtypes = dtype_order([row.dtype for row in rows])
    keys = sorted(
        {(row.pair, row.engine, row.dtype, row.k, row.batch) for row in rows},
        key=lambda key: (pairs.index(key[0]), dtypes.index(key[2]), k_order(key[3]), key[1], key[4]),
    )
    groups = []
    for key in keys:
        members = [row for row in rows if (row.pair, row.engine, row.dtype, row.k, row.batch) == key]
        drafted = sum(row.drafted_tokens for row in members)
        groups.append(
            RequestGroup(
                *key,
                cases=len(members),
                acceptance=[value for row in members for value in row.request_acceptance],
                tau=[value for row in members for value in row.request_tau],
                tpot_ms=[value for row in members for value in row.request_tpot_ms],
                token_weighted_acceptance=sum(row.accepted_tokens for row in members) / drafted if drafted else None,
            )
        )
    return groups


def figure_pairs(results: Sequence[CaseResult]) -> list[str]:
    """The pairs with a per-request acceptance histogram: those with a request that drafted something."""
    return list(dict.fromkeys(g.pair for g in request_groups(results) if any(v is not None for v in g.acceptance)))


def _triple(values: Sequence[float | None], qs: Sequence[float], fmt: str) -> str:
    """Percentiles as one cell, ``a / b / c``; empty where no value is known."""
    found = percentiles(values, qs)
    return "" if found[0] is None else " / ".join(f"{value:{fmt}}" for value in found)


def tpot_text(rows: Sequence[CaseResult]) -> str:
    """The summary's cell: the time per output token at p50 and p99 over the rows' requests, milliseconds."""
    return _triple([value for row in rows for value in row.request_tpot_ms], (50, 99), ".1f")


def requests_markdown(results: Sequence[CaseResult], figures: dict[str, str] | None = None) -> list[str]:
    """The report's section: per (pair, engine, dtype, k, batch) the requests' percentiles and the two means of
    acceptance, then each pair's histogram (``figures``: pair to its link). Empty where no row holds requests."""
    groups = request_groups(results)
    if not groups:
        return []
    engines, dtypes, batches = (len({getattr(g, name) for g in groups}) > 1 for name in ("engine", "dtype", "batch"))
    cells = [
        [
            group.pair,
            *([group.engine] if engines else []),
            *([group.dtype] if dtypes else []),
            group.k,
            *([group.batch] if batches else []),
            group.cases,
            group.requests,
            _triple(group.acceptance, SPREAD_PERCENTILES, ".3f"),
            number(mean(group.acceptance), ".3f"),
            number(group.token_weighted_acceptance, ".3f"),
            _triple(group.tau, SPREAD_PERCENTILES, ".2f"),
            _triple(group.tpot_ms, TPOT_PERCENTILES, ".2f"),
        ]
        for group in groups
    ]
    headers = [
        "pair",
        *(["engine"] if engines else []),
        *(["dtype"] if dtypes else []),
        "k",
        *(["batch"] if batches else []),
        "cases",
        "requests",
        "accept p10 / p50 / p90",
        "accept, mean per request",
        "accept, token-weighted",
        "tau p10 / p50 / p90",
        "TPOT p50 / p95 / p99 ms",
    ]
    lines = [
        "## Per-request statistics",
        "",
        "A request is one decode of one input: each timed round of a case, each turn of a multi-turn prompt, each "
        "row of a batch; every prompt's requests pooled, each counted once. TPOT is the time per output token "
        "after the first (prefill excluded, as vLLM's); at batch > 1 a row's runs until that row finished. "
        f"Percentiles by numpy.percentile ({PERCENTILE_METHOD} method): over few requests a high one lies "
        "between the slowest two. The token-weighted acceptance (accepted over drafted tokens of the cases' "
        "last runs) leans towards the requests that drafted most; the mean per request weighs each once.",
        "",
        tabulate(cells, headers=headers, tablefmt="github", disable_numparse=True),
        "",
    ]
    for pair, link in (figures or {}).items():
        lines += [f"![per-request acceptance for {pair}]({link})", ""]
    return lines


def requests_section(results: Sequence[CaseResult], figures_dir: Path | None, start: Path) -> list[str]:
    """:func:`requests_markdown` with each pair's histogram under ``figures_dir`` linked relative to ``start``
    (the report's folder)."""
    figures = {}
    if figures_dir is not None:
        for pair in figure_pairs(results):
            path = os.path.relpath(figures_dir / f"{REQUEST_FIGURE}_{pair}.png", start)
            figures[pair] = Path(path).as_posix()
    return requests_markdown(results, figures)
