"""How a number with its 95% interval is written, the same in the terminal table, the report and ``compare``."""

from __future__ import annotations

from collections.abc import Mapping
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
