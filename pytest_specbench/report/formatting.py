"""How a number with its 95% interval is written, the same in the terminal table, the report and ``compare``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from ..results.schema import CaseResult

if TYPE_CHECKING:
    from ..results.statistics import Interval
    from .analysis import EngineComparison

#: beside a suspect decode speedup (results/invariants.py): above tau, so the two runs' kernels differed
SUSPECT_MARK = ">tau"


def value_with_interval(value: float, low: float | None, high: float | None, fmt: str = ".2f") -> str:
    """``1.42 [1.30, 1.55]``; a value without an interval (timed in one round) says so rather than look exact."""
    if low is None or high is None:
        return f"{value:{fmt}} [no interval]"
    return f"{value:{fmt}} [{low:{fmt}}, {high:{fmt}}]"


def with_interval(row: CaseResult, name: str = "decode_speedup", fmt: str = ".2f") -> str:
    """Field ``name`` of ``row`` with its ``<name>_ci_low``/``_ci_high``, as :func:`value_with_interval`."""
    return value_with_interval(getattr(row, name), getattr(row, f"{name}_ci_low"), getattr(row, f"{name}_ci_high"), fmt)


class DecodeSpeedup(Protocol):
    """What holds a decode speedup with its interval under the row's field names: a row, an answer, a batch point."""

    @property
    def decode_speedup(self) -> float | None: ...

    @property
    def decode_speedup_ci_low(self) -> float | None: ...

    @property
    def decode_speedup_ci_high(self) -> float | None: ...


def entry_with_interval(entry: DecodeSpeedup) -> str:
    """The decode speedup of an answer, a (dtype, k) of the view or a batch point, as :func:`value_with_interval`."""
    return value_with_interval(entry.decode_speedup, entry.decode_speedup_ci_low, entry.decode_speedup_ci_high)


def number(value: float | int | None, fmt: str = ".2f") -> str:
    """A table cell: the value in ``fmt``, empty for a value the row does not have (None)."""
    return "" if value is None else f"{value:{fmt}}"


def new_tokens_text(rows: Sequence[CaseResult], per_run: str = "") -> str:
    """The new tokens of a pair's runs, for its header, from the first row of each batch size: at batch 1 the
    run's count (``per_run`` after it); above 1 the batch's total and each sequence's count (one number when
    they agree), since a batch's sequences may stop at different lengths and its first alone misreports it."""
    first_of_size: dict[int, CaseResult] = {}
    for row in rows:
        if not row.turns:  # a multi-turn row sums its turns: a one-turn row says what each run decodes
            first_of_size.setdefault(row.batch, row)
    if not first_of_size and rows:  # only multi-turn rows: each turn's count
        return f"{rows[0].turns[0]['new_tokens']} new tokens per turn"
    parts = []
    for size, row in sorted(first_of_size.items()):
        per_sequence = row.batch_new_tokens
        if size <= 1:
            parts.append(f"{row.new_tokens} new tokens{per_run}")
        elif not per_sequence:  # a row written before each sequence's count was kept
            parts.append(f"batch {size}: {row.new_tokens} new tokens in the case's own sequence")
        else:
            each = str(per_sequence[0]) if len(set(per_sequence)) == 1 else ", ".join(map(str, per_sequence))
            parts.append(f"batch {size}: {sum(per_sequence)} new tokens per batch ({each} per sequence)")
    return "; ".join(parts)


def suspect_lines(results: Sequence[CaseResult]) -> list[str]:
    """Each suspect case (results/invariants.py) and its cause, one line each, in the order given."""
    return [f"{row.case}: {row.suspect_cause or 'suspect'}" for row in results if row.suspect]


def engine_table(comparisons: Sequence[EngineComparison]) -> tuple[list[str], list[list[str]]]:
    """Headers and text cells of the engines side by side: a line per (dtype, k, figure), a column per engine (its
    geometric mean over the prompts), then each other engine over the first one, paired by prompt."""
    from .analysis import ENGINE_FIGURES

    engines = list(dict.fromkeys(engine for c in comparisons for engine in c.engines))
    reference, others = engines[0], engines[1:]
    headers = ["dtype", "k", "prompts", "speedup", *engines, *(f"{engine} / {reference}" for engine in others)]

    def cell(interval: Interval | None) -> str:
        return "" if interval is None else value_with_interval(interval.estimate, interval.low, interval.high)

    lines = []
    for c in comparisons:
        for figure, label in ENGINE_FIGURES:
            means = [cell(c.means.get((figure, engine))) for engine in engines]
            ratios = [cell(c.ratios.get((figure, engine)) if c.engines[0] == reference else None) for engine in others]
            lines.append([c.dtype, str(c.k), str(len(c.prompts)), label, *means, *ratios])
    return headers, lines
