"""Strict JSON text of a run's files: the one dumper of the results JSON, the merged JSON and the baseline."""

from __future__ import annotations

import json
from typing import Any


def strict_json(document: Any) -> str:
    """Indented JSON, a newline at the end; ``allow_nan=False`` raises ValueError on NaN or infinity, so a file
    stays strict JSON that any tool can read; a value JSON has no type for (a path) is written as its text."""
    return json.dumps(document, indent=2, allow_nan=False, default=str) + "\n"
