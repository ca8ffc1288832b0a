"""How a number with its 95% interval is written, the same in the terminal table, the report and ``compare``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..results.schema import row_value


def with_interval(row: Mapping[str, Any], name: str = "decode_speedup", fmt: str = ".2f") -> str:
    """``1.42 [1.30, 1.55]``: field ``name`` of ``row`` and its ``<name>_ci_low``/``_ci_high``; a row timed in
    one round has no interval, and says so rather than look exact."""
    value = f"{row_value(row, name):{fmt}}"
    low, high = row_value(row, f"{name}_ci_low"), row_value(row, f"{name}_ci_high")
    if low is None or high is None:
        return f"{value} [no interval]"
    return f"{value} [{low:{fmt}}, {high:{fmt}}]"


def number(value: float | int | None, fmt: str = ".2f") -> str:
    """A table cell: the value in ``fmt``, empty for a value the row does not have (None)."""
    return "" if value is None else f"{value:{fmt}}"


def new_tokens_text(rows: Sequence[Mapping[str, Any]], per_run: str = "") -> str:
    """The new tokens of a pair's runs, for its header, from the first row of each batch size: at batch 1 the
    run's count (``per_run`` after it); above 1 the batch's total and each sequence's count (one number when
    they agree), since a batch's sequences may stop at different lengths and its first alone misreports it."""
    first_of_size: dict[int, Mapping[str, Any]] = {}
    for row in rows:
        first_of_size.setdefault(row_value(row, "batch"), row)
    parts = []
    for size, row in sorted(first_of_size.items()):
        per_sequence = row_value(row, "batch_new_tokens")
        if size <= 1:
            parts.append(f"{row['new_tokens']} new tokens{per_run}")
        elif not per_sequence:  # a row written before each sequence's count was kept
            parts.append(f"batch {size}: {row['new_tokens']} new tokens in the case's own sequence")
        else:
            each = str(per_sequence[0]) if len(set(per_sequence)) == 1 else ", ".join(map(str, per_sequence))
            parts.append(f"batch {size}: {sum(per_sequence)} new tokens per batch ({each} per sequence)")
    return "; ".join(parts)
