"""The check that a value is a usable number, shared by the engine's parameters and the gate's values."""

from __future__ import annotations

import math


def is_finite_number(value: object) -> bool:
    """An int or a float that is finite: not a bool (``True`` is an int to Python, but no temperature or
    acceptance rate), not NaN (it compares false with every bound, so a range check would let it through
    unnoticed) and not infinite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
