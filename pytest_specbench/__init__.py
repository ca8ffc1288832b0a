"""pytest-specbench: benchmark speculative decoding of language models under pytest.

The decoding engine is a plain library and works without pytest:
``from pytest_specbench import speculative_generate``. Names are imported on
first use, so loading the pytest plugin does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "greedy_generate": "engine.decoding",
    "speculative_generate": "engine.decoding",
    "Drafter": "engine.drafters",
    "ModelDrafter": "engine.drafters",
    "PromptLookupDrafter": "engine.drafters",
    "DecodeStats": "engine.stats",
    "GenerationResult": "engine.stats",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
