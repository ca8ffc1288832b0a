"""How a number with its 95% interval is written, the same in the terminal table, the report and ``compare``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..results.schema import CaseResult

#: beside a suspect decode speedup (results/invariants.py): above tau, which equal kernels on a steady machine forbid
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
